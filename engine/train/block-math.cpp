#include "train/block-math.h"

#include <array>
#include <utility>

namespace spillway {

using compute::StreamId;

namespace {

uint64_t aligned(uint64_t bytes) { return compute::align_to_device(bytes); }

// The scratch's views as (count, bytes each), in carving order; each view starts 256-aligned so
// that GEMMs and vectorised kernels see aligned rows.
struct ScratchShape {
  size_t n, h, qd, kvd, f, heads, act;
  std::array<std::pair<int, size_t>, 6> views() const {
    return {{{5, n * h * act}, {4, n * qd * act}, {4, n * kvd * act}, {5, n * f * act}, {2, n * sizeof(float)},
             {1, heads * n * sizeof(float)}}};
  }
  uint64_t bytes() const {
    uint64_t total = 0;
    for (auto [count, each] : views()) total += count * aligned(each);
    return total;
  }
};

ScratchShape scratch_shape(const ModelConfig& c, int tokens, DType act) {
  return {static_cast<size_t>(tokens),       static_cast<size_t>(c.hidden_size),
          static_cast<size_t>(c.q_dim()),    static_cast<size_t>(c.kv_dim()),
          static_cast<size_t>(c.intermediate_size), static_cast<size_t>(c.num_heads),
          dtype_size(act)};
}

}  // namespace

compute::OpShapes BlockMath::op_shapes(const ModelConfig& c, int batch, int seq, int lm_head_chunk) {
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
  return s;
}

uint64_t BlockMath::scratch_bytes(const ModelConfig& config, int tokens, DType act) {
  return scratch_shape(config, tokens, act).bytes();
}

BlockMath::BlockMath(compute::Backend& backend, const ParameterLayout& layout, int lm_head_chunk)
    : be_(&backend),
      layout_(&layout),
      mc_(&layout.config()),
      act_(dtype_size(backend.act_dtype())),
      rope_{mc_->rope_scaling_factor, mc_->rope_low_freq_factor, mc_->rope_high_freq_factor,
            mc_->rope_original_max_position},
      lm_head_chunk_(lm_head_chunk) {}

Result<BlockMath> BlockMath::create(compute::Backend& backend, const ParameterLayout& layout, int max_tokens,
                                    int lm_head_chunk, DeviceArena& arena) {
  BlockMath m(backend, layout, lm_head_chunk);
  const ScratchShape shape = scratch_shape(layout.config(), max_tokens, backend.act_dtype());
  SPW_ASSIGN_OR_RETURN(void* base, arena.reserve("block-math.scratch", shape.bytes(), Category::kWorkspace));
  char* p = static_cast<char*>(base);
  auto take = [&](size_t bytes) {
    void* r = p;
    p += aligned(bytes);
    return r;
  };
  const size_t n = shape.n, act = shape.act;
  // Carved in the order of ScratchShape::views().
  for (void** t : {&m.xn, &m.x2, &m.xn2, &m.o, &m.dxn}) *t = take(n * shape.h * act);  // [n, hidden]
  for (void** t : {&m.q, &m.att, &m.dq, &m.datt}) *t = take(n * shape.qd * act);        // [n, q_dim]
  for (void** t : {&m.k, &m.v, &m.dk, &m.dv}) *t = take(n * shape.kvd * act);           // [n, kv_dim]
  for (void** t : {&m.g, &m.u, &m.a, &m.da, &m.du}) *t = take(n * shape.f * act);       // [n, intermediate]
  m.rstd1 = static_cast<float*>(take(n * sizeof(float)));                                // [n] fp32
  m.rstd2 = static_cast<float*>(take(n * sizeof(float)));                                // [n] fp32
  m.lse = static_cast<float*>(take(shape.heads * n * sizeof(float)));                    // [batch, heads, seq] fp32
  return m;
}

Status BlockMath::embedding_forward(void* out, const int32_t* ids, const char* table, int n, StreamId s) {
  return be_->embedding_forward(out, ids, table, n, mc_->hidden_size, s);
}

Status BlockMath::embedding_backward(float* dtable, const int32_t* ids, const void* dy, int n, StreamId s) {
  return be_->embedding_backward(dtable, ids, dy, n, mc_->hidden_size, s);
}

Status BlockMath::layer_forward(const char* w, const void* x, void* out, int batch, int seq, StreamId s) {
  compute::Backend& be = *be_;
  const ModelConfig& c = *mc_;
  const LayerOffsets& L = layout_->layer_offsets();
  const int n = batch * seq, h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.intermediate_size;
  const float eps = c.rms_norm_eps;
  SPW_RETURN_IF_ERROR(be.rmsnorm_forward(xn, rstd1, x, wp(w, L.attn_norm), n, h, eps, s));
  SPW_RETURN_IF_ERROR(be.linear_forward(q, xn, wp(w, L.wq), wp(w, L.bq), n, h, qd, s));
  SPW_RETURN_IF_ERROR(be.linear_forward(k, xn, wp(w, L.wk), wp(w, L.bk), n, h, kvd, s));
  SPW_RETURN_IF_ERROR(be.linear_forward(v, xn, wp(w, L.wv), wp(w, L.bv), n, h, kvd, s));
  SPW_RETURN_IF_ERROR(be.rope_forward(q, batch, seq, c.num_heads, c.head_dim, c.rope_theta, rope_, s));
  SPW_RETURN_IF_ERROR(be.rope_forward(k, batch, seq, c.num_kv_heads, c.head_dim, c.rope_theta, rope_, s));
  SPW_RETURN_IF_ERROR(be.attention_forward(att, lse, q, k, v, batch, seq, c.num_heads, c.num_kv_heads, c.head_dim, s));
  SPW_RETURN_IF_ERROR(be.linear_forward(o, att, wp(w, L.wo), nullptr, n, qd, h, s));
  // x2 = x + o, xn2 = rmsnorm(x2): the fused residual + norm (x is the checkpoint: kept intact).
  SPW_RETURN_IF_ERROR(be.residual_rmsnorm_forward(x2, xn2, rstd2, x, o, wp(w, L.mlp_norm), n, h, eps, s));
  SPW_RETURN_IF_ERROR(be.linear_forward(g, xn2, wp(w, L.w_gate), nullptr, n, h, f, s));
  SPW_RETURN_IF_ERROR(be.linear_forward(u, xn2, wp(w, L.w_up), nullptr, n, h, f, s));
  SPW_RETURN_IF_ERROR(be.swiglu_forward(a, g, u, n, f, s));
  if (!out) return {};  // the backward needs nothing of the down projection's output
  SPW_RETURN_IF_ERROR(be.linear_forward(out, a, wp(w, L.w_down), nullptr, n, f, h, s));
  return be.add_inplace(out, x2, static_cast<size_t>(n) * h, s);
}

Status BlockMath::layer_backward(const char* w, float* dw, const void* x, void* dy, int batch, int seq, StreamId s) {
  SPW_RETURN_IF_ERROR(layer_forward(w, x, nullptr, batch, seq, s));
  compute::Backend& be = *be_;
  const ModelConfig& c = *mc_;
  const LayerOffsets& L = layout_->layer_offsets();
  const int n = batch * seq, h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.intermediate_size;
  // MLP: out = x2 + down(swiglu(gate(xn2), up(xn2))). dy becomes ∂loss/∂x2 in place: dy plus the
  // MLP branch's gradient through the norm.
  void* dxn2 = o;  // [n, hidden]: o is dead once x2 = x + o is formed
  void* dg = a;    // [n, intermediate]: a is dead once the down projection's gradient has read it
  SPW_RETURN_IF_ERROR(be.linear_backward(da, gp(dw, L.w_down), nullptr, dy, a, wp(w, L.w_down), n, f, h, false, s));
  SPW_RETURN_IF_ERROR(be.swiglu_backward(dg, du, da, g, u, n, f, s));
  SPW_RETURN_IF_ERROR(be.linear_backward(dxn2, gp(dw, L.w_gate), nullptr, dg, xn2, wp(w, L.w_gate), n, h, f, false, s));
  SPW_RETURN_IF_ERROR(be.linear_backward(dxn2, gp(dw, L.w_up), nullptr, du, xn2, wp(w, L.w_up), n, h, f, true, s));
  SPW_RETURN_IF_ERROR(be.rmsnorm_backward(dy, gp(dw, L.mlp_norm), dxn2, x2, wp(w, L.mlp_norm), rstd2, n, h, true, s));
  // Attention: x2 = x + o_proj(attn(rope(q), rope(k), v)). dy becomes ∂loss/∂x the same way.
  SPW_RETURN_IF_ERROR(be.linear_backward(datt, gp(dw, L.wo), nullptr, dy, att, wp(w, L.wo), n, qd, h, false, s));
  SPW_RETURN_IF_ERROR(be.attention_backward(dq, dk, dv, datt, q, k, v, att, lse, batch, seq, c.num_heads,
                                            c.num_kv_heads, c.head_dim, s));
  if (L.bk != kNoParam) {  // the key bias apart from dk (see Backend::attention_key_bias_backward)
    SPW_RETURN_IF_ERROR(be.attention_key_bias_backward(gp(dw, L.bk), datt, q, k, v, batch, seq, c.num_heads,
                                                       c.num_kv_heads, c.head_dim, c.rope_theta, rope_, s));
  }
  SPW_RETURN_IF_ERROR(be.rope_backward(dq, batch, seq, c.num_heads, c.head_dim, c.rope_theta, rope_, s));
  SPW_RETURN_IF_ERROR(be.rope_backward(dk, batch, seq, c.num_kv_heads, c.head_dim, c.rope_theta, rope_, s));
  SPW_RETURN_IF_ERROR(be.linear_backward(dxn, gp(dw, L.wq), gp(dw, L.bq), dq, xn, wp(w, L.wq), n, h, qd, false, s));
  SPW_RETURN_IF_ERROR(be.linear_backward(dxn, gp(dw, L.wk), nullptr, dk, xn, wp(w, L.wk), n, h, kvd, true, s));
  SPW_RETURN_IF_ERROR(be.linear_backward(dxn, gp(dw, L.wv), gp(dw, L.bv), dv, xn, wp(w, L.wv), n, h, kvd, true, s));
  return be.rmsnorm_backward(dy, gp(dw, L.attn_norm), dxn, x, wp(w, L.attn_norm), rstd1, n, h, true, s);
}

Status BlockMath::head(const char* w_head, const char* w_lm, const void* x, const int32_t* labels, float* losses,
                       float loss_scale, void* dx, float* dw_head, float* dw_lm, float* logits, int n, StreamId s) {
  compute::Backend& be = *be_;
  const ModelConfig& c = *mc_;
  const int h = c.hidden_size;
  const void* w_norm = wp(w_head, layout_->head_norm_offset());
  SPW_RETURN_IF_ERROR(be.rmsnorm_forward(xn, rstd1, x, w_norm, n, h, c.rms_norm_eps, s));
  const bool grads = dx && loss_scale != 0.0f;  // a step without a single target has zero gradients
  SPW_RETURN_IF_ERROR(be.lm_head_loss(losses, grads ? dxn : nullptr, grads ? dw_lm : nullptr, xn, w_lm, labels, n, h,
                                      c.vocab_size, grads ? loss_scale : 0.0f, logits, lm_head_chunk_, s));
  if (!dx) return {};
  if (!grads) return be.device().fill_zero(dx, static_cast<size_t>(n) * h * act_, s);
  return be.rmsnorm_backward(dx, gp(dw_head, layout_->head_norm_offset()), dxn, x, w_norm, rstd1, n, h, false, s);
}

}  // namespace spillway
