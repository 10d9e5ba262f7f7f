#include "model/parameter-layout.h"

#include <map>
#include <sstream>
#include <vector>

namespace spillway {

const ParamView* BlockLayout::find(const std::string& n) const {
  for (const auto& p : params) {
    if (p.name == n) return &p;
  }
  return nullptr;
}

namespace {

size_t align_up(size_t n) {
  return (n + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
}

// Appends a parameter to `b` and returns its offset.
size_t add(BlockLayout& b, std::string name, std::vector<int64_t> shape) {
  ParamView p;
  p.name = std::move(name);
  p.numel = 1;
  for (int64_t d : shape) p.numel *= static_cast<size_t>(d);
  p.decay = shape.size() >= 2;
  p.shape = std::move(shape);
  p.offset = b.numel;
  b.numel = align_up(b.numel + p.numel);
  b.params.push_back(std::move(p));
  return b.params.back().offset;
}

}  // namespace

ParameterLayout ParameterLayout::build(const ModelConfig& c) {
  ParameterLayout l;
  l.config_ = c;
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.intermediate_size,
                v = c.vocab_size;

  BlockLayout embed;
  embed.kind = BlockKind::kEmbedding;
  embed.name = "embed";
  add(embed, "model.embed_tokens.weight", {v, h});
  l.blocks_.push_back(std::move(embed));

  for (int i = 0; i < c.num_layers; ++i) {
    BlockLayout b;
    b.kind = BlockKind::kLayer;
    b.layer = i;
    b.name = "layer." + std::to_string(i);
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerOffsets o{};
    o.attn_norm = add(b, p + "input_layernorm.weight", {h});
    if (c.fused_projections) {
      o.wq = add(b, p + "self_attn.qkv_proj.weight", {q + 2 * kv, h});
      o.wk = o.wq + static_cast<size_t>(q * h);
      o.wv = o.wk + static_cast<size_t>(kv * h);
      o.bq = o.bk = o.bv = kNoParam;  // Phi-3 has no q/k/v biases (validate refuses them)
    } else {
      o.wq = add(b, p + "self_attn.q_proj.weight", {q, h});
      o.bq = c.attention_bias ? add(b, p + "self_attn.q_proj.bias", {q}) : kNoParam;
      o.wk = add(b, p + "self_attn.k_proj.weight", {kv, h});
      o.bk = c.attention_bias ? add(b, p + "self_attn.k_proj.bias", {kv}) : kNoParam;
      o.wv = add(b, p + "self_attn.v_proj.weight", {kv, h});
      o.bv = c.attention_bias ? add(b, p + "self_attn.v_proj.bias", {kv}) : kNoParam;
    }
    const int64_t d = c.head_dim;
    o.q_norm = c.qk_norm != QkNorm::kNone ? add(b, p + "self_attn.q_norm.weight", {d}) : kNoParam;
    o.k_norm = c.qk_norm != QkNorm::kNone ? add(b, p + "self_attn.k_norm.weight", {d}) : kNoParam;
    o.wo = add(b, p + "self_attn.o_proj.weight", {h, q});
    o.bo = c.o_proj_bias() ? add(b, p + "self_attn.o_proj.bias", {h}) : kNoParam;
    // Gemma's post_attention_layernorm normalises the attention's output; Llama's is the norm
    // before the MLP, which Gemma calls pre_feedforward_layernorm.
    o.post_attn_norm =
        c.sandwich_norms ? add(b, p + "post_attention_layernorm.weight", {h}) : kNoParam;
    o.mlp_norm = add(b,
                     p + (c.sandwich_norms ? "pre_feedforward_layernorm.weight"
                                           : "post_attention_layernorm.weight"),
                     {h});
    if (c.fused_projections) {
      o.w_gate = add(b, p + "mlp.gate_up_proj.weight", {2 * f, h});
      o.w_up = o.w_gate + static_cast<size_t>(f * h);
    } else {
      o.w_gate = add(b, p + "mlp.gate_proj.weight", {f, h});
      o.w_up = add(b, p + "mlp.up_proj.weight", {f, h});
    }
    o.w_down = add(b, p + "mlp.down_proj.weight", {h, f});
    o.post_mlp_norm =
        c.sandwich_norms ? add(b, p + "post_feedforward_layernorm.weight", {h}) : kNoParam;
    l.layer_offsets_ = o;
    l.blocks_.push_back(std::move(b));
  }

  BlockLayout head;
  head.kind = BlockKind::kHead;
  head.name = "head";
  l.head_norm_ = add(head, "model.norm.weight", {h});
  if (!c.tie_word_embeddings) l.head_lm_ = add(head, "lm_head.weight", {v, h});
  l.blocks_.push_back(std::move(head));
  return l;
}

size_t ParameterLayout::max_block_numel() const {
  size_t m = 0;
  for (const auto& b : blocks_) m = std::max(m, b.numel);
  return m;
}

size_t ParameterLayout::total_numel() const {
  size_t n = 0;
  for (const auto& b : blocks_) n += b.numel;
  return n;
}

uint64_t ParameterLayout::parameter_count() const {
  uint64_t n = 0;
  for (const auto& b : blocks_) {
    for (const auto& p : b.params) n += p.numel;
  }
  return n;
}

Status ParameterLayout::check(const TensorStore& store) const {
  std::vector<std::string> problems;
  std::map<std::string, const ParamView*> wanted;
  for (const auto& b : blocks_) {
    for (const auto& p : b.params) wanted[p.name] = &p;
  }
  auto shape_str = [](const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
  };
  for (const auto& [name, p] : wanted) {
    const TensorInfo* t = store.find(name);
    if (!t) {
      problems.push_back("missing tensor '" + name + "'");
    } else if (t->shape != p->shape) {
      problems.push_back("tensor '" + name + "' has shape " + t->shape_string() +
                         ", the config needs " + shape_str(p->shape));
    } else if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16) {
      problems.push_back("tensor '" + name + "' has dtype " + dtype_name(t->dtype) +
                         " (weights must be F32, F16 or BF16)");
    }
  }
  for (const TensorInfo* t : store.tensors()) {
    if (wanted.count(t->name)) continue;
    // transformers may save a tied head anyway, and older checkpoints keep rotary buffers.
    if (t->name == "lm_head.weight" && config_.tie_word_embeddings) continue;
    if (t->name.ends_with("rotary_emb.inv_freq")) continue;
    problems.push_back("unexpected tensor '" + t->name + "' (not part of a " +
                       config_.architecture + " with this config)");
  }
  if (problems.empty()) return {};
  std::string msg =
      std::to_string(problems.size()) + " problem(s) between config.json and the weights: ";
  for (size_t i = 0; i < problems.size() && i < 5; ++i) msg += (i ? "; " : "") + problems[i];
  if (problems.size() > 5) msg += "; and " + std::to_string(problems.size() - 5) + " more";
  return corrupt(msg);
}

Status ParameterLayout::load_block(const TensorStore& store, size_t b, float* dst) const {
  const BlockLayout& block = blocks_.at(b);
  std::fill(dst, dst + block.numel, 0.0f);
  for (const auto& p : block.params) {
    const TensorInfo* t = store.find(p.name);
    if (!t) return corrupt("missing tensor '" + p.name + "'");
    SPW_RETURN_IF_ERROR(store.read_f32(*t, dst + p.offset, p.numel));
  }
  return {};
}

ModelSummary summarize(const ParameterLayout& layout, const TensorStore* store) {
  ModelSummary s;
  s.architecture = layout.config().architecture;
  s.parameters = layout.parameter_count();
  auto real = [](const BlockLayout& b) {
    uint64_t n = 0;
    for (const auto& p : b.params) n += p.numel;
    return n;
  };
  s.embedding_parameters = real(layout.embedding());
  s.layer_parameters = layout.config().num_layers > 0 ? real(layout.layer(0)) : 0;
  s.head_parameters = real(layout.head());
  if (store) {
    std::map<std::string, uint64_t> per;
    for (const TensorInfo* t : store->tensors()) {
      per[dtype_name(t->dtype)] += t->nbytes();
      s.bytes_on_disk += t->nbytes();
    }
    uint64_t best = 0;
    for (const auto& [d, b] : per) {
      s.bytes_per_dtype.emplace_back(d, b);
      if (b > best) best = b, s.dtype = d;
    }
  }
  return s;
}

std::string ModelSummary::to_string(const ModelConfig& c) const {
  std::ostringstream o;
  o << architecture << ": " << parameters << " parameters (" << c.num_layers << " layers x "
    << layer_parameters << ", embedding " << embedding_parameters << ", head " << head_parameters
    << ")\n";
  o << "  hidden " << c.hidden_size << ", ffn " << c.intermediate_size << ", heads " << c.num_heads
    << "/" << c.num_kv_heads << " x " << c.head_dim << ", vocab " << c.vocab_size
    << (c.tie_word_embeddings ? ", tied head" : ", untied head")
    << (c.attention_bias ? ", qkv bias" : "") << (c.qk_norm != QkNorm::kNone ? ", q/k norm" : "")
    << (c.fused_projections ? ", fused qkv and gate/up" : "") << (c.longrope() ? ", longrope" : "")
    << (c.rotary_dim() != c.head_dim ? ", rotary " + std::to_string(c.rotary_dim()) : "") << "\n";
  // Gemma 3's extras, and a sliding window.
  std::vector<std::string> extras;
  if (c.sandwich_norms) extras.push_back("pre- and post-norms (1 + w)");
  if (c.mlp_activation == MlpActivation::kGeluTanh) extras.push_back("GeGLU (tanh)");
  if (c.scale_embeddings) extras.push_back("embeddings x sqrt(hidden)");
  if (c.query_pre_attn_scalar > 0) {
    std::ostringstream scale;
    scale << "attention scale " << c.query_pre_attn_scalar << "^-0.5";
    extras.push_back(scale.str());
  }
  if (c.sliding_window > 0) {
    int local = 0;
    for (int i = 0; i < c.num_layers; ++i) local += c.is_sliding(i) ? 1 : 0;
    std::ostringstream window;
    window << "sliding window " << c.sliding_window << " on " << local << " of " << c.num_layers
           << " layers";
    if (c.rope_local_theta > 0) window << " (rope theta " << c.rope_local_theta << ")";
    extras.push_back(window.str());
  }
  if (c.rope_linear_factor > 0) {
    std::ostringstream linear;
    linear << "linear rope factor " << c.rope_linear_factor;
    extras.push_back(linear.str());
  }
  for (size_t i = 0; i < extras.size(); ++i) o << (i ? ", " : "  ") << extras[i];
  if (!extras.empty()) o << "\n";
  if (bytes_on_disk) {
    o << "  on disk: " << bytes_on_disk << " bytes";
    for (const auto& [d, b] : bytes_per_dtype) o << ", " << d << " " << b;
    o << "\n";
  }
  return o.str();
}

}  // namespace spillway
