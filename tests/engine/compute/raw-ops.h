// The ops of compute::Backend called with the counts of their shapes, as the op tests and
// benchmarks were written before the ops took tensor references (compute/tensor.h): each builds
// the references from the pointers and counts (activations of the backend's act_dtype()) and calls
// the checked op. Shapes the counts imply: those of backend.h. A test of the checks themselves
// builds its references by hand (cpu-backend-test.cpp, TypedOps).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/backend.h"

namespace spillway::compute::raw_ops {

namespace detail {
inline Tensor act(Backend& be, void* p, Shape s) { return Tensor(p, be.act_dtype(), s); }
inline ConstTensor act(Backend& be, const void* p, Shape s) { return ConstTensor(p, be.act_dtype(), s); }
inline int64_t L(size_t v) { return static_cast<int64_t>(v); }
}  // namespace detail

inline Status embedding_forward(Backend& be, void* out, const int32_t* ids, const void* table, int n, int d,
                                StreamId s) {
  // The table's rows are not a count of the op; its extent is the backend's check.
  return be.embedding_forward(detail::act(be, out, {n, d}), i32(ids, {n}), detail::act(be, table, {1, d}), s);
}
inline Status embedding_backward(Backend& be, float* dtable, const int32_t* ids, const void* dout, int n, int d,
                                 StreamId s) {
  return be.embedding_backward(f32(dtable, {1, d}), i32(ids, {n}), detail::act(be, dout, {n, d}), s);
}
inline Status rmsnorm_forward(Backend& be, void* out, float* rstd, const void* x, const void* w, int n, int d, float eps,
                              StreamId s) {
  return be.rmsnorm_forward(detail::act(be, out, {n, d}), f32(rstd, {n}), detail::act(be, x, {n, d}),
                            detail::act(be, w, {d}), eps, s);
}
inline Status residual_rmsnorm_forward(Backend& be, void* sum, void* out, float* rstd, const void* x, const void* r,
                                       const void* w, int n, int d, float eps, StreamId s) {
  return be.residual_rmsnorm_forward(detail::act(be, sum, {n, d}), detail::act(be, out, {n, d}), f32(rstd, {n}),
                                     detail::act(be, x, {n, d}), detail::act(be, r, {n, d}), detail::act(be, w, {d}),
                                     eps, s);
}
inline Status rmsnorm_backward(Backend& be, void* dx, float* dw, const void* dout, const void* x, const void* w,
                               const float* rstd, int n, int d, bool accumulate_dx, StreamId s) {
  return be.rmsnorm_backward(detail::act(be, dx, {n, d}), f32(dw, {d}), detail::act(be, dout, {n, d}),
                             detail::act(be, x, {n, d}), detail::act(be, w, {d}), f32(rstd, {n}), accumulate_dx, s);
}
inline Status linear_forward(Backend& be, void* y, const void* x, const void* w, const void* b, int n, int in, int out,
                             StreamId s) {
  return be.linear_forward(detail::act(be, y, {n, out}), detail::act(be, x, {n, in}), detail::act(be, w, {out, in}),
                           detail::act(be, b, {out}), s);
}
inline Status linear_backward(Backend& be, void* dx, float* dw, float* db, const void* dy, const void* x, const void* w,
                              int n, int in, int out, bool accumulate_dx, StreamId s) {
  return be.linear_backward(detail::act(be, dx, {n, in}), f32(dw, {out, in}), f32(db, {out}),
                            detail::act(be, dy, {n, out}), detail::act(be, x, {n, in}), detail::act(be, w, {out, in}),
                            accumulate_dx, s);
}
inline Status rope_forward(Backend& be, void* x, int batch, int seq, int heads, int head_dim, float theta,
                           const RopeScaling& scaling, StreamId s) {
  return be.rope_forward(detail::act(be, x, {batch, seq, heads, head_dim}), theta, scaling, s);
}
inline Status rope_backward(Backend& be, void* dx, int batch, int seq, int heads, int head_dim, float theta,
                            const RopeScaling& scaling, StreamId s) {
  return be.rope_backward(detail::act(be, dx, {batch, seq, heads, head_dim}), theta, scaling, s);
}
inline Status attention_forward(Backend& be, void* out, float* lse, const void* q, const void* k, const void* v,
                                int batch, int seq, int hq, int hkv, int head_dim, StreamId s) {
  const Shape qs{batch, seq, hq, head_dim}, kvs{batch, seq, hkv, head_dim};
  return be.attention_forward(detail::act(be, out, qs), f32(lse, {batch, hq, seq}), detail::act(be, q, qs),
                              detail::act(be, k, kvs), detail::act(be, v, kvs), s);
}
inline Status attention_backward(Backend& be, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                 const void* k, const void* v, const void* out, const float* lse, int batch, int seq,
                                 int hq, int hkv, int head_dim, StreamId s) {
  const Shape qs{batch, seq, hq, head_dim}, kvs{batch, seq, hkv, head_dim};
  return be.attention_backward(detail::act(be, dq, qs), detail::act(be, dk, kvs), detail::act(be, dv, kvs),
                               detail::act(be, dout, qs), detail::act(be, q, qs), detail::act(be, k, kvs),
                               detail::act(be, v, kvs), detail::act(be, out, qs), f32(lse, {batch, hq, seq}), s);
}
inline Status attention_key_bias_backward(Backend& be, float* db, const void* dout, const void* q, const void* k,
                                          const void* v, int batch, int seq, int hq, int hkv, int head_dim,
                                          float theta, const RopeScaling& scaling, StreamId s) {
  const Shape qs{batch, seq, hq, head_dim}, kvs{batch, seq, hkv, head_dim};
  return be.attention_key_bias_backward(f32(db, {hkv, head_dim}), detail::act(be, dout, qs), detail::act(be, q, qs),
                                        detail::act(be, k, kvs), detail::act(be, v, kvs), theta, scaling, s);
}
inline Status swiglu_forward(Backend& be, void* out, const void* gate, const void* up, int n, int f, StreamId s) {
  return be.swiglu_forward(detail::act(be, out, {n, f}), detail::act(be, gate, {n, f}), detail::act(be, up, {n, f}),
                           s);
}
inline Status swiglu_backward(Backend& be, void* dgate, void* dup, const void* dout, const void* gate, const void* up,
                              int n, int f, StreamId s) {
  return be.swiglu_backward(detail::act(be, dgate, {n, f}), detail::act(be, dup, {n, f}), detail::act(be, dout, {n, f}),
                            detail::act(be, gate, {n, f}), detail::act(be, up, {n, f}), s);
}
inline Status add_inplace(Backend& be, void* y, const void* x, size_t count, StreamId s) {
  return be.add_inplace(detail::act(be, y, {detail::L(count)}), detail::act(be, x, {detail::L(count)}), s);
}
inline Status sum_squares(Backend& be, double* out, const float* x, size_t count, StreamId s) {
  return be.sum_squares(out, f32(x, {detail::L(count)}), s);
}
inline Status lm_head_loss(Backend& be, float* losses, void* dx, float* dw, const void* x, const void* w,
                           const int32_t* labels, int n, int d, int v, float loss_scale, float* logits_out, int chunk,
                           StreamId s) {
  return be.lm_head_loss(f32(losses, {n}), detail::act(be, dx, {n, d}), f32(dw, {v, d}), detail::act(be, x, {n, d}),
                         detail::act(be, w, {v, d}), i32(labels, {n}), loss_scale, f32(logits_out, {n, v}), chunk, s);
}

}  // namespace spillway::compute::raw_ops
