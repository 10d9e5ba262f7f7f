// The model shapes `spillway-worker bench` runs: the real Hugging Face configs of the models the
// GPU benchmark compares against (random-initialised: throughput does not depend on the weights).
#pragma once

#include <string>

#include "model/model-config.h"

namespace spillway::worker {

// "tinyllama-1.1b", "llama3.2-3b", "llama2-7b", "llama2-13b", "qwen2.5-7b", "qwen3-4b",
// "gemma3-1b", "phi-3-mini": the config.json of TinyLlama/TinyLlama-1.1B-Chat-v1.0,
// meta-llama/Llama-3.2-3B (Llama-3 rope scaling, tied embeddings), meta-llama/Llama-2-7b-hf,
// Qwen/Qwen2.5-7B (q/k/v biases), Qwen/Qwen3-4B (q/k norms, tied embeddings), google/gemma-3-1b-it
// (head_dim 256, five sliding-window layers of 512 to one global) and
// microsoft/Phi-3-mini-4k-instruct (fused projections), parsed as a model folder's would be;
// otherwise a preset name (model_preset: "llama-tiny" is stories260K's shape) or a path to a model
// folder or its config.json. kNotFound lists the names.
Result<ModelConfig> bench_model_config(const std::string& shape);

// The built-in names, for the usage line.
const char* bench_model_names();

}  // namespace spillway::worker
