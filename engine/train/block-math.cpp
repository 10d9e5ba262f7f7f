#include "train/block-math.h"

#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace spillway {

using compute::StreamId;

namespace {

uint64_t aligned(uint64_t bytes) {
  return compute::align_to_device(bytes);
}

// The embedding row that gets no gradient from the lookup (ModelConfig::pad_token_id), or -1.
int pad_row(const ModelConfig& c) {
  return c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size ? c.pad_token_id : -1;
}

// The scratch's and saved areas' views as (count, bytes each), in carving order; each view starts
// 256-aligned so that GEMMs and vectorised kernels see aligned rows. The scratch is a saved area
// with the MLP's intermediates (the activations: BlockMath::Activations), then the work views.
struct ScratchShape {
  size_t n, h, qd, kvd, f, heads, kv_heads, act;
  bool qk_norm, sandwich, pad_row;
  // A saved area's views, carved by BlockMath::carve_activations; g, u and a only with `mlp`.
  std::array<std::pair<int, size_t>, 12> saved_views(bool mlp) const {
    const int qk = qk_norm ? 1 : 0, sw = sandwich ? 1 : 0;
    return {{{3, n * h * act},                    // xn, x2, xn2
             {2, n * qd * act},                   // q, att
             {2, n * kvd * act},                  // k, v
             {mlp ? 3 : 0, n * f * act},          // g, u, a
             {2, n * sizeof(float)},              // rstd1, rstd2
             {1, heads * n * sizeof(float)},      // lse
             {qk, n * qd * act},                  // q_pre
             {qk, n * kvd * act},                 // k_pre
             {qk, n * heads * sizeof(float)},     // rstd_q
             {qk, n * kv_heads * sizeof(float)},  // rstd_k
             {2 * sw, n * h * act},               // o, mo
             {2 * sw, n * sizeof(float)}}};       // rstd3, rstd4
  }
  // The scratch's work views after its activations.
  std::array<std::pair<int, size_t>, 5> work_views() const {
    return {{{sandwich ? 1 : 2, n * h * act},         // dxn, and o where it is not an activation
             {2, n * qd * act},                       // dq, datt
             {2, n * kvd * act},                      // dk, dv
             {2, n * f * act},                        // da, du
             {pad_row ? 1 : 0, h * sizeof(float)}}};  // pad_saved
  }
  template <size_t K>
  static uint64_t total(const std::array<std::pair<int, size_t>, K>& views) {
    uint64_t total = 0;
    for (auto [count, each] : views) total += count * aligned(each);
    return total;
  }
  uint64_t saved_bytes(bool mlp) const { return total(saved_views(mlp)); }
  uint64_t bytes() const { return saved_bytes(true) + total(work_views()); }
};

ScratchShape scratch_shape(const ModelConfig& c, int tokens, DType act) {
  return {static_cast<size_t>(tokens),
          static_cast<size_t>(c.hidden_size),
          static_cast<size_t>(c.q_dim()),
          static_cast<size_t>(c.kv_dim()),
          static_cast<size_t>(c.intermediate_size),
          static_cast<size_t>(c.num_heads),
          static_cast<size_t>(c.num_kv_heads),
          dtype_size(act),
          c.qk_norm != QkNorm::kNone,
          c.sandwich_norms,
          pad_row(c) >= 0};
}

// Hands out consecutive 256-aligned views of a region.
class Carver {
 public:
  explicit Carver(void* base) : p_(static_cast<char*>(base)) {}
  void* take(size_t bytes) {
    void* r = p_;
    p_ += aligned(bytes);
    return r;
  }
  float* floats(size_t count) { return static_cast<float*>(take(count * sizeof(float))); }

 private:
  char* p_;
};

// RoPE's parameters for this config, with LongRoPE's `factors` (ModelConfig::rope_factors).
compute::RopeScaling rope_scaling(const ModelConfig& c, const std::vector<float>& factors) {
  compute::RopeScaling r{c.rope_scaling_factor, c.rope_low_freq_factor, c.rope_high_freq_factor,
                         c.rope_original_max_position};
  r.ext_factors = factors;
  if (c.longrope()) r.attention_factor = c.rope_attention_factor;
  if (c.rotary_dim() != c.head_dim) r.rotary_dim = c.rotary_dim();
  // Linear scaling (Gemma 3's full layers; transformers' _compute_linear_scaling_rope_parameters:
  // inv_freq / factor) is the same factor for every pair.
  if (c.rope_linear_factor > 0)
    r.ext_factors.assign(static_cast<size_t>(c.rotary_dim() / 2), c.rope_linear_factor);
  return r;
}

}  // namespace

compute::OpShapes BlockMath::op_shapes(const ModelConfig& c, int batch, int seq,
                                       int lm_head_chunk) {
  compute::OpShapes s;
  s.tokens = batch * seq;
  s.batch = batch;
  s.seq = seq;
  s.hidden = c.hidden_size;
  s.heads = c.num_heads;
  s.kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.intermediate = c.intermediate_size;
  s.vocab = c.vocab_size;
  s.lm_head_chunk = lm_head_chunk;
  s.qk_norm = c.qk_norm != QkNorm::kNone;
  return s;
}

uint64_t BlockMath::scratch_bytes(const ModelConfig& config, int tokens, DType act) {
  return scratch_shape(config, tokens, act).bytes();
}

uint64_t BlockMath::saved_bytes(const ModelConfig& config, int tokens, DType act, bool mlp) {
  return scratch_shape(config, tokens, act).saved_bytes(mlp);
}

BlockMath::BlockMath(compute::Backend& backend, const ParameterLayout& layout, int lm_head_chunk)
    : be_(&backend),
      act_dtype_(backend.act_dtype()),
      layout_(&layout),
      mc_(&layout.config()),
      act_(dtype_size(backend.act_dtype())),
      rope_short_(rope_scaling(*mc_, mc_->rope_short_factor)),
      rope_long_(rope_scaling(*mc_, mc_->rope_long_factor)),
      qk_norm_(mc_->qk_norm != QkNorm::kNone),
      norm_offset_(mc_->norm_weight_offset),
      lm_head_chunk_(lm_head_chunk),
      pad_row_(pad_row(*mc_)) {}

float BlockMath::rope_theta(int layer) const {
  return mc_->rope_local_theta > 0 && mc_->is_sliding(layer) ? mc_->rope_local_theta
                                                             : mc_->rope_theta;
}

const compute::RopeScaling& BlockMath::layer_rope(int layer, int seq) const {
  return mc_->rope_local_theta > 0 && mc_->is_sliding(layer) ? rope_local_ : rope(seq);
}

Result<BlockMath> BlockMath::create(compute::Backend& backend, const ParameterLayout& layout,
                                    int max_tokens, int lm_head_chunk, DeviceArena& arena) {
  BlockMath m(backend, layout, lm_head_chunk);
  m.max_tokens_ = max_tokens;
  const ScratchShape shape = scratch_shape(layout.config(), max_tokens, backend.act_dtype());
  SPW_ASSIGN_OR_RETURN(void* base,
                       arena.reserve("block-math.scratch", shape.bytes(), Category::kWorkspace));
  // The activations, then the work views of ScratchShape::work_views().
  m.scratch_activations_ = m.carve_activations(base, /*mlp=*/true);
  Carver c(static_cast<char*>(base) + shape.saved_bytes(true));
  const size_t n = shape.n, act = shape.act;
  m.dxn = c.take(n * shape.h * act);  // [n, hidden]
  if (!shape.sandwich) m.scratch_activations_.o = c.take(n * shape.h * act);
  for (void** t : {&m.dq, &m.datt}) *t = c.take(n * shape.qd * act);  // [n, q_dim]
  for (void** t : {&m.dk, &m.dv}) *t = c.take(n * shape.kvd * act);   // [n, kv_dim]
  for (void** t : {&m.da, &m.du}) *t = c.take(n * shape.f * act);     // [n, intermediate]
  m.pad_saved = shape.pad_row ? c.floats(shape.h) : nullptr;          // [hidden]
  m.use_activations({});
  return m;
}

BlockMath::Activations BlockMath::carve_activations(void* area, bool mlp) const {
  // In the order of ScratchShape::saved_views(); the views the config has not are null.
  const ScratchShape shape = scratch_shape(*mc_, max_tokens_, act_dtype_);
  const size_t n = shape.n, act = shape.act;
  Activations v{};
  Carver c(area);
  for (void** t : {&v.xn, &v.x2, &v.xn2}) *t = c.take(n * shape.h * act);  // [n, hidden]
  for (void** t : {&v.q, &v.att}) *t = c.take(n * shape.qd * act);         // [n, q_dim]
  for (void** t : {&v.k, &v.v}) *t = c.take(n * shape.kvd * act);          // [n, kv_dim]
  if (mlp)
    for (void** t : {&v.g, &v.u, &v.a}) *t = c.take(n * shape.f * act);  // [n, intermediate]
  v.rstd1 = c.floats(n);                                                 // [n] fp32
  v.rstd2 = c.floats(n);                                                 // [n] fp32
  v.lse = c.floats(shape.heads * n);                                     // [batch, heads, seq] fp32
  if (shape.qk_norm) {
    v.q_pre = c.take(n * shape.qd * act);     // [n, q_dim]
    v.k_pre = c.take(n * shape.kvd * act);    // [n, kv_dim]
    v.rstd_q = c.floats(n * shape.heads);     // [n · heads]
    v.rstd_k = c.floats(n * shape.kv_heads);  // [n · kv_heads]
  }
  if (shape.sandwich) {
    v.o = c.take(n * shape.h * act);   // [n, hidden]
    v.mo = c.take(n * shape.h * act);  // [n, hidden]
    v.rstd3 = c.floats(n);             // [n] fp32
    v.rstd4 = c.floats(n);             // [n] fp32
  }
  return v;
}

void BlockMath::use_activations(SavedArea saved) {
  Activations to = scratch_activations_;
  if (saved.area) {
    to = carve_activations(saved.area, saved.mlp);
    // o is the scratch's without sandwich norms (the forward's temporary, the backward's dxn2),
    // and g, u, a where the area lacks them.
    if (!mc_->sandwich_norms) to.o = scratch_activations_.o;
    if (!saved.mlp)
      to.g = scratch_activations_.g, to.u = scratch_activations_.u, to.a = scratch_activations_.a;
  }
  xn = to.xn, x2 = to.x2, xn2 = to.xn2, o = to.o, q = to.q, att = to.att, k = to.k, v = to.v;
  g = to.g, u = to.u, a = to.a, q_pre = to.q_pre, k_pre = to.k_pre, mo = to.mo;
  rstd1 = to.rstd1, rstd2 = to.rstd2, lse = to.lse, rstd_q = to.rstd_q, rstd_k = to.rstd_k;
  rstd3 = to.rstd3, rstd4 = to.rstd4;
}

Status BlockMath::embedding_forward(void* out, const int32_t* ids, const char* table, int n,
                                    StreamId s) {
  const int h = mc_->hidden_size;
  return be_->embedding_forward(W(out, {n, h}), compute::i32(ids, {n}),
                                R(table, {mc_->vocab_size, h}), s, embedding_scale());
}

Status BlockMath::embedding_backward(float* dtable, const int32_t* ids, const void* dy, int n,
                                     StreamId s) {
  const int h = mc_->hidden_size;
  compute::Device& dev = be_->device();
  float* pad = pad_row_ >= 0 ? dtable + static_cast<size_t>(pad_row_) * h : nullptr;
  const size_t row_bytes = static_cast<size_t>(h) * sizeof(float);
  if (pad) SPW_RETURN_IF_ERROR(dev.copy_d2d(pad_saved, pad, row_bytes, s));
  SPW_RETURN_IF_ERROR(be_->embedding_backward(compute::f32(dtable, {mc_->vocab_size, h}),
                                              compute::i32(ids, {n}), R(dy, {n, h}), s,
                                              embedding_scale()));
  if (pad) SPW_RETURN_IF_ERROR(dev.copy_d2d(pad, pad_saved, row_bytes, s));
  return {};
}

float BlockMath::embedding_scale() const {
  if (!mc_->scale_embeddings) return 1.0f;
  // torch.tensor(hidden_size**0.5) is float32, then cast to the weights' dtype.
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(mc_->hidden_size)));
  return act_dtype_ == DType::kBF16 ? bf16_to_f32(f32_to_bf16(scale)) : scale;
}

Status BlockMath::mlp_up_forward(const char* w, int n, StreamId s) {
  const LayerOffsets& L = layout_->layer_offsets();
  const int h = mc_->hidden_size, f = mc_->intermediate_size;
  SPW_RETURN_IF_ERROR(
      be_->linear_forward(W(g, {n, f}), R(xn2, {n, h}), R(wp(w, L.w_gate), {f, h}), {}, s));
  SPW_RETURN_IF_ERROR(
      be_->linear_forward(W(u, {n, f}), R(xn2, {n, h}), R(wp(w, L.w_up), {f, h}), {}, s));
  return mlp_activation_forward(n, s);
}

Status BlockMath::mlp_activation_forward(int n, StreamId s) {
  const int f = mc_->intermediate_size;
  if (mc_->mlp_activation == MlpActivation::kGeluTanh)
    return be_->geglu_forward(W(a, {n, f}), R(g, {n, f}), R(u, {n, f}), s);
  return be_->swiglu_forward(W(a, {n, f}), R(g, {n, f}), R(u, {n, f}), s);
}

Status BlockMath::mlp_activation_backward(void* dg, int n, StreamId s) {
  const int f = mc_->intermediate_size;
  if (mc_->mlp_activation == MlpActivation::kGeluTanh)
    return be_->geglu_backward(W(dg, {n, f}), W(du, {n, f}), R(da, {n, f}), R(g, {n, f}),
                               R(u, {n, f}), s);
  return be_->swiglu_backward(W(dg, {n, f}), W(du, {n, f}), R(da, {n, f}), R(g, {n, f}),
                              R(u, {n, f}), s);
}

// The MLP's backward from `dout` (∂loss/∂ its output, [n, hidden]) to `dxn2` (∂loss/∂xn2, its
// normed input, [n, hidden]; may be dout's buffer, read first): the down projection's gradient
// into da, the activation's into dg (a's buffer: a is dead once the down projection's weight
// gradient has read it) and du, then gate's and up's into dxn2. Adds the three projections' weight
// gradients to dw. Shared by both layer shapes.
Status BlockMath::mlp_block_backward(const char* w, float* dw, const void* dout, void* dxn2, int n,
                                     StreamId s) {
  compute::Backend& be = *be_;
  const LayerOffsets& L = layout_->layer_offsets();
  const int h = mc_->hidden_size, f = mc_->intermediate_size;
  using compute::f32;
  void* dg = a;
  SPW_RETURN_IF_ERROR(be.linear_backward(W(da, {n, f}), f32(gp(dw, L.w_down), {h, f}), {},
                                         R(dout, {n, h}), R(a, {n, f}), R(wp(w, L.w_down), {h, f}),
                                         false, s));
  SPW_RETURN_IF_ERROR(mlp_activation_backward(dg, n, s));
  SPW_RETURN_IF_ERROR(be.linear_backward(W(dxn2, {n, h}), f32(gp(dw, L.w_gate), {f, h}), {},
                                         R(dg, {n, f}), R(xn2, {n, h}), R(wp(w, L.w_gate), {f, h}),
                                         false, s));
  return be.linear_backward(W(dxn2, {n, h}), f32(gp(dw, L.w_up), {f, h}), {}, R(du, {n, f}),
                            R(xn2, {n, h}), R(wp(w, L.w_up), {f, h}), true, s);
}

// From xn (the attention's normed input) to o: the q/k/v projections, the per-head norms (into
// q_pre / k_pre and then q / k, which the backward keeps), RoPE, attention and the output
// projection. Shared by both layer shapes.
Status BlockMath::attention_block_forward(int layer, const char* w, int batch, int seq,
                                          const compute::Positions& pos, StreamId s) {
  compute::Backend& be = *be_;
  const ModelConfig& c = *mc_;
  const LayerOffsets& L = layout_->layer_offsets();
  const int n = batch * seq, h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim();
  const int hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  const float eps = c.rms_norm_eps, off = norm_offset_;
  using compute::f32;
  void* qp = qk_norm_ ? q_pre : q;
  void* kp = qk_norm_ ? k_pre : k;
  SPW_RETURN_IF_ERROR(be.linear_forward(W(qp, {n, qd}), R(xn, {n, h}), R(wp(w, L.wq), {qd, h}),
                                        R(wp(w, L.bq), {qd}), s));
  SPW_RETURN_IF_ERROR(be.linear_forward(W(kp, {n, kvd}), R(xn, {n, h}), R(wp(w, L.wk), {kvd, h}),
                                        R(wp(w, L.bk), {kvd}), s));
  SPW_RETURN_IF_ERROR(be.linear_forward(W(v, {n, kvd}), R(xn, {n, h}), R(wp(w, L.wv), {kvd, h}),
                                        R(wp(w, L.bv), {kvd}), s));
  if (qk_norm_) {  // rows of head_dim: [n · heads, d]
    SPW_RETURN_IF_ERROR(be.rmsnorm_forward(W(q, {n * hq, d}), f32(rstd_q, {n * hq}),
                                           R(q_pre, {n * hq, d}), R(wp(w, L.q_norm), {d}), eps, s,
                                           off));
    SPW_RETURN_IF_ERROR(be.rmsnorm_forward(W(k, {n * hkv, d}), f32(rstd_k, {n * hkv}),
                                           R(k_pre, {n * hkv, d}), R(wp(w, L.k_norm), {d}), eps, s,
                                           off));
  }
  const float theta = rope_theta(layer);
  const compute::RopeScaling& rope = layer_rope(layer, seq);
  SPW_RETURN_IF_ERROR(be.rope_forward(W(q, {batch, seq, hq, d}), theta, rope, s, pos));
  SPW_RETURN_IF_ERROR(be.rope_forward(W(k, {batch, seq, hkv, d}), theta, rope, s, pos));
  SPW_RETURN_IF_ERROR(be.attention_forward(
      W(att, {batch, seq, hq, d}), f32(lse, {batch, hq, seq}), R(q, {batch, seq, hq, d}),
      R(k, {batch, seq, hkv, d}), R(v, {batch, seq, hkv, d}), s, attention_params(layer, pos)));
  return be.linear_forward(W(o, {n, h}), R(att, {n, qd}), R(wp(w, L.wo), {h, qd}),
                           R(wp(w, L.bo), {h}), s);
}

Status BlockMath::layer_forward(int layer, const char* w, const void* x, void* out, int batch,
                                int seq, const int32_t* positions, StreamId s, SavedArea saved) {
  use_activations(saved);
  if (mc_->sandwich_norms)
    return sandwich_layer_forward(layer, w, x, out, batch, seq, positions, s);
  compute::Backend& be = *be_;
  const ModelConfig& c = *mc_;
  const LayerOffsets& L = layout_->layer_offsets();
  const int n = batch * seq, h = c.hidden_size, f = c.intermediate_size;
  const float eps = c.rms_norm_eps;
  using compute::f32;
  SPW_RETURN_IF_ERROR(be.rmsnorm_forward(W(xn, {n, h}), f32(rstd1, {n}), R(x, {n, h}),
                                         R(wp(w, L.attn_norm), {h}), eps, s));
  SPW_RETURN_IF_ERROR(attention_block_forward(layer, w, batch, seq,
                                              compute::positions_of(positions, batch, seq), s));
  // x2 = x + o, xn2 = rmsnorm(x2): the fused residual + norm (x is the checkpoint: kept intact).
  SPW_RETURN_IF_ERROR(be.residual_rmsnorm_forward(W(x2, {n, h}), W(xn2, {n, h}), f32(rstd2, {n}),
                                                  R(x, {n, h}), R(o, {n, h}),
                                                  R(wp(w, L.mlp_norm), {h}), eps, s));
  SPW_RETURN_IF_ERROR(mlp_up_forward(w, n, s));
  if (!out) return {};  // the backward needs nothing of the down projection's output
  SPW_RETURN_IF_ERROR(
      be.linear_forward(W(out, {n, h}), R(a, {n, f}), R(wp(w, L.w_down), {h, f}), {}, s));
  return be.add_inplace(W(out, {n, h}), R(x2, {n, h}), s);
}

Status BlockMath::layer_backward(int layer, const char* w, float* dw, const void* x, void* dy,
                                 int batch, int seq, const int32_t* positions, StreamId s,
                                 SavedArea saved) {
  if (!saved.area) {
    SPW_RETURN_IF_ERROR(layer_forward(layer, w, x, nullptr, batch, seq, positions, s));
  } else {
    use_activations(saved);
    if (!saved.mlp) SPW_RETURN_IF_ERROR(mlp_up_forward(w, batch * seq, s));
  }
  if (mc_->sandwich_norms)
    return sandwich_layer_backward(layer, w, dw, x, dy, batch, seq, positions, s);
  const compute::Positions pos = compute::positions_of(positions, batch, seq);
  compute::Backend& be = *be_;
  const ModelConfig& c = *mc_;
  const LayerOffsets& L = layout_->layer_offsets();
  const int n = batch * seq, h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim();
  const int hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  using compute::f32;
  // MLP: out = x2 + down(swiglu(gate(xn2), up(xn2))). dy becomes ∂loss/∂x2 in place: dy plus the
  // MLP branch's gradient through the norm.
  void* dxn2 = o;  // [n, hidden]: o is dead once x2 = x + o is formed
  SPW_RETURN_IF_ERROR(mlp_block_backward(w, dw, dy, dxn2, n, s));
  SPW_RETURN_IF_ERROR(be.rmsnorm_backward(W(dy, {n, h}), f32(gp(dw, L.mlp_norm), {h}),
                                          R(dxn2, {n, h}), R(x2, {n, h}), R(wp(w, L.mlp_norm), {h}),
                                          f32(rstd2, {n}), true, s));
  // Attention: x2 = x + o_proj(attn(rope(q), rope(k), v)). dy becomes ∂loss/∂x the same way.
  SPW_RETURN_IF_ERROR(be.linear_backward(W(datt, {n, qd}), f32(gp(dw, L.wo), {h, qd}),
                                         f32(gp(dw, L.bo), {h}), R(dy, {n, h}), R(att, {n, qd}),
                                         R(wp(w, L.wo), {h, qd}), false, s));
  const compute::Shape qs{batch, seq, hq, d}, kvs{batch, seq, hkv, d};
  SPW_RETURN_IF_ERROR(be.attention_backward(
      W(dq, qs), W(dk, kvs), W(dv, kvs), R(datt, qs), R(q, qs), R(k, kvs), R(v, kvs), R(att, qs),
      f32(lse, {batch, hq, seq}), s, attention_params(layer, pos)));
  const float theta = rope_theta(layer);
  const compute::RopeScaling& rs = layer_rope(layer, seq);
  // The key bias apart from dk (see Backend::attention_key_bias_backward), where the keys are the
  // projection's plus RoPE; behind a k norm its gradient is an ordinary one, from dk_pre below.
  const bool key_bias_apart = L.bk != kNoParam && !qk_norm_;
  if (key_bias_apart) {
    // The op's formula has the default scale and no window (cpu/attention-key-bias.h).
    if (c.layer_window(layer) > 0 || c.query_pre_attn_scalar > 0)
      return unsupported("a key bias with a sliding window or query_pre_attn_scalar");
    SPW_RETURN_IF_ERROR(be.attention_key_bias_backward(f32(gp(dw, L.bk), {hkv, d}), R(datt, qs),
                                                       R(q, qs), R(k, kvs), R(v, kvs), theta, rs, s,
                                                       pos));
  }
  SPW_RETURN_IF_ERROR(be.rope_backward(W(dq, qs), theta, rs, s, pos));
  SPW_RETURN_IF_ERROR(be.rope_backward(W(dk, kvs), theta, rs, s, pos));
  void* dqp = dq;  // ∂loss/∂(the projections' outputs)
  void* dkp = dk;
  if (qk_norm_) {
    dqp = att;  // [n, q_dim]: the attention's output is dead once its backward has run
    dkp = v;    // [n, kv_dim]: so are the values
    SPW_RETURN_IF_ERROR(be.rmsnorm_backward(
        W(dqp, {n * hq, d}), f32(gp(dw, L.q_norm), {d}), R(dq, {n * hq, d}), R(q_pre, {n * hq, d}),
        R(wp(w, L.q_norm), {d}), f32(rstd_q, {n * hq}), false, s));
    SPW_RETURN_IF_ERROR(be.rmsnorm_backward(
        W(dkp, {n * hkv, d}), f32(gp(dw, L.k_norm), {d}), R(dk, {n * hkv, d}),
        R(k_pre, {n * hkv, d}), R(wp(w, L.k_norm), {d}), f32(rstd_k, {n * hkv}), false, s));
  }
  SPW_RETURN_IF_ERROR(be.linear_backward(W(dxn, {n, h}), f32(gp(dw, L.wq), {qd, h}),
                                         f32(gp(dw, L.bq), {qd}), R(dqp, {n, qd}), R(xn, {n, h}),
                                         R(wp(w, L.wq), {qd, h}), false, s));
  SPW_RETURN_IF_ERROR(
      be.linear_backward(W(dxn, {n, h}), f32(gp(dw, L.wk), {kvd, h}),
                         key_bias_apart ? compute::Tensor{} : f32(gp(dw, L.bk), {kvd}),
                         R(dkp, {n, kvd}), R(xn, {n, h}), R(wp(w, L.wk), {kvd, h}), true, s));
  SPW_RETURN_IF_ERROR(be.linear_backward(W(dxn, {n, h}), f32(gp(dw, L.wv), {kvd, h}),
                                         f32(gp(dw, L.bv), {kvd}), R(dv, {n, kvd}), R(xn, {n, h}),
                                         R(wp(w, L.wv), {kvd, h}), true, s));
  return be.rmsnorm_backward(W(dy, {n, h}), f32(gp(dw, L.attn_norm), {h}), R(dxn, {n, h}),
                             R(x, {n, h}), R(wp(w, L.attn_norm), {h}), f32(rstd1, {n}), true, s);
}

Status BlockMath::head(const char* w_head, const char* w_lm, const void* x, const int32_t* labels,
                       float* losses, float loss_scale, void* dx, float* dw_head, float* dw_lm,
                       float* logits, int n, StreamId s) {
  compute::Backend& be = *be_;
  const ModelConfig& c = *mc_;
  const int h = c.hidden_size, vocab = c.vocab_size;
  using compute::f32;
  use_activations({});
  const compute::ConstTensor w_norm = R(wp(w_head, layout_->head_norm_offset()), {h});
  SPW_RETURN_IF_ERROR(be.rmsnorm_forward(W(xn, {n, h}), f32(rstd1, {n}), R(x, {n, h}), w_norm,
                                         c.rms_norm_eps, s, norm_offset_));
  const bool grads = dx && loss_scale != 0.0f;  // a step without a single target has zero gradients
  SPW_RETURN_IF_ERROR(be.lm_head_loss(f32(losses, {n}), grads ? W(dxn, {n, h}) : compute::Tensor{},
                                      grads ? f32(dw_lm, {vocab, h}) : compute::Tensor{},
                                      R(xn, {n, h}), R(w_lm, {vocab, h}), compute::i32(labels, {n}),
                                      grads ? loss_scale : 0.0f, f32(logits, {n, vocab}),
                                      lm_head_chunk_, s));
  if (!dx) return {};
  if (!grads) return be.device().fill_zero(dx, static_cast<size_t>(n) * h * act_, s);
  return be.rmsnorm_backward(W(dx, {n, h}), f32(gp(dw_head, layout_->head_norm_offset()), {h}),
                             R(dxn, {n, h}), R(x, {n, h}), w_norm, f32(rstd1, {n}), false, s,
                             norm_offset_);
}

// --- Gemma 3's layer (block-math.h) ----------------------------------------------------------

Status BlockMath::sandwich_layer_forward(int layer, const char* w, const void* x, void* out,
                                         int batch, int seq, const int32_t* positions, StreamId s) {
  compute::Backend& be = *be_;
  const ModelConfig& c = *mc_;
  const LayerOffsets& L = layout_->layer_offsets();
  const int n = batch * seq, h = c.hidden_size, f = c.intermediate_size;
  const float eps = c.rms_norm_eps, off = norm_offset_;
  using compute::f32;
  SPW_RETURN_IF_ERROR(be.rmsnorm_forward(W(xn, {n, h}), f32(rstd1, {n}), R(x, {n, h}),
                                         R(wp(w, L.attn_norm), {h}), eps, s, off));
  SPW_RETURN_IF_ERROR(attention_block_forward(layer, w, batch, seq,
                                              compute::positions_of(positions, batch, seq), s));
  // x2 = x + post_attn_norm(o), xn2 = pre_ff_norm(x2); the normed o lives in dxn until the fused
  // residual norm has read it (x is the checkpoint: kept intact).
  SPW_RETURN_IF_ERROR(be.rmsnorm_forward(W(dxn, {n, h}), f32(rstd3, {n}), R(o, {n, h}),
                                         R(wp(w, L.post_attn_norm), {h}), eps, s, off));
  SPW_RETURN_IF_ERROR(be.residual_rmsnorm_forward(W(x2, {n, h}), W(xn2, {n, h}), f32(rstd2, {n}),
                                                  R(x, {n, h}), R(dxn, {n, h}),
                                                  R(wp(w, L.mlp_norm), {h}), eps, s, off));
  SPW_RETURN_IF_ERROR(mlp_up_forward(w, n, s));
  // out = x2 + post_ff_norm(mo): the backward needs mo and the norm's rstd, so the recompute
  // (out == nullptr) runs the down projection and the norm too, into dxn.
  SPW_RETURN_IF_ERROR(
      be.linear_forward(W(mo, {n, h}), R(a, {n, f}), R(wp(w, L.w_down), {h, f}), {}, s));
  void* mn = out ? out : dxn;
  SPW_RETURN_IF_ERROR(be.rmsnorm_forward(W(mn, {n, h}), f32(rstd4, {n}), R(mo, {n, h}),
                                         R(wp(w, L.post_mlp_norm), {h}), eps, s, off));
  if (!out) return {};
  return be.add_inplace(W(out, {n, h}), R(x2, {n, h}), s);
}

Status BlockMath::sandwich_layer_backward(int layer, const char* w, float* dw, const void* x,
                                          void* dy, int batch, int seq, const int32_t* positions,
                                          StreamId s) {
  const compute::Positions pos = compute::positions_of(positions, batch, seq);
  compute::Backend& be = *be_;
  const ModelConfig& c = *mc_;
  const LayerOffsets& L = layout_->layer_offsets();
  const int n = batch * seq, h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim();
  const int hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  const float off = norm_offset_;
  using compute::f32;
  // MLP: out = x2 + post_ff_norm(down(act(gate(xn2), up(xn2)))). dy becomes ∂loss/∂x2 in place.
  void* dmo = dxn;  // [n, hidden], then ∂loss/∂xn2 once the down projection has read it
  SPW_RETURN_IF_ERROR(be.rmsnorm_backward(
      W(dmo, {n, h}), f32(gp(dw, L.post_mlp_norm), {h}), R(dy, {n, h}), R(mo, {n, h}),
      R(wp(w, L.post_mlp_norm), {h}), f32(rstd4, {n}), false, s, off));
  void* dxn2 = dxn;  // dmo's buffer: the down projection's gradient reads dmo first
  SPW_RETURN_IF_ERROR(mlp_block_backward(w, dw, dmo, dxn2, n, s));
  SPW_RETURN_IF_ERROR(be.rmsnorm_backward(W(dy, {n, h}), f32(gp(dw, L.mlp_norm), {h}),
                                          R(dxn2, {n, h}), R(x2, {n, h}), R(wp(w, L.mlp_norm), {h}),
                                          f32(rstd2, {n}), true, s, off));
  // Attention: x2 = x + post_attn_norm(o_proj(attn(...))). do goes to xn2 (dead now).
  void* dout = xn2;
  SPW_RETURN_IF_ERROR(be.rmsnorm_backward(
      W(dout, {n, h}), f32(gp(dw, L.post_attn_norm), {h}), R(dy, {n, h}), R(o, {n, h}),
      R(wp(w, L.post_attn_norm), {h}), f32(rstd3, {n}), false, s, off));
  SPW_RETURN_IF_ERROR(be.linear_backward(W(datt, {n, qd}), f32(gp(dw, L.wo), {h, qd}), {},
                                         R(dout, {n, h}), R(att, {n, qd}), R(wp(w, L.wo), {h, qd}),
                                         false, s));
  const compute::Shape qs{batch, seq, hq, d}, kvs{batch, seq, hkv, d};
  SPW_RETURN_IF_ERROR(be.attention_backward(
      W(dq, qs), W(dk, kvs), W(dv, kvs), R(datt, qs), R(q, qs), R(k, kvs), R(v, kvs), R(att, qs),
      f32(lse, {batch, hq, seq}), s, attention_params(layer, pos)));
  const float theta = rope_theta(layer);
  const compute::RopeScaling& rope = layer_rope(layer, seq);
  SPW_RETURN_IF_ERROR(be.rope_backward(W(dq, qs), theta, rope, s, pos));
  SPW_RETURN_IF_ERROR(be.rope_backward(W(dk, kvs), theta, rope, s, pos));
  // Through the per-head norms: ∂loss/∂q_pre into datt, ∂loss/∂k_pre into k (both dead now).
  void* dqp = dq;
  void* dkp = dk;
  if (qk_norm_) {
    dqp = datt;
    dkp = k;
    SPW_RETURN_IF_ERROR(be.rmsnorm_backward(
        W(dqp, {n * hq, d}), f32(gp(dw, L.q_norm), {d}), R(dq, {n * hq, d}), R(q_pre, {n * hq, d}),
        R(wp(w, L.q_norm), {d}), f32(rstd_q, {n * hq}), false, s, off));
    SPW_RETURN_IF_ERROR(be.rmsnorm_backward(
        W(dkp, {n * hkv, d}), f32(gp(dw, L.k_norm), {d}), R(dk, {n * hkv, d}),
        R(k_pre, {n * hkv, d}), R(wp(w, L.k_norm), {d}), f32(rstd_k, {n * hkv}), false, s, off));
  }
  SPW_RETURN_IF_ERROR(be.linear_backward(W(dxn, {n, h}), f32(gp(dw, L.wq), {qd, h}),
                                         f32(gp(dw, L.bq), {qd}), R(dqp, {n, qd}), R(xn, {n, h}),
                                         R(wp(w, L.wq), {qd, h}), false, s));
  SPW_RETURN_IF_ERROR(be.linear_backward(W(dxn, {n, h}), f32(gp(dw, L.wk), {kvd, h}),
                                         f32(gp(dw, L.bk), {kvd}), R(dkp, {n, kvd}), R(xn, {n, h}),
                                         R(wp(w, L.wk), {kvd, h}), true, s));
  SPW_RETURN_IF_ERROR(be.linear_backward(W(dxn, {n, h}), f32(gp(dw, L.wv), {kvd, h}),
                                         f32(gp(dw, L.bv), {kvd}), R(dv, {n, kvd}), R(xn, {n, h}),
                                         R(wp(w, L.wv), {kvd, h}), true, s));
  return be.rmsnorm_backward(W(dy, {n, h}), f32(gp(dw, L.attn_norm), {h}), R(dxn, {n, h}),
                             R(x, {n, h}), R(wp(w, L.attn_norm), {h}), f32(rstd1, {n}), true, s,
                             off);
}

}  // namespace spillway
