// ModelConfig: the shape of a decoder-only transformer, read from a Hugging Face `config.json`.
//
// Supported architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (GQA, q/k/v
// bias, tied or untied LM head, rope_theta — top-level or transformers v5 `rope_parameters` —
// Llama-3 `rope_scaling`, explicit `head_dim`). A plain value: copyable, no shared state.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/status.h"

namespace spillway {

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", ...
  std::string model_type;    // "llama", "mistral", "qwen2"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // hidden_size / num_heads unless config.json gives it
  int max_position_embeddings = 2048;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  // Llama-3 rope scaling (rope_type "llama3"); factor 0 = none.
  float rope_scaling_factor = 0.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_max_position = 8192;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
  bool tie_word_embeddings = false;
  int bos_token_id = -1;  // -1 when absent or null
  int eos_token_id = -1;
  std::string torch_dtype = "float32";

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }

  // Parses a config.json document. kUnsupported names an unknown architecture and lists the
  // supported ones; kInvalidArgument names a missing or inconsistent field.
  static Result<ModelConfig> from_json(const nlohmann::json& j);
  // Reads `dir/config.json` (or `path` itself when it is a file).
  static Result<ModelConfig> load(const std::string& path);
  // The config.json transformers writes for this config (used by export).
  nlohmann::json to_json() const;
  // Checks the invariants (positive sizes, heads divide, GQA groups); kInvalidArgument otherwise.
  Status validate() const;
};

// Built-in presets for random initialisation ("llama-50m", "llama-tiny", ...); kNotFound lists
// the names.
Result<ModelConfig> model_preset(const std::string& name);
// Names of the presets, for help texts.
const char* model_preset_names();

}  // namespace spillway
