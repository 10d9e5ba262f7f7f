#include "model/gguf-arch.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

namespace spillway {
namespace {
using nlohmann::json;

// convert's find_hparam: the first of `keys` that `hparams` holds (null counts as absent).
const json* find_hparam(const json& hparams, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = hparams.find(k);
    if (it != hparams.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

// TextModel.__init__'s rope_parameters: config's rope_parameters (transformers v5) or rope_scaling,
// with rope_theta and the local (sliding-window) theta mirrored in.
json rope_parameters(const json& hparams) {
  json rp = json::object();
  if (const json* p = find_hparam(hparams, {"rope_parameters", "rope_scaling"});
      p && p->is_object())
    rp = *p;
  if (!rp.contains("full_attention") && !rp.contains("sliding_attention")) {
    if (const json* local =
            find_hparam(hparams, {"local_rope_theta", "rope_local_theta", "rope_theta_local",
                                  "swa_rope_theta", "rope_local_base_freq"}))
      rp["sliding_attention"] = {{"rope_theta", *local}};
    if (const json* theta =
            find_hparam(hparams, {"global_rope_theta", "rope_global_theta", "rope_theta_global",
                                  "rope_theta", "rotary_emb_base"});
        theta && !rp.contains("rope_theta"))
      rp["rope_theta"] = *theta;
    if (!rp.contains("rope_type") && rp.contains("type")) rp["rope_type"] = rp["type"];
    if (const json* f = find_hparam(hparams, {"partial_rotary_factor", "rope_pct", "rope_percent"});
        f && !rp.contains("partial_rotary_factor"))
      rp["partial_rotary_factor"] = *f;
    if (const json* o = find_hparam(hparams, {"original_max_position_embeddings"});
        o && !rp.contains("original_max_position_embeddings"))
      rp["original_max_position_embeddings"] = *o;
  }
  return rp;
}

const json& full_attention(const json& rp) {
  auto it = rp.find("full_attention");
  return it != rp.end() ? *it : rp;
}

Result<int64_t> need_int(const json& hparams, std::initializer_list<const char*> keys) {
  const json* v = find_hparam(hparams, keys);
  if (!v || !v->is_number())
    return invalid_argument(std::string("config.json has no ") + *keys.begin() +
                            ", which the GGUF metadata needs");
  return v->get<int64_t>();
}

uint32_t u32(const json& v) {
  return static_cast<uint32_t>(v.get<int64_t>());
}
float f32(const json& v) {
  return v.get<float>();
}

// TextModel.set_gguf_parameters.
Status set_base_hparams(const std::string& a, const json& hp, GgufFileType file_type,
                        GgufWriter& w) {
  SPW_ASSIGN_OR_RETURN(int64_t layers,
                       need_int(hp, {"num_hidden_layers", "n_layers", "n_layer", "num_layers"}));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(layers));
  if (const json* v = find_hparam(hp, {"max_position_embeddings", "n_ctx", "n_positions",
                                       "max_length", "max_sequence_length", "model_max_length"}))
    w.set_u32(a + ".context_length", u32(*v));
  if (const json* v = find_hparam(hp, {"hidden_size", "n_embd", "dim"}))
    w.set_u32(a + ".embedding_length", u32(*v));
  if (const json* v = find_hparam(hp, {"prefix_dense_intermediate_size", "dense_intermediate_size",
                                       "intermediate_size", "n_inner", "hidden_dim"}))
    w.set_u32(a + ".feed_forward_length", u32(*v));
  if (const json* v = find_hparam(hp, {"num_attention_heads", "n_head", "n_heads"}))
    w.set_u32(a + ".attention.head_count", u32(*v));
  if (const json* v = find_hparam(hp, {"num_key_value_heads", "n_kv_heads"}))
    w.set_u32(a + ".attention.head_count_kv", u32(*v));
  const json rp_all = rope_parameters(hp);
  const json& rp = full_attention(rp_all);
  if (auto type = rp.find("rope_type"); type != rp.end() && type->is_string()) {
    const std::string t = type->get<std::string>();
    const json* factor = rp.contains("factor") && !rp["factor"].is_null() ? &rp["factor"] : nullptr;
    if (t == "linear" && factor) {
      w.set_string(a + ".rope.scaling.type", "linear");
      w.set_f32(a + ".rope.scaling.factor", f32(*factor));
    } else if (t == "yarn" && factor) {
      w.set_string(a + ".rope.scaling.type", "yarn");
      w.set_f32(a + ".rope.scaling.factor", f32(*factor));
      w.set_u32(a + ".rope.scaling.original_context_length",
                u32(rp.at("original_max_position_embeddings")));
      if (rp.contains("extrapolation_factor"))
        w.set_f32(a + ".rope.scaling.yarn_ext_factor", f32(rp["extrapolation_factor"]));
      if (rp.contains("attention_factor"))
        w.set_f32(a + ".rope.scaling.yarn_attn_factor", f32(rp["attention_factor"]));
      else if (rp.contains("attn_factor"))
        w.set_f32(a + ".rope.scaling.yarn_attn_factor", f32(rp["attn_factor"]));
      if (rp.contains("beta_fast"))
        w.set_f32(a + ".rope.scaling.yarn_beta_fast", f32(rp["beta_fast"]));
      if (rp.contains("beta_slow"))
        w.set_f32(a + ".rope.scaling.yarn_beta_slow", f32(rp["beta_slow"]));
    } else if (t == "su" || t == "longrope") {
      w.set_string(a + ".rope.scaling.type", "longrope");
    }
    // "llama3": rope_freqs (gguf_extra_tensors); "default", "dynamic": no key.
  }
  if (auto theta = rp.find("rope_theta"); theta != rp.end() && !theta->is_null())
    w.set_f32(a + ".rope.freq_base", f32(*theta));
  if (auto swa = rp_all.find("sliding_attention");
      swa != rp_all.end() && swa->contains("rope_theta"))
    w.set_f32(a + ".rope.freq_base_swa", f32((*swa)["rope_theta"]));
  if (const json* v = find_hparam(hp, {"rms_norm_eps", "norm_eps"}))
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", f32(*v));
  if (const json* v = find_hparam(hp, {"head_dim"})) {
    w.set_u32(a + ".attention.key_length", u32(*v));
    w.set_u32(a + ".attention.value_length", u32(*v));
  }
  w.set_u32("general.file_type", static_cast<uint32_t>(file_type));
  return {};
}

// Per layer: the Hugging Face name after "model.layers.N." -> llama.cpp's after "blk.N.".
const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> m = {
      {"input_layernorm", "attn_norm"},
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},
      {"self_attn.qkv_proj", "attn_qkv"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      {"post_attention_layernorm", "ffn_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
      {"mlp.gate_up_proj", "ffn_up"},
  };
  return m;
}

}  // namespace

Result<std::string> gguf_architecture(const std::string& hf) {
  if (hf == "LlamaForCausalLM" || hf == "MistralForCausalLM") return std::string("llama");
  if (hf == "Qwen2ForCausalLM") return std::string("qwen2");
  if (hf == "Qwen3ForCausalLM") return std::string("qwen3");
  if (hf == "Gemma3ForCausalLM") return std::string("gemma3");
  if (hf == "Phi3ForCausalLM") return std::string("phi3");
  return unsupported("GGUF export knows no llama.cpp architecture for " + hf +
                     "; it writes LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                     "Qwen3ForCausalLM, Gemma3ForCausalLM and Phi3ForCausalLM");
}

Result<GgufTensorName> gguf_tensor_name(const std::string& arch, const json& hp,
                                        const std::string& hf_name) {
  const auto no_place = [&] {
    return unsupported("tensor " + hf_name + " has no place in llama.cpp's " + arch);
  };
  std::string base = hf_name, suffix;
  for (const char* s : {".weight", ".bias"}) {
    const std::string_view sv(s);
    if (base.size() > sv.size() && base.compare(base.size() - sv.size(), sv.size(), sv) == 0) {
      suffix = s;
      base.resize(base.size() - sv.size());
      break;
    }
  }
  if (suffix.empty()) return no_place();
  GgufTensorName out;
  if (base == "model.embed_tokens") {
    out.name = "token_embd" + suffix;
  } else if (base == "model.norm") {
    out.name = "output_norm" + suffix;
  } else if (base == "lm_head") {
    out.name = "output" + suffix;
  } else {
    const std::string prefix = "model.layers.";
    if (base.rfind(prefix, 0) != 0) return no_place();
    const size_t dot = base.find('.', prefix.size());
    if (dot == std::string::npos) return no_place();
    const std::string layer = base.substr(prefix.size(), dot - prefix.size());
    if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos)
      return no_place();
    const std::string rest = base.substr(dot + 1);
    std::string mapped;
    if (arch == "gemma3" && rest == "post_attention_layernorm") {
      mapped =
          "post_attention_norm";  // Gemma's norm after attention; its ffn_norm is pre_feedforward
    } else {
      auto it = layer_names().find(rest);
      if (it == layer_names().end()) return no_place();
      mapped = it->second;
    }
    out.name = "blk." + layer + "." + mapped + suffix;
    if (arch == "llama" && (rest == "self_attn.q_proj" || rest == "self_attn.k_proj")) {
      // LlamaModel.permute(w, n_head, n_head_kv): k is permuted over the kv heads.
      const char* heads =
          rest == "self_attn.q_proj" ? "num_attention_heads" : "num_key_value_heads";
      const json* h = find_hparam(hp, {heads});
      if (!h) h = find_hparam(hp, {"num_attention_heads"});
      if (!h || !h->is_number_integer() || h->get<int64_t>() <= 0)
        return invalid_argument(std::string("config.json has no whole ") + heads +
                                ", which Llama's q/k permutation needs");
      out.transform = GgufTransform::kRopePermute;
      out.permute_heads = h->get<int>();
    }
  }
  // Gemma3Model.norm_shift: every "...norm.weight" (input, post-attention, pre/post-feedforward,
  // q/k and the final norm) gets + 1.
  if (arch == "gemma3" && suffix == ".weight" && base.size() >= 4 &&
      base.compare(base.size() - 4, 4, "norm") == 0)
    out.transform = GgufTransform::kAddOne;
  return out;
}

std::vector<float> rope_permute(const std::vector<float>& w, int64_t rows, int64_t cols,
                                int n_head) {
  std::vector<float> out(w.size());
  const int64_t per_head = rows / n_head, half = per_head / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const float* src = w.data() + (h * per_head + j * half + i) * cols;
        std::copy(src, src + cols, out.data() + (h * per_head + i * 2 + j) * cols);
      }
  return out;
}

bool gguf_keeps_f32(const std::string& name, size_t n_dims) {
  const std::string_view tail = "_norm.weight";
  return n_dims <= 1 ||
         (name.size() >= tail.size() &&
          name.compare(name.size() - tail.size(), tail.size(), tail) == 0) ||
         name.size() < 7 || name.compare(name.size() - 7, 7, ".weight") != 0;
}

GgmlType gguf_file_type_tensor_type(GgufFileType t) {
  switch (t) {
    case GgufFileType::kAllF32:
      return GgmlType::kF32;
    case GgufFileType::kMostlyF16:
      return GgmlType::kF16;
    case GgufFileType::kMostlyQ8_0:
      return GgmlType::kQ8_0;
    case GgufFileType::kMostlyBF16:
      return GgmlType::kBF16;
  }
  return GgmlType::kF32;
}

namespace {

Status set_gguf_hparams_unchecked(const std::string& a, const json& hp, GgufFileType file_type,
                                  GgufWriter& w) {
  if (a == "phi3") {
    // Phi3MiniModel.set_gguf_parameters, which replaces TextModel's.
    SPW_ASSIGN_OR_RETURN(int64_t n_embd, need_int(hp, {"hidden_size", "n_embd"}));
    SPW_ASSIGN_OR_RETURN(int64_t n_head, need_int(hp, {"num_attention_heads", "n_head"}));
    SPW_ASSIGN_OR_RETURN(int64_t n_head_kv, need_int(hp, {"num_key_value_heads", "n_head_kv"}));
    SPW_ASSIGN_OR_RETURN(int64_t max_pos, need_int(hp, {"n_positions", "max_position_embeddings"}));
    SPW_ASSIGN_OR_RETURN(int64_t ff, need_int(hp, {"intermediate_size"}));
    SPW_ASSIGN_OR_RETURN(int64_t layers, need_int(hp, {"num_hidden_layers"}));
    const json rp = rope_parameters(hp);
    if (!rp.contains("original_max_position_embeddings"))
      return invalid_argument(
          "config.json has no original_max_position_embeddings, which Phi-3's GGUF needs");
    const double rot = rp.value("partial_rotary_factor", 1.0);
    const json* eps = find_hparam(hp, {"rms_norm_eps"});
    if (!eps) return invalid_argument("config.json has no rms_norm_eps");
    w.set_u32(a + ".context_length", static_cast<uint32_t>(max_pos));
    w.set_u32(a + ".rope.scaling.original_context_length",
              u32(rp["original_max_position_embeddings"]));
    w.set_u32(a + ".embedding_length", static_cast<uint32_t>(n_embd));
    w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(ff));
    w.set_u32(a + ".block_count", static_cast<uint32_t>(layers));
    w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(n_head));
    w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(n_head_kv));
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", f32(*eps));
    w.set_u32(a + ".rope.dimension_count",
              static_cast<uint32_t>(static_cast<int64_t>(rot * n_embd) / n_head));
    w.set_f32(a + ".rope.freq_base", f32(full_attention(rp).at("rope_theta")));
    w.set_u32("general.file_type", static_cast<uint32_t>(file_type));
    const json* sw = find_hparam(hp, {"sliding_window"});
    w.set_u32(a + ".attention.sliding_window", sw ? u32(*sw) : 0);
    return {};
  }
  SPW_RETURN_IF_ERROR(set_base_hparams(a, hp, file_type, w));
  if (a == "llama") {
    // LlamaModel.set_gguf_parameters.
    SPW_ASSIGN_OR_RETURN(int64_t vocab, need_int(hp, {"vocab_size"}));
    w.set_u32(a + ".vocab_size", static_cast<uint32_t>(vocab));
    int64_t rope_dim = 0;
    if (const json* hd = find_hparam(hp, {"head_dim"})) {
      rope_dim = hd->get<int64_t>();
    } else {
      SPW_ASSIGN_OR_RETURN(int64_t hidden, need_int(hp, {"hidden_size"}));
      SPW_ASSIGN_OR_RETURN(int64_t heads, need_int(hp, {"num_attention_heads"}));
      rope_dim = hidden / heads;
    }
    w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(rope_dim));
  } else if (a == "gemma3") {
    // Gemma3Model.set_gguf_parameters: defaults for what the config may leave out.
    const json rp = rope_parameters(hp);
    w.set_u32(a + ".context_length",
              static_cast<uint32_t>(hp.value("max_position_embeddings", 131072)));
    w.set_u32(a + ".attention.head_count",
              static_cast<uint32_t>(hp.value("num_attention_heads", 8)));
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", hp.value("rms_norm_eps", 1e-6f));
    const uint32_t head_dim = static_cast<uint32_t>(hp.value("head_dim", 256));
    w.set_u32(a + ".attention.key_length", head_dim);
    w.set_u32(a + ".attention.value_length", head_dim);
    w.set_f32(a + ".rope.freq_base", full_attention(rp).value("rope_theta", 1000000.0f));
    if (const json* cap = find_hparam(hp, {"final_logit_softcapping"});
        cap && cap->get<double>() != 0)
      w.set_f32(a + ".final_logit_softcapping", f32(*cap));
    const json* pattern = find_hparam(hp, {"sliding_window_pattern"});
    if (!pattern || pattern->get<int64_t>() != 1) {
      SPW_ASSIGN_OR_RETURN(int64_t window, need_int(hp, {"sliding_window"}));
      w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(window));
      // llama.cpp's gemma3 takes every sixth layer as global unless the file names each layer,
      // which convert does not write: a config whose layer_types differ (gemma3-tiny's
      // [sliding, full, sliding]) ran its global layers with the window (prompt logits 0.22 rel
      // L2 off). The file names them then, as convert does for OLMo's or EXAONE's layer_types.
      // Without layer_types, transformers takes every sliding_window_pattern-th layer as global.
      const json* types = find_hparam(hp, {"layer_types"});
      const int64_t layers = hp.value("num_hidden_layers", int64_t{0});
      const int64_t period = pattern && pattern->is_number_integer() && pattern->get<int64_t>() > 0
                                 ? pattern->get<int64_t>()
                                 : 6;
      std::vector<bool> is_swa;
      bool every_sixth = true;
      for (int64_t il = 0; il < (types && types->is_array() ? int64_t(types->size()) : layers);
           ++il) {
        is_swa.push_back(types && types->is_array() ? (*types)[il] == "sliding_attention"
                                                    : (il + 1) % period != 0);
        every_sixth = every_sixth && is_swa.back() == (il % 6 < 5);
      }
      if (!every_sixth) w.set_bool_array(a + ".attention.sliding_window_pattern", is_swa);
    }
    w.set_u32(a + ".attention.head_count_kv",
              static_cast<uint32_t>(hp.value("num_key_value_heads", 4)));
  }
  return {};
}

Result<std::vector<GgufExtraTensor>> gguf_extra_tensors_unchecked(const std::string& a,
                                                                  const json& hp, GgufWriter& w) {
  std::vector<GgufExtraTensor> out;
  const json rp_all = rope_parameters(hp);
  const json& rp = full_attention(rp_all);
  if (a == "llama" && rp.value("rope_type", std::string()) == "llama3") {
    // LlamaModel.generate_extra_tensors: a factor per rotary frequency, in float32 as torch's.
    const float base = rp.value("rope_theta", 10000.0f);
    int64_t dim = hp.value("head_dim", int64_t{0});
    if (dim == 0)
      dim = hp.at("hidden_size").get<int64_t>() / hp.at("num_attention_heads").get<int64_t>();
    const double factor = rp.value("factor", 8.0), low = rp.value("low_freq_factor", 1.0),
                 high = rp.value("high_freq_factor", 4.0),
                 old_ctx = rp.value("original_max_position_embeddings", 8192.0);
    const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    GgufExtraTensor t{"rope_freqs.weight", {}};
    // In float32 throughout, as convert computes it on torch float32 tensors (a Python number
    // divided by a tensor is the tensor's reciprocal times the number: Tensor.__rtruediv__).
    const float two_pi = static_cast<float>(2 * M_PI), old_ctx_f = static_cast<float>(old_ctx);
    for (int64_t i = 0; i < dim; i += 2) {
      const float freq = 1.0f / std::pow(base, static_cast<float>(i) / static_cast<float>(dim));
      const float wavelen = (1.0f / freq) * two_pi;
      if (wavelen < static_cast<float>(high_wavelen)) {
        t.values.push_back(1.0f);
      } else if (wavelen > static_cast<float>(low_wavelen)) {
        t.values.push_back(static_cast<float>(factor));
      } else {
        const float smooth = ((1.0f / wavelen) * old_ctx_f - static_cast<float>(low)) /
                             static_cast<float>(high - low);
        t.values.push_back(1.0f / ((1.0f - smooth) / static_cast<float>(factor) + smooth));
      }
    }
    out.push_back(std::move(t));
  }
  if (a == "phi3" && rp.contains("long_factor") && !rp["long_factor"].empty()) {
    // Phi3MiniModel.generate_extra_tensors (LongRoPE).
    const double max_pos = hp.at("max_position_embeddings").get<double>();
    const double orig = rp.at("original_max_position_embeddings").get<double>();
    const double scale = max_pos / orig;
    const std::string type = rp.value("rope_type", rp.value("type", std::string()));
    double attn_factor = 1.0;
    if (type == "su" || type == "longrope")
      attn_factor = scale > 1.0 ? std::sqrt(1 + std::log(scale) / std::log(orig)) : 1.0;
    else if (type == "yarn")
      attn_factor = scale > 1.0 ? 0.1 * std::log(scale) + 1.0 : 1.0;
    else
      return unsupported("Phi-3 rope_scaling type '" + type + "' is not one llama.cpp reads");
    w.set_f32(a + ".rope.scaling.attn_factor", static_cast<float>(attn_factor));
    out.push_back({"rope_factors_long.weight", rp["long_factor"].get<std::vector<float>>()});
    out.push_back({"rope_factors_short.weight", rp.at("short_factor").get<std::vector<float>>()});
  }
  return out;
}

}  // namespace

// config.json's values are read with their expected types; one of another type (a string where a
// number belongs) is kInvalidArgument, not an exception.
Status set_gguf_hparams(const std::string& a, const json& hp, GgufFileType file_type,
                        GgufWriter& w) {
  try {
    return set_gguf_hparams_unchecked(a, hp, file_type, w);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("config.json has a value GGUF export cannot read: ") +
                            e.what());
  }
}

Result<std::vector<GgufExtraTensor>> gguf_extra_tensors(const std::string& a, const json& hp,
                                                        GgufWriter& w) {
  try {
    return gguf_extra_tensors_unchecked(a, hp, w);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("config.json has a RoPE value GGUF export cannot read: ") +
                            e.what());
  }
}

}  // namespace spillway
