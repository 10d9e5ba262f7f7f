#include "worker/timed-backend.h"

#include <algorithm>

#include "train/planner.h"

namespace spillway::worker {

using compute::ConstTensor;
using compute::f32;
using compute::i32;
using compute::Shape;
using compute::StreamId;
using compute::Tensor;

namespace {

// The do_* calls carry no table rows (the ops index the table by id): one row stands for them in
// the references handed back to the inner backend, which checks only that the dims agree.
constexpr int64_t kTableRows = 1;

// A call's keys per query in the planner's count (ModelConfig::attended_keys for one layer): the
// sequence, or the window of a sliding layer.
double attended_keys(int seq, int window) {
  return window > 0 ? std::min(window, seq) : seq;
}

}  // namespace

Result<std::vector<std::unique_ptr<compute::Communicator>>> TimedBackend::create_communicators(
    std::span<compute::Backend* const> group, compute::ProcessExchange* processes) {
  std::vector<compute::Backend*> inner(group.begin(), group.end());
  for (compute::Backend*& b : inner)
    if (b == this) b = &in_;
  return in_.create_communicators(inner, processes);
}

Status TimedBackend::do_embedding_forward(void* out, const int32_t* ids, const void* table, int n,
                                          int d, float scale, StreamId s) {
  // Reads the ids and one row per token, writes out[n, d].
  const OpWork work{0, 4.0 * n + act_bytes(2.0 * n * d)};
  return timed(OpFamily::kEmbedding, work, {n, d}, s, [&] {
    return in_.embedding_forward(W(out, {n, d}), i32(ids, {n}), R(table, {kTableRows, d}), s,
                                 scale);
  });
}

Status TimedBackend::do_embedding_backward(float* dtable, const int32_t* ids, const void* dout,
                                           int n, int d, float scale, StreamId s) {
  // Reads the ids and dout[n, d], reads and writes one fp32 row per token.
  const OpWork work{0, 4.0 * n + act_bytes(1.0 * n * d) + 8.0 * n * d};
  return timed(OpFamily::kEmbedding, work, {n, d}, s, [&] {
    return in_.embedding_backward(f32(dtable, {kTableRows, d}), i32(ids, {n}), R(dout, {n, d}), s,
                                  scale);
  });
}

Status TimedBackend::do_rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n,
                                        int d, float eps, float weight_offset, StreamId s) {
  // Reads x[n, d] and w[d], writes out[n, d] and rstd[n].
  const OpWork work{0, act_bytes(2.0 * n * d + d) + 4.0 * n};
  return timed(OpFamily::kRmsnorm, work, {n, d}, s, [&] {
    return in_.rmsnorm_forward(W(out, {n, d}), f32(rstd, {n}), R(x, {n, d}), R(w, {d}), eps, s,
                               weight_offset);
  });
}

Status TimedBackend::do_residual_rmsnorm_forward(void* sum, void* out, float* rstd, const void* x,
                                                 const void* r, const void* w, int n, int d,
                                                 float eps, float weight_offset, StreamId s) {
  // Reads x, r [n, d] and w[d], writes sum, out [n, d] and rstd[n].
  const OpWork work{0, act_bytes(4.0 * n * d + d) + 4.0 * n};
  return timed(OpFamily::kRmsnorm, work, {n, d}, s, [&] {
    return in_.residual_rmsnorm_forward(W(sum, {n, d}), W(out, {n, d}), f32(rstd, {n}),
                                        R(x, {n, d}), R(r, {n, d}), R(w, {d}), eps, s,
                                        weight_offset);
  });
}

Status TimedBackend::do_rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x,
                                         const void* w, const float* rstd, int n, int d,
                                         bool accumulate_dx, float weight_offset, StreamId s) {
  // Reads dout, x [n, d], w[d], rstd[n] and dx when accumulating; writes dx; reads and writes
  // dw[d] (fp32).
  const OpWork work{0, act_bytes((accumulate_dx ? 4.0 : 3.0) * n * d + d) + 4.0 * n + 8.0 * d};
  return timed(OpFamily::kRmsnorm, work, {n, d}, s, [&] {
    return in_.rmsnorm_backward(W(dx, {n, d}), f32(dw, {d}), R(dout, {n, d}), R(x, {n, d}),
                                R(w, {d}), f32(rstd, {n}), accumulate_dx, s, weight_offset);
  });
}

Status TimedBackend::do_linear_forward(void* y, const void* x, const void* w, const void* b, int n,
                                       int in, int out, StreamId s) {
  const OpWork work{2.0 * n * in * out, 0};
  return timed(OpFamily::kGemmForward, work, {n, in, out}, s, [&] {
    return in_.linear_forward(W(y, {n, out}), R(x, {n, in}), R(w, {out, in}), R(b, {out}), s);
  });
}

Status TimedBackend::do_linear_backward(void* dx, float* dw, float* db, const void* dy,
                                        const void* x, const void* w, int n, int in, int out,
                                        bool accumulate_dx, StreamId s) {
  const double products = (dx ? 1.0 : 0.0) + (dw ? 1.0 : 0.0);
  const OpWork work{products * 2.0 * n * in * out, 0};
  return timed(OpFamily::kGemmBackward, work, {n, in, out}, s, [&] {
    return in_.linear_backward(W(dx, {n, in}), f32(dw, {out, in}), f32(db, {out}), R(dy, {n, out}),
                               R(x, {n, in}), R(w, {out, in}), accumulate_dx, s);
  });
}

Status TimedBackend::do_rope_forward(void* x, int batch, int seq, int heads, int head_dim,
                                     float theta, const compute::RopeScaling& scaling,
                                     const int32_t* positions, StreamId s) {
  // Reads and writes x in place (the angles are computed, not read).
  const Shape shape{batch, seq, heads, head_dim};
  const OpWork work{0, act_bytes(2.0 * static_cast<double>(shape.numel()))};
  return timed(OpFamily::kRope, work, shape, s, [&] {
    return in_.rope_forward(W(x, shape), theta, scaling, s,
                            compute::positions_of(positions, batch, seq));
  });
}

Status TimedBackend::do_rope_backward(void* dx, int batch, int seq, int heads, int head_dim,
                                      float theta, const compute::RopeScaling& scaling,
                                      const int32_t* positions, StreamId s) {
  const Shape shape{batch, seq, heads, head_dim};
  const OpWork work{0, act_bytes(2.0 * static_cast<double>(shape.numel()))};
  return timed(OpFamily::kRope, work, shape, s, [&] {
    return in_.rope_backward(W(dx, shape), theta, scaling, s,
                             compute::positions_of(positions, batch, seq));
  });
}

Status TimedBackend::do_attention_forward(void* out, float* lse, const void* q, const void* k,
                                          const void* v, int batch, int seq, int hq, int hkv,
                                          int head_dim, float scale, int window,
                                          const int32_t* positions, compute::PackedBounds packed,
                                          StreamId s) {
  const Shape qs{batch, seq, hq, head_dim}, kvs{batch, seq, hkv, head_dim};
  const OpWork work{2.0 * attended_keys(seq, window) * static_cast<double>(qs.numel()), 0};
  return timed(OpFamily::kAttentionForward, work, qs, s, [&] {
    return in_.attention_forward(
        W(out, qs), f32(lse, {batch, hq, seq}), R(q, qs), R(k, kvs), R(v, kvs), s,
        {scale, window, compute::positions_of(positions, batch, seq), packed});
  });
}

Status TimedBackend::do_attention_backward(void* dq, void* dk, void* dv, const void* dout,
                                           const void* q, const void* k, const void* v,
                                           const void* out, const float* lse, int batch, int seq,
                                           int hq, int hkv, int head_dim, float scale, int window,
                                           const int32_t* positions, compute::PackedBounds packed,
                                           StreamId s) {
  const Shape qs{batch, seq, hq, head_dim}, kvs{batch, seq, hkv, head_dim};
  const OpWork work{4.0 * attended_keys(seq, window) * static_cast<double>(qs.numel()), 0};
  return timed(OpFamily::kAttentionBackward, work, qs, s, [&] {
    return in_.attention_backward(
        W(dq, qs), W(dk, kvs), W(dv, kvs), R(dout, qs), R(q, qs), R(k, kvs), R(v, kvs), R(out, qs),
        f32(lse, {batch, hq, seq}), s,
        {scale, window, compute::positions_of(positions, batch, seq), packed});
  });
}

Status TimedBackend::do_attention_key_bias_backward(float* db, const void* dout, const void* q,
                                                    const void* k, const void* v, int batch,
                                                    int seq, int hq, int hkv, int head_dim,
                                                    float theta,
                                                    const compute::RopeScaling& scaling,
                                                    const int32_t* positions, StreamId s) {
  const Shape qs{batch, seq, hq, head_dim}, kvs{batch, seq, hkv, head_dim};
  // head_dim FMAs per (query head, query, visible key), seq / 2 keys on average (planner.h).
  const OpWork work{2.0 * static_cast<double>(qs.numel()) * (seq / 2.0), 0};
  return timed(OpFamily::kAttentionKeyBias, work, qs, s, [&] {
    return in_.attention_key_bias_backward(f32(db, {hkv, head_dim}), R(dout, qs), R(q, qs),
                                           R(k, kvs), R(v, kvs), theta, scaling, s,
                                           compute::positions_of(positions, batch, seq));
  });
}

Status TimedBackend::do_swiglu_forward(void* out, const void* gate, const void* up, int n, int f,
                                       StreamId s) {
  // Reads gate, up; writes out.
  return timed(OpFamily::kMlpActivation, {0, act_bytes(3.0 * n * f)}, {n, f}, s, [&] {
    return in_.swiglu_forward(W(out, {n, f}), R(gate, {n, f}), R(up, {n, f}), s);
  });
}

Status TimedBackend::do_swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                        const void* up, int n, int f, StreamId s) {
  // Reads dout, gate, up; writes dgate, dup.
  return timed(OpFamily::kMlpActivation, {0, act_bytes(5.0 * n * f)}, {n, f}, s, [&] {
    return in_.swiglu_backward(W(dgate, {n, f}), W(dup, {n, f}), R(dout, {n, f}), R(gate, {n, f}),
                               R(up, {n, f}), s);
  });
}

Status TimedBackend::do_geglu_forward(void* out, const void* gate, const void* up, int n, int f,
                                      StreamId s) {
  return timed(OpFamily::kMlpActivation, {0, act_bytes(3.0 * n * f)}, {n, f}, s, [&] {
    return in_.geglu_forward(W(out, {n, f}), R(gate, {n, f}), R(up, {n, f}), s);
  });
}

Status TimedBackend::do_geglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                       const void* up, int n, int f, StreamId s) {
  return timed(OpFamily::kMlpActivation, {0, act_bytes(5.0 * n * f)}, {n, f}, s, [&] {
    return in_.geglu_backward(W(dgate, {n, f}), W(dup, {n, f}), R(dout, {n, f}), R(gate, {n, f}),
                              R(up, {n, f}), s);
  });
}

Status TimedBackend::do_add_inplace(void* y, const void* x, size_t count, StreamId s) {
  // Reads y, x; writes y.
  const Shape shape{static_cast<int64_t>(count)};
  return timed(OpFamily::kAdd, {0, act_bytes(3.0 * count)}, shape, s,
               [&] { return in_.add_inplace(W(y, shape), R(x, shape), s); });
}

Status TimedBackend::do_sum_squares(double* out, const float* x, size_t count, StreamId s) {
  // Reads x (fp32), writes one double.
  const Shape shape{static_cast<int64_t>(count)};
  return timed(OpFamily::kSumSquares, {0, 4.0 * count + 8.0}, shape, s,
               [&] { return in_.sum_squares(out, f32(x, shape), s); });
}

Status TimedBackend::do_adamw(float* param, float* m, float* v, const float* grad, size_t count,
                              const compute::AdamWCoeffs& k, float grad_scale, StreamId s) {
  const Shape shape{static_cast<int64_t>(count)};
  return timed(OpFamily::kAdamw, {0, kAdamwBytesPerParam * count}, shape, s, [&] {
    return in_.adamw(f32(param, shape), f32(m, shape), f32(v, shape), f32(grad, shape), k,
                     grad_scale, s);
  });
}

Status TimedBackend::do_lm_head_loss(float* losses, void* dx, float* dw, const void* x,
                                     const void* w, const int32_t* labels, int n, int d, int v,
                                     float loss_scale, float* logits_out, int chunk, StreamId s) {
  // The logits x·wᵀ, and with the gradients dx = dlogits·w and dw += dlogitsᵀ·x (planner.h).
  const double products = loss_scale != 0.0f ? 3.0 : 1.0;
  const OpWork work{products * 2.0 * n * d * v, 0};
  return timed(OpFamily::kLmHead, work, {n, d, v}, s, [&] {
    return in_.lm_head_loss(f32(losses, {n}), W(dx, {n, d}), f32(dw, {v, d}), R(x, {n, d}),
                            R(w, {v, d}), i32(labels, {n}), loss_scale, f32(logits_out, {n, v}),
                            chunk, s);
  });
}

}  // namespace spillway::worker
