// Export of a trained model as a Hugging Face folder that transformers loads with
// AutoModelForCausalLM.from_pretrained: model.safetensors (fp32, sharded above 5 GB) plus
// config.json, and the tokenizer files copied from `tokenizer_source` (a model folder or a
// tokenizer file). Written into `out.tmp-<pid>` and renamed, so a failed export leaves the
// previous one intact.
#pragma once

#include <string>

#include "data/tokenizer.h"
#include "train/model-state.h"

namespace spillway {

// Marks an export trained with the built-in byte tokenizer ("builtin:bytes").
inline constexpr const char* kBuiltinTokenizerMarker = "spillway_tokenizer.json";

// Names the built-in byte tokenizer where a tokenizer path is expected (job.json model.tokenizer).
inline constexpr const char* kBuiltinBytesTokenizer = "builtin:bytes";

// A tokenizer by path: the built-in byte tokenizer for "builtin:bytes" or a model folder holding
// the marker (an export of such a model), else Tokenizer::load(path).
Result<std::unique_ptr<Tokenizer>> load_model_tokenizer(const std::string& path);

// Whether `path` names a tokenizer: "builtin:bytes", a file, or a folder holding tokenizer.json,
// tokenizer.model or the marker. False for a model folder shipped without tokenizer files, which
// can still be trained on pre-tokenized data and exported without a tokenizer.
bool has_tokenizer_files(const std::string& path);

// `tokenizer_source`: a model folder, a tokenizer file, "builtin:bytes", or empty for none (a
// model trained on pre-tokenized data). kNotFound when it names no tokenizer (nothing is written).
Status export_model(const ModelState& state, const std::string& tokenizer_source, const std::string& out);

}  // namespace spillway
