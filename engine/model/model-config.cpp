#include "model/model-config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <vector>

#include "core/file-util.h"
#include "core/json-file.h"

namespace spillway {
namespace {

// The supported families: config.json's architecture and model_type, and the family in words.
struct Family {
  const char* architecture;
  const char* model_type;
  const char* name;
};
constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", "llama", "Llama"},       {"MistralForCausalLM", "mistral", "Mistral"},
    {"Qwen2ForCausalLM", "qwen2", "Qwen2"},       {"Qwen3ForCausalLM", "qwen3", "Qwen3"},
    {"Phi3ForCausalLM", "phi3", "Phi-3 / Phi-4"}, {"Gemma3ForCausalLM", "gemma3_text", "Gemma 3"},
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Levenshtein distance, for the closest supported name.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "X is not supported; supported: ...; closest: Y (what Y lacks)": Y the supported family whose
// architecture or model_type is nearest by edit distance (case-insensitive).
std::string unsupported_message(const std::string& architecture, const std::string& model_type) {
  const std::string what = !architecture.empty() ? architecture
                           : !model_type.empty() ? model_type
                                                 : std::string("(none)");
  std::string msg = "config.json: architecture '" + what +
                    "' is not supported; supported: " + supported_architectures();
  if (architecture.empty() && model_type.empty()) return msg;
  const Family* best = nullptr;
  size_t best_d = 0;
  for (const Family& f : kFamilies) {
    size_t d = static_cast<size_t>(-1);
    if (!architecture.empty()) d = edit_distance(lower(architecture), lower(f.architecture));
    if (!model_type.empty()) d = std::min(d, edit_distance(lower(model_type), f.model_type));
    if (!best || d < best_d) best = &f, best_d = d;
  }
  const std::string l = lower(what + " " + model_type);
  std::string note;
  if (l.find("moe") != std::string::npos || l.find("mixtral") != std::string::npos)
    note = " (no mixture of experts)";
  else if (l.find("vl") != std::string::npos || l.find("vision") != std::string::npos ||
           l.find("conditionalgeneration") != std::string::npos)
    note = " (text only: no vision tower)";
  return msg + "; closest: " + best->architecture + note;
}

// Reads an optional numeric field; a present field of the wrong type is an error naming it. An
// integer field must hold a whole number within its type (5.9 layers or 2^40 heads are errors,
// never truncated or wrapped); a floating-point one must be finite.
template <typename T>
Status read_number(const nlohmann::json& j, const char* key, T* out, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required)
      return invalid_argument(std::string("config.json: missing required field '") + key + "'");
    return {};
  }
  if (!it->is_number())
    return invalid_argument(std::string("config.json: field '") + key + "' must be a number");
  auto bad = [&](const char* what) {
    return invalid_argument(std::string("config.json: field '") + key + "' " + what + ", got " +
                            it->dump().substr(0, 40));
  };
  const double v = it->get<double>();
  if constexpr (std::is_integral_v<T>) {
    const bool whole = it->is_number_integer() || (std::isfinite(v) && v == std::floor(v));
    if (!whole) return bad("must be a whole number");
    const bool fits =
        it->is_number_unsigned()
            ? it->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
            : v >= static_cast<double>(std::numeric_limits<T>::min()) &&
                  v <= static_cast<double>(std::numeric_limits<T>::max());
    if (!fits) return bad("is out of range");
    *out = it->is_number_integer() ? it->get<T>() : static_cast<T>(v);
  } else {
    if (!std::isfinite(static_cast<T>(v))) return bad("must be finite");
    *out = static_cast<T>(v);
  }
  return {};
}

int read_token_id(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1;
  if (it->is_number_integer()) return it->get<int>();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) return (*it)[0].get<int>();
  return -1;
}

// One RoPE parameter set of Gemma 3: `rope_type` ("default" or "linear", the older key "type"),
// and rope_theta when present. kUnsupported names another type.
Status read_gemma3_rope(const nlohmann::json& rp, const char* which, float* theta,
                        float* linear_factor) {
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    if (auto t = rp.find(key); type.empty() && t != rp.end() && t->is_string())
      type = t->get<std::string>();
  }
  SPW_RETURN_IF_ERROR(read_number(rp, "rope_theta", theta, false));
  if (type == "linear") {
    if (!linear_factor)
      return unsupported(std::string("config.json: linear rope scaling of the ") + which +
                         " layers is not supported (only the full-attention layers')");
    return read_number(rp, "factor", linear_factor, true);
  }
  if (!type.empty() && type != "default")
    return unsupported(std::string("config.json: rope type '") + type + "' of the " + which +
                       " layers is not supported for Gemma 3 (supported: default, linear)");
  return {};
}

// Gemma 3's own fields (transformers' Gemma3TextConfig, v4 and v5 keys), its defaults where
// config.json leaves a field out, and what Spillway refuses: logit soft-capping, bidirectional
// attention, attention biases, another activation.
Status read_gemma3(const nlohmann::json& j, ModelConfig* c) {
  c->norm_weight_offset = 1.0f;
  c->sandwich_norms = true;
  c->qk_norm = QkNorm::kRms;
  c->scale_embeddings = true;
  c->mlp_activation = MlpActivation::kGeluTanh;
  std::string act = "gelu_pytorch_tanh";
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    if (auto a = j.find(key); a != j.end() && a->is_string()) act = a->get<std::string>();
  }
  if (act != "gelu_pytorch_tanh")
    return unsupported("config.json: hidden_activation '" + act +
                       "' is not supported for Gemma 3 (only gelu_pytorch_tanh)");
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (auto s = j.find(key); s != j.end() && !s->is_null())
      return unsupported(std::string("config.json: ") + key + " = " + s->dump() +
                         " is not supported (Gemma 3 has none; Gemma 2's soft-capping is not "
                         "implemented): set it to null if the model was trained without it");
  }
  if (auto b = j.find("use_bidirectional_attention");
      b != j.end() && b->is_boolean() && b->get<bool>())
    return unsupported(
        "config.json: use_bidirectional_attention = true (an encoder-style Gemma 3) is not "
        "supported; Spillway trains causal language models");
  if (auto ab = j.find("attention_bias"); ab != j.end() && ab->is_boolean() && ab->get<bool>())
    return unsupported("config.json: attention_bias = true is not supported for Gemma 3");

  c->query_pre_attn_scalar = 256.0f;
  SPW_RETURN_IF_ERROR(read_number(j, "query_pre_attn_scalar", &c->query_pre_attn_scalar, false));
  if (!(c->query_pre_attn_scalar > 0))
    return invalid_argument("config.json: query_pre_attn_scalar must be positive");
  c->sliding_window = 4096;
  if (auto w = j.find("sliding_window"); w != j.end() && w->is_null()) {
    c->sliding_window = 0;
  } else {
    SPW_RETURN_IF_ERROR(read_number(j, "sliding_window", &c->sliding_window, false));
  }
  if (c->sliding_window < 0)
    return invalid_argument("config.json: sliding_window must be positive or null");

  // layer_types, else the older sliding_window_pattern: every pattern-th layer is full.
  c->sliding_layers.assign(static_cast<size_t>(std::max(c->num_layers, 0)), false);
  if (auto lt = j.find("layer_types"); lt != j.end() && !lt->is_null()) {
    if (!lt->is_array() || lt->size() != static_cast<size_t>(c->num_layers))
      return invalid_argument("config.json: layer_types must list num_hidden_layers (" +
                              std::to_string(c->num_layers) + ") layer types");
    for (size_t i = 0; i < lt->size(); ++i) {
      const auto& t = (*lt)[i];
      if (t == "sliding_attention") {
        c->sliding_layers[i] = true;
      } else if (t != "full_attention") {
        return invalid_argument("config.json: layer_types[" + std::to_string(i) + "] is " +
                                t.dump() +
                                ", expected \"sliding_attention\" or \"full_attention\"");
      }
    }
  } else {
    int pattern = 6;
    SPW_RETURN_IF_ERROR(read_number(j, "sliding_window_pattern", &pattern, false));
    if (pattern <= 0)
      return invalid_argument("config.json: sliding_window_pattern must be positive");
    for (int i = 0; i < c->num_layers; ++i) c->sliding_layers[i] = (i + 1) % pattern != 0;
  }

  // RoPE: full layers rope_theta (default 1e6) with rope_scaling, sliding layers
  // rope_local_base_freq (default 1e4) unscaled; transformers v5 nests both in rope_parameters.
  c->rope_theta = 1e6f;
  c->rope_local_theta = 1e4f;
  SPW_RETURN_IF_ERROR(read_number(j, "rope_theta", &c->rope_theta, false));
  SPW_RETURN_IF_ERROR(read_number(j, "rope_local_base_freq", &c->rope_local_theta, false));
  if (auto rs = j.find("rope_scaling"); rs != j.end() && rs->is_object())
    SPW_RETURN_IF_ERROR(
        read_gemma3_rope(*rs, "full-attention", &c->rope_theta, &c->rope_linear_factor));
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    if (auto f = rp->find("full_attention"); f != rp->end() && f->is_object())
      SPW_RETURN_IF_ERROR(
          read_gemma3_rope(*f, "full-attention", &c->rope_theta, &c->rope_linear_factor));
    if (auto s = rp->find("sliding_attention"); s != rp->end() && s->is_object())
      SPW_RETURN_IF_ERROR(read_gemma3_rope(*s, "sliding-attention", &c->rope_local_theta, nullptr));
  }
  if (!(c->rope_local_theta > 0))
    return invalid_argument("config.json: rope_local_base_freq must be positive");
  if (c->rope_linear_factor != 0 && !(c->rope_linear_factor > 0))
    return invalid_argument("config.json: the linear rope scaling factor must be positive");
  return {};
}

}  // namespace

float ModelConfig::attention_scale() const {
  return query_pre_attn_scalar > 0 ? 1.0f / std::sqrt(query_pre_attn_scalar)
                                   : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

double ModelConfig::attended_keys(int seq) const {
  double keys = 0;
  for (int i = 0; i < num_layers; ++i) {
    const int w = layer_window(i);
    keys += w > 0 ? std::min(w, seq) : seq;
  }
  return keys;
}

double ModelConfig::attention_scores(int seq) const {
  const double full = static_cast<double>(seq) * (seq + 1.0) / 2.0;
  double scores = 0;
  for (int i = 0; i < num_layers; ++i) {
    const int w = layer_window(i);
    // Query t sees min(t + 1, w) keys: the triangle up to w, then w each.
    scores += w > 0 && w < seq ? w * (w + 1.0) / 2.0 + static_cast<double>(seq - w) * w : full;
  }
  return scores;
}

Status ModelConfig::validate() const {
  auto positive = [](int v, const char* name) -> Status {
    if (v <= 0)
      return invalid_argument(std::string("config.json: '") + name + "' must be positive, got " +
                              std::to_string(v));
    return {};
  };
  SPW_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  SPW_RETURN_IF_ERROR(positive(hidden_size, "hidden_size"));
  SPW_RETURN_IF_ERROR(positive(intermediate_size, "intermediate_size"));
  SPW_RETURN_IF_ERROR(positive(num_layers, "num_hidden_layers"));
  SPW_RETURN_IF_ERROR(positive(num_heads, "num_attention_heads"));
  SPW_RETURN_IF_ERROR(positive(num_kv_heads, "num_key_value_heads"));
  SPW_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  // Upper bounds far above any real model (Llama 3.1 405B: hidden 16384, 126 layers, vocab 128256)
  // that keep every size the engine computes (a tensor's elements, heads x head_dim, a layer's
  // parameters) well inside int64 and the per-row ones inside int32.
  auto at_most = [](int64_t v, int64_t max, const std::string& name) -> Status {
    if (v > max)
      return invalid_argument("config.json: '" + name + "' is " + std::to_string(v) +
                              ", more than the " + std::to_string(max) + " Spillway supports");
    return {};
  };
  SPW_RETURN_IF_ERROR(at_most(vocab_size, int64_t{1} << 24, "vocab_size"));
  SPW_RETURN_IF_ERROR(at_most(hidden_size, int64_t{1} << 17, "hidden_size"));
  SPW_RETURN_IF_ERROR(at_most(intermediate_size, int64_t{1} << 20, "intermediate_size"));
  SPW_RETURN_IF_ERROR(at_most(num_layers, 4096, "num_hidden_layers"));
  SPW_RETURN_IF_ERROR(at_most(num_heads, 4096, "num_attention_heads"));
  SPW_RETURN_IF_ERROR(at_most(head_dim, 1024, "head_dim"));
  SPW_RETURN_IF_ERROR(
      at_most(int64_t{num_heads} * head_dim, int64_t{1} << 20, "num_attention_heads x head_dim"));
  if (num_heads % num_kv_heads != 0)
    return invalid_argument("config.json: num_attention_heads (" + std::to_string(num_heads) +
                            ") must be a multiple of num_key_value_heads (" +
                            std::to_string(num_kv_heads) + ")");
  if (head_dim % 2 != 0) return invalid_argument("config.json: head_dim must be even for RoPE");
  if (!(rms_norm_eps > 0)) return invalid_argument("config.json: rms_norm_eps must be positive");
  if (!(rope_theta > 0)) return invalid_argument("config.json: rope_theta must be positive");
  const int rot = rotary_dim();
  if (!(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) || rot <= 0 || rot % 2 != 0)
    return invalid_argument(
        "config.json: partial_rotary_factor " + std::to_string(partial_rotary_factor) +
        " gives a rotary dimension of " + std::to_string(rot) + " for head_dim " +
        std::to_string(head_dim) + "; it must be positive and even");
  if (rot != head_dim && attention_bias)
    return unsupported(
        "config.json: q/k/v biases with partial_rotary_factor < 1 are not supported");
  if (longrope()) {
    for (const auto* f : {&rope_short_factor, &rope_long_factor}) {
      if (static_cast<int>(f->size()) != rot / 2)
        return invalid_argument(std::string("config.json: rope_scaling.") +
                                (f == &rope_short_factor ? "short_factor" : "long_factor") +
                                " has " + std::to_string(f->size()) +
                                " values; the rotary dimension " + std::to_string(rot) + " needs " +
                                std::to_string(rot / 2));
    }
    if (rope_original_max_position <= 0)
      return invalid_argument("config.json: original_max_position_embeddings must be positive");
  }
  if (sliding_window < 0)
    return invalid_argument("config.json: sliding_window must be positive or null");
  if (!sliding_layers.empty() && sliding_layers.size() != static_cast<size_t>(num_layers))
    return invalid_argument("config.json: layer_types must list num_hidden_layers layer types");
  return {};
}

std::string ModelConfig::family() const {
  for (const Family& f : kFamilies) {
    if (architecture == f.architecture) return f.name;
  }
  return architecture;
}

std::string supported_architectures() {
  std::string s;
  for (const Family& f : kFamilies) s += (s.empty() ? "" : ", ") + std::string(f.architecture);
  return s;
}

Result<ModelConfig> ModelConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return invalid_argument("config.json: expected a JSON object");
  ModelConfig c;
  auto arch = j.find("architectures");
  if (arch != j.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string()) {
    c.architecture = (*arch)[0].get<std::string>();
  }
  if (j.contains("model_type") && j["model_type"].is_string())
    c.model_type = j["model_type"].get<std::string>();
  if (c.architecture == "Gemma3ForConditionalGeneration" || c.model_type == "gemma3") {
    // The multimodal checkpoints (gemma-3-4b/12b/27b): a vision tower beside the language model,
    // whose weights sit under other names (language_model.model.*) in a nested text_config.
    return unsupported(
        "config.json: Gemma3ForConditionalGeneration is Gemma 3's multimodal model (text and "
        "images), not supported; Spillway trains Gemma3ForCausalLM, the text-only model "
        "(model_type gemma3_text: gemma-3-1b and gemma-3-270m, or a text-only conversion of "
        "the larger ones)");
  }
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    if (c.architecture.empty() ? c.model_type == f.model_type : c.architecture == f.architecture)
      family = &f;
  }
  if (!family) return unsupported(unsupported_message(c.architecture, c.model_type));
  c.architecture = family->architecture;
  if (c.model_type.empty()) c.model_type = family->model_type;
  const bool qwen3 = c.model_type == "qwen3", phi3 = c.model_type == "phi3";

  SPW_RETURN_IF_ERROR(read_number(j, "vocab_size", &c.vocab_size, true));
  SPW_RETURN_IF_ERROR(read_number(j, "hidden_size", &c.hidden_size, true));
  SPW_RETURN_IF_ERROR(read_number(j, "intermediate_size", &c.intermediate_size, true));
  SPW_RETURN_IF_ERROR(read_number(j, "num_hidden_layers", &c.num_layers, true));
  SPW_RETURN_IF_ERROR(read_number(j, "num_attention_heads", &c.num_heads, true));
  c.num_kv_heads = c.num_heads;
  SPW_RETURN_IF_ERROR(read_number(j, "num_key_value_heads", &c.num_kv_heads, false));
  if (c.num_heads > 0) c.head_dim = c.hidden_size / c.num_heads;
  if (qwen3) c.head_dim = 128;  // Qwen3Config's default, not hidden / heads
  const bool gemma3 = c.model_type == "gemma3_text";
  if (gemma3) c.head_dim = 256;  // Gemma3TextConfig's default
  SPW_RETURN_IF_ERROR(read_number(j, "head_dim", &c.head_dim, false));
  SPW_RETURN_IF_ERROR(read_number(j, "max_position_embeddings", &c.max_position_embeddings, false));
  SPW_RETURN_IF_ERROR(read_number(j, "rms_norm_eps", &c.rms_norm_eps, false));
  if (gemma3) {
    c.tie_word_embeddings = true;  // Gemma3TextConfig's default
    SPW_RETURN_IF_ERROR(read_gemma3(j, &c));
  }

  // rope_theta: top level (transformers v4) or inside rope_parameters (v5); rope_scaling (v4) or
  // rope_parameters (v5) carries the scaling; read_gemma3 read Gemma's own.
  if (!gemma3) {
    c.rope_theta = c.model_type == "qwen2" ? 1e6f : 10000.0f;
    SPW_RETURN_IF_ERROR(read_number(j, "rope_theta", &c.rope_theta, false));
  }
  SPW_RETURN_IF_ERROR(read_number(j, "partial_rotary_factor", &c.partial_rotary_factor, false));
  const nlohmann::json* scaling = nullptr;
  if (auto rp = j.find("rope_parameters"); !gemma3 && rp != j.end() && rp->is_object()) {
    SPW_RETURN_IF_ERROR(read_number(*rp, "rope_theta", &c.rope_theta, false));
    SPW_RETURN_IF_ERROR(read_number(*rp, "partial_rotary_factor", &c.partial_rotary_factor, false));
    scaling = &*rp;
  }
  if (auto rs = j.find("rope_scaling"); !gemma3 && rs != j.end() && rs->is_object()) scaling = &*rs;
  if (phi3) {
    // Phi3Config always has original_max_position_embeddings (default 4096), and transformers'
    // standardize_rope_params takes it over the scaling's own.
    c.rope_original_max_position = 4096;
    SPW_RETURN_IF_ERROR(
        read_number(j, "original_max_position_embeddings", &c.rope_original_max_position, false));
  }
  if (scaling) {
    std::string type;
    if (auto t = scaling->find("rope_type"); t != scaling->end() && t->is_string())
      type = t->get<std::string>();
    if (auto t = scaling->find("type"); type.empty() && t != scaling->end() && t->is_string())
      type = t->get<std::string>();
    if (type == "llama3" && !phi3) {
      SPW_RETURN_IF_ERROR(read_number(*scaling, "factor", &c.rope_scaling_factor, true));
      SPW_RETURN_IF_ERROR(read_number(*scaling, "low_freq_factor", &c.rope_low_freq_factor, false));
      SPW_RETURN_IF_ERROR(
          read_number(*scaling, "high_freq_factor", &c.rope_high_freq_factor, false));
      SPW_RETURN_IF_ERROR(read_number(*scaling, "original_max_position_embeddings",
                                      &c.rope_original_max_position, false));
    } else if (phi3 && (type == "longrope" || type == "su" || type == "yarn")) {
      // Phi3Config renames "su" and "yarn" to "longrope".
      auto factors = [&](const char* key, std::vector<float>* out) -> Status {
        auto f = scaling->find(key);
        if (f == scaling->end() || !f->is_array() || f->empty())
          return invalid_argument(std::string("config.json: rope_scaling.") + key +
                                  " must be a list of numbers for longrope");
        for (const auto& v : *f) {
          if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
            return invalid_argument(std::string("config.json: rope_scaling.") + key +
                                    " must hold positive numbers, got " + v.dump().substr(0, 40));
          out->push_back(v.get<float>());
        }
        return {};
      };
      SPW_RETURN_IF_ERROR(factors("short_factor", &c.rope_short_factor));
      SPW_RETURN_IF_ERROR(factors("long_factor", &c.rope_long_factor));
      double factor = 0, attention = 0;
      SPW_RETURN_IF_ERROR(read_number(*scaling, "factor", &factor, false));
      SPW_RETURN_IF_ERROR(read_number(*scaling, "attention_factor", &attention, false));
      if (attention > 0) {
        c.rope_attention_factor = static_cast<float>(attention);
        c.rope_attention_factor_given = true;
      } else {
        // transformers' _compute_longrope_parameters, in double as there.
        if (factor > 0) {
          c.rope_attention_factor_given = true;  // written back as attention_factor
        } else {
          factor = static_cast<double>(c.max_position_embeddings) / c.rope_original_max_position;
        }
        c.rope_attention_factor =
            factor <= 1.0
                ? 1.0f
                : static_cast<float>(std::sqrt(
                      1.0 + std::log(factor) / std::log(double(c.rope_original_max_position))));
      }
    } else if (!type.empty() && type != "default") {
      return unsupported("config.json: rope scaling type '" + type + "' is not supported for " +
                         c.architecture + " (supported: default, " +
                         (phi3 ? "longrope" : "llama3") + ")");
    }
  }
  if (!phi3 && c.partial_rotary_factor != 1.0)
    return unsupported("config.json: partial_rotary_factor is supported for Phi3ForCausalLM only");
  // Phi-3's and Mistral's window applies to every layer (transformers' Phi3Model and MistralModel
  // mask with create_sliding_window_causal_mask when sliding_window is set).
  const bool windowed = phi3 || c.model_type == "mistral";
  if (auto sw = j.find("sliding_window"); windowed && sw != j.end() && !sw->is_null()) {
    SPW_RETURN_IF_ERROR(read_number(j, "sliding_window", &c.sliding_window, false));
  }
  if (auto sw = j.find("use_sliding_window"); sw != j.end() && sw->is_boolean() && sw->get<bool>())
    return unsupported("config.json: use_sliding_window = true is not supported (" +
                       c.architecture +
                       " with sliding-window attention); set it to false to train with full "
                       "attention, as the released " +
                       c.architecture + " checkpoints do");
  if (qwen3) c.qk_norm = QkNorm::kRms;
  if (phi3) c.fused_projections = true;

  if (c.model_type == "qwen2") {
    c.attention_bias = true;  // Qwen2 always has q/k/v biases
  } else if (auto ab = j.find("attention_bias");
             !phi3 && c.model_type != "mistral" && ab != j.end() && ab->is_boolean()) {
    // MistralAttention and Phi3Attention have no biases whatever the config says.
    c.attention_bias = ab->get<bool>();
  }
  if (auto mb = j.find("mlp_bias"); mb != j.end() && mb->is_boolean() && mb->get<bool>())
    return unsupported("config.json: mlp_bias = true is not supported");
  if (auto tie = j.find("tie_word_embeddings"); tie != j.end() && tie->is_boolean())
    c.tie_word_embeddings = tie->get<bool>();
  if (auto act = j.find("hidden_act");
      !gemma3 && act != j.end() && act->is_string() && act->get<std::string>() != "silu")
    return unsupported("config.json: hidden_act '" + act->get<std::string>() +
                       "' is not supported (only silu)");
  c.bos_token_id = read_token_id(j, "bos_token_id");
  c.eos_token_id = read_token_id(j, "eos_token_id");
  c.pad_token_id = read_token_id(j, "pad_token_id");
  if (phi3 && !j.contains("pad_token_id")) c.pad_token_id = 32000;  // Phi3Config's default
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (auto d = j.find(key); d != j.end() && d->is_string()) c.torch_dtype = d->get<std::string>();
  }
  SPW_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<ModelConfig> ModelConfig::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  auto text = read_file(file);
  if (!text.ok()) {
    if (text.status().code() == ErrorCode::kNotFound)
      return not_found(file +
                       ": no config.json; a model folder in Hugging Face layout holds config.json "
                       "and model.safetensors");
    return text.status();
  }
  SPW_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(*text, file));
  auto c = from_json(j);
  if (!c.ok()) return c.status().with_context(file);
  return c;
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j;
  j["architectures"] = {architecture};
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling_factor > 0) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope_scaling_factor},
                         {"low_freq_factor", rope_low_freq_factor},
                         {"high_freq_factor", rope_high_freq_factor},
                         {"original_max_position_embeddings", rope_original_max_position}};
  } else if (longrope()) {
    j["rope_scaling"] = {{"type", "longrope"},
                         {"short_factor", rope_short_factor},
                         {"long_factor", rope_long_factor}};
    if (rope_attention_factor_given) j["rope_scaling"]["attention_factor"] = rope_attention_factor;
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (model_type == "phi3") {
    j["original_max_position_embeddings"] = rope_original_max_position;
    j["partial_rotary_factor"] = partial_rotary_factor;
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nullptr;
  } else {
    if (model_type != "qwen2") j["attention_bias"] = attention_bias;
    j["mlp_bias"] = false;
  }
  if (model_type == "mistral")
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nullptr;
  if (model_type == "qwen3" || model_type == "qwen2") j["use_sliding_window"] = false;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["bos_token_id"] = bos_token_id >= 0 ? nlohmann::json(bos_token_id) : nlohmann::json(nullptr);
  j["eos_token_id"] = eos_token_id >= 0 ? nlohmann::json(eos_token_id) : nlohmann::json(nullptr);
  j["pad_token_id"] = pad_token_id >= 0 ? nlohmann::json(pad_token_id) : nlohmann::json(nullptr);
  j["torch_dtype"] = "float32";
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  if (model_type == "gemma3_text") {
    // The Hub's (transformers 4.x) keys, which transformers 5 reads as well.
    j.erase("hidden_act");
    j.erase("mlp_bias");
    j["hidden_activation"] = "gelu_pytorch_tanh";
    // An int, as Gemma3TextConfig declares it (transformers 5 refuses 256.0), unless it is not
    // whole.
    const float scalar = query_pre_attn_scalar;
    j["query_pre_attn_scalar"] = scalar == std::floor(scalar) && scalar < 1e9f
                                     ? nlohmann::json(static_cast<int64_t>(scalar))
                                     : nlohmann::json(scalar);
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nullptr;
    nlohmann::json types = nlohmann::json::array();
    for (int i = 0; i < num_layers; ++i)
      types.push_back(is_sliding(i) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    j["rope_local_base_freq"] = rope_local_theta;
    j["rope_scaling"] = rope_linear_factor > 0 ? nlohmann::json{{"rope_type", "linear"},
                                                                {"factor", rope_linear_factor}}
                                               : nlohmann::json(nullptr);
    j["attn_logit_softcapping"] = nullptr;
    j["final_logit_softcapping"] = nullptr;
  }
  return j;
}

namespace {
struct Preset {
  const char* name;
  int vocab, hidden, inter, layers, heads, kv_heads, max_pos;
};
// "llama-50m" is the ~50M-parameter benchmark model of the issue; the others bracket it.
constexpr Preset kPresets[] = {
    {"llama-tiny", 512, 64, 172, 5, 8, 4, 512},  // stories260K's shape, ~0.26M
    {"llama-byte-5m", 258, 256, 688, 6, 8, 4,
     1024},                                       // ~4.8M, byte tokenizer: the README's default job
    {"llama-5m", 4096, 256, 688, 6, 8, 4, 1024},  // ~5M
    {"llama-50m", 32000, 512, 1376, 8, 8, 8, 2048},    // ~50M
    {"llama-1b", 32000, 2048, 5504, 22, 32, 4, 4096},  // TinyLlama-1.1B's shape
    {"llama-7b", 32000, 4096, 11008, 32, 32, 32, 4096},
    {"llama-13b", 32000, 5120, 13824, 40, 40, 40, 4096},
    {"llama-70b", 32000, 8192, 28672, 80, 64, 8, 4096},
};
}  // namespace

const char* model_preset_names() {
  return "llama-tiny, llama-byte-5m, llama-5m, llama-50m, llama-1b, llama-7b, llama-13b, llama-70b";
}

Result<ModelConfig> model_preset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig c;
    c.architecture = "LlamaForCausalLM";
    c.model_type = "llama";
    c.vocab_size = p.vocab;
    c.hidden_size = p.hidden;
    c.intermediate_size = p.inter;
    c.num_layers = p.layers;
    c.num_heads = p.heads;
    c.num_kv_heads = p.kv_heads;
    c.head_dim = p.hidden / p.heads;
    c.max_position_embeddings = p.max_pos;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.tie_word_embeddings = false;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
  }
  return not_found("unknown model preset '" + name + "'; presets: " + model_preset_names());
}

}  // namespace spillway
