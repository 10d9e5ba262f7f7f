#include "worker/bench-models.h"

#include <filesystem>
#include <nlohmann/json.hpp>

namespace spillway::worker {
namespace {

struct BenchModel {
  const char* name;
  const char* config_json;  // the fields of the model's config.json that ModelConfig reads
};

constexpr BenchModel kBenchModels[] = {
    {"tinyllama-1.1b",
     R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
      "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
      "num_key_value_heads": 4, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
      "rope_scaling": null, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})"},
    {"llama3.2-3b",
     R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
      "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24,
      "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
      "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "tie_word_embeddings": true,
      "bos_token_id": 128000, "eos_token_id": 128001})"},
    {"llama2-7b",
     R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
      "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 32, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
      "rope_scaling": null, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})"},
    // meta-llama/Llama-2-13b-hf's config.json: 13.0 B parameters, 208 GB of fp32 state.
    {"llama2-13b",
     R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
      "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40, "num_attention_heads": 40,
      "num_key_value_heads": 40, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
      "rope_scaling": null, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})"},
    {"qwen2.5-7b",
     R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 152064,
      "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
      "num_key_value_heads": 4, "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
      "rope_scaling": null, "tie_word_embeddings": false, "bos_token_id": 151643, "eos_token_id": 151643})"},
    {"qwen3-4b",
     R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
      "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
      "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
      "rope_theta": 1000000, "rope_scaling": null, "attention_bias": false, "use_sliding_window": false,
      "tie_word_embeddings": true, "bos_token_id": 151643, "eos_token_id": 151645})"},
    {"gemma3-1b",
     R"({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
      "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 256, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06,
      "rope_theta": 1000000, "rope_local_base_freq": 10000, "rope_scaling": null, "sliding_window": 512,
      "sliding_window_pattern": 6, "query_pre_attn_scalar": 256, "hidden_activation": "gelu_pytorch_tanh",
      "attn_logit_softcapping": null, "final_logit_softcapping": null, "attention_bias": false,
      "tie_word_embeddings": true, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0})"},
    {"phi-3-mini",
     R"({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 32064,
      "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 32, "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
      "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": null, "sliding_window": 2047,
      "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000})"},
};

}  // namespace

const char* bench_model_names() {
  return "tinyllama-1.1b, llama3.2-3b, llama2-7b, qwen2.5-7b, qwen3-4b, gemma3-1b, phi-3-mini";
}

Result<ModelConfig> bench_model_config(const std::string& shape) {
  for (const BenchModel& m : kBenchModels) {
    if (shape == m.name) return ModelConfig::from_json(nlohmann::json::parse(m.config_json));
  }
  if (auto preset = model_preset(shape); preset.ok()) return preset;
  if (std::filesystem::exists(shape)) return ModelConfig::load(shape);
  return not_found("unknown model shape '" + shape + "': use " + bench_model_names() +
                   ", a preset (" + model_preset_names() + ") or a model folder");
}

}  // namespace spillway::worker
