// ModelConfig: the shape of a decoder-only transformer, read from a Hugging Face `config.json`.
//
// Supported architectures (supported_architectures()): LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM and Gemma3ForCausalLM — GQA, q/k/v bias, tied
// or untied LM head, rope_theta (top-level or transformers v5 `rope_parameters`), Llama-3
// `rope_scaling`, explicit `head_dim`; Qwen3's per-head q/k RMSNorm; Phi-3's fused qkv_proj /
// gate_up_proj, LongRoPE ("longrope", older "su") and partial_rotary_factor; Gemma 3 text's
// (model_type gemma3_text) fields below. A plain value: copyable, no shared state.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace spillway {

// The MLP's activation: down(act(gate(x)) · up(x)).
enum class MlpActivation {
  kSilu,      // SwiGLU (Llama, Mistral, Qwen)
  kGeluTanh,  // GeGLU with torch's tanh GELU (Gemma's hidden_activation gelu_pytorch_tanh)
};

// The norm applied to each head of q and k after their projections, before RoPE (the parameters
// model.layers.N.self_attn.q_norm.weight and k_norm.weight, [head_dim]).
enum class QkNorm {
  kNone,
  kRms,  // Qwen3, Gemma 3: RMSNorm over head_dim, y = x / sqrt(mean(x²) + eps) · (w + offset),
         // offset ModelConfig::norm_weight_offset (Gemma's 1)
};

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
  // LongRoPE (Phi-3 "longrope", older "su"; transformers' _compute_longrope_parameters): empty
  // unless used; otherwise rotary_dim() / 2 factors each. inv_freq[i] = 1 / (factor[i] ·
  // theta^(2i / rotary_dim)), with short_factor when a sequence has at most
  // rope_original_max_position tokens, long_factor beyond (rope_factors()); cos and sin are scaled
  // by rope_attention_factor: given, else sqrt(1 + ln(s) / ln(original)) with s =
  // max_position_embeddings / original when s > 1, else 1.
  std::vector<float> rope_short_factor, rope_long_factor;
  float rope_attention_factor = 1.0f;
  bool rope_attention_factor_given = false;  // config.json gave attention_factor or factor
  // Only the first rotary_dim() = int(head_dim · partial_rotary_factor) dims of a head rotate (the
  // pairs (i, i + rotary_dim / 2)); the rest pass through (Phi-4-mini: 0.75).
  double partial_rotary_factor = 1.0;  // double, as transformers multiplies it
  // Query i sees key j only when i − j < sliding_window (transformers' sliding_window_overlay), on
  // the layers sliding_layers marks (every layer when it is empty: Phi-3, Mistral); 0 = none.
  int sliding_window = 0;
  std::vector<bool> sliding_layers;  // [num_layers] when some layers are full (Gemma's layer_types)
  QkNorm qk_norm = QkNorm::kNone;
  // Phi-3: q/k/v in one qkv_proj.weight [q_dim + 2 kv_dim, hidden] and gate/up in one
  // gate_up_proj.weight [2 intermediate, hidden] (gate first), kept fused as on disk
  // (parameter-layout.h).
  bool fused_projections = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always has them; Mistral never)
  bool tie_word_embeddings = false;

  // Gemma 3 (transformers' modeling_gemma3.py), defaults meaning "as Llama":
  // Every RMSNorm scales by (norm_weight_offset + w): 1 for Gemma3RMSNorm's (1 + w), 0 otherwise.
  float norm_weight_offset = 0.0f;
  // Gemma's four norms a layer: x1 = x + post_attention_layernorm(attn(input_layernorm(x))), out =
  // x1 + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x1))).
  bool sandwich_norms = false;
  MlpActivation mlp_activation = MlpActivation::kSilu;
  // Embeddings times sqrt(hidden_size), cast to the weights' dtype (Gemma3TextScaledWordEmbedding).
  bool scale_embeddings = false;
  // The scores' scale is query_pre_attn_scalar^-0.5; 0: head_dim^-0.5.
  float query_pre_attn_scalar = 0.0f;
  // RoPE of the sliding layers when they have their own (Gemma's rope_local_base_freq, unscaled);
  // 0: the sliding layers use rope_theta and its scaling like the others.
  float rope_local_theta = 0.0f;
  // Linear RoPE scaling (rope_type "linear": positions divided by the factor); 0 = none.
  float rope_linear_factor = 0.0f;

  int bos_token_id = -1;  // -1 when absent or null
  int eos_token_id = -1;
  // transformers' nn.Embedding(padding_idx=pad_token_id): the lookup gives this row no gradient
  // (BlockMath::embedding_backward). -1 when null, or absent but for Phi-3, whose Phi3Config
  // defaults it to 32000; export writes it back.
  int pad_token_id = -1;
  std::string torch_dtype = "float32";

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  // o_proj has a bias too: attention_bias in Llama and Qwen3 (transformers' LlamaAttention,
  // Qwen3Attention), never in Qwen2.
  bool o_proj_bias() const { return attention_bias && model_type != "qwen2"; }
  int rotary_dim() const { return static_cast<int>(head_dim * partial_rotary_factor); }
  bool longrope() const { return !rope_short_factor.empty(); }
  // LongRoPE's factors for sequences of `seq` tokens (positions 0..seq-1), as transformers'
  // longrope_frequency_update picks them: long_factor when seq > rope_original_max_position;
  // empty without LongRoPE.
  const std::vector<float>& rope_factors(int seq) const {
    return seq > rope_original_max_position ? rope_long_factor : rope_short_factor;
  }
  // The family in words for the model line ("Qwen3", "Phi-3 / Phi-4", ...).
  std::string family() const;
  // Whether layer `layer` attends through the sliding window.
  bool is_sliding(int layer) const {
    return sliding_window > 0 &&
           (sliding_layers.empty() || (layer < static_cast<int>(sliding_layers.size()) &&
                                       sliding_layers[static_cast<size_t>(layer)]));
  }
  // Layer `layer`'s window (0: none).
  int layer_window(int layer) const { return is_sliding(layer) ? sliding_window : 0; }
  // The attention scores' scale.
  float attention_scale() const;
  // Σ over layers of the keys a query at the end of a `seq`-token sequence attends (seq for a full
  // layer, min(window, seq) for a sliding one): the attention term of the FLOP count.
  double attended_keys(int seq) const;
  // Σ over layers of the (query, key) pairs a `seq`-token sequence scores under the causal mask
  // and the windows: seq·(seq + 1)/2 for a full layer.
  double attention_scores(int seq) const;

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

// "LlamaForCausalLM, MistralForCausalLM, ...": what from_json accepts.
std::string supported_architectures();

// Built-in presets for random initialisation ("llama-50m", "llama-tiny", ...); kNotFound lists
// the names.
Result<ModelConfig> model_preset(const std::string& name);
// Names of the presets, for help texts.
const char* model_preset_names();

}  // namespace spillway
