// Backend's ops: each checks its tensor references (backend.h) and hands the backend's
// implementation (do_<op>) the pointers and counts. The checks live here, once per op, so the
// CPU and CUDA backends share them.
#include "compute/backend.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

namespace spillway::compute {

namespace {

// "BF16 [2, 16, 4, 8]"
std::string describe(DType dtype, const Shape& shape) {
  return std::string(dtype_name(dtype)) + " " + shape.to_string();
}

// `t` must be `dtype` with exactly `dims`. kInvalidArgument names the op and the argument. An
// absent tensor passes: whether the op needs it is the implementation's check (a null pointer),
// and an optional one (a linear's bias) may be absent.
Status expect(const char* op, const char* arg, const ConstTensor& t, DType dtype, Shape dims) {
  if (t.absent() || (t.dtype() == dtype && t.shape() == dims)) return Status::ok_status();
  return invalid_argument(std::string(op) + ": " + arg + " is " + describe(t.dtype(), t.shape()) +
                          ", expected " + describe(dtype, dims));
}

// `t` must have `rank` dims (the argument the op reads its shape from).
Status expect_rank(const char* op, const char* arg, const ConstTensor& t, int rank) {
  if (t.absent() || t.rank() == rank) return Status::ok_status();
  return invalid_argument(std::string(op) + ": " + arg + " is " + describe(t.dtype(), t.shape()) +
                          ", expected " + std::to_string(rank) + " dims");
}

// Grouped-query attention: q's heads are a whole multiple of k's (q and k swapped fail here).
Status expect_gqa(const char* op, const ConstTensor& q, const ConstTensor& k) {
  const int64_t hq = q.dim(2), hkv = k.dim(2);
  if (q.absent() || k.absent() || (hkv > 0 && hq % hkv == 0)) return Status::ok_status();
  return invalid_argument(std::string(op) + ": q is " + describe(q.dtype(), q.shape()) + " and k " +
                          describe(k.dtype(), k.shape()) +
                          ", expected q's heads (dim 2) a multiple of k's (are q and k swapped?)");
}

// The inputs every attention op reads: q[b, t, hq, d] and k, v[b, t, hkv, d] of the activation
// dtype, q's heads a whole multiple of k's.
Status expect_attention_inputs(const char* op, DType act, const ConstTensor& q,
                               const ConstTensor& k, const ConstTensor& v) {
  const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), d = q.dim(3), hkv = k.dim(2);
  SPW_RETURN_IF_ERROR(expect_rank(op, "q", q, 4));
  SPW_RETURN_IF_ERROR(expect_rank(op, "k", k, 4));
  SPW_RETURN_IF_ERROR(expect_gqa(op, q, k));
  SPW_RETURN_IF_ERROR(expect(op, "q", q, act, {b, t, hq, d}));
  SPW_RETURN_IF_ERROR(expect(op, "k", k, act, {b, t, hkv, d}));
  return expect(op, "v", v, act, {b, t, hkv, d});
}

int I(int64_t v) {
  return static_cast<int>(v);
}

// A negative window or scale is a caller's mistake; 0 is "none" and "1/sqrt(head_dim)".
Status check_attention_params(const char* op, const AttentionParams& params) {
  if (params.sliding_window >= 0 && params.scale >= 0.0f && std::isfinite(params.scale))
    return Status::ok_status();
  return invalid_argument(std::string(op) + ": sliding_window " +
                          std::to_string(params.sliding_window) + " and scale " +
                          std::to_string(params.scale) +
                          ", expected a window >= 0 (0: none) and a finite scale >= 0 (0: "
                          "1/sqrt(head_dim))");
}

// A gated linear unit's tensors (swiglu, geglu): gate [n, f] sets n and f, and every other one
// (up, out, dout, dgate, dup, in the order given) is act [n, f] too.
Status expect_glu(const char* op, DType act, const ConstTensor& gate,
                  std::initializer_list<std::pair<const char*, ConstTensor>> others) {
  SPW_RETURN_IF_ERROR(expect_rank(op, "gate", gate, 2));
  const Shape nf{gate.dim(0), gate.dim(1)};
  SPW_RETURN_IF_ERROR(expect(op, "gate", gate, act, nf));
  for (const auto& [name, t] : others) SPW_RETURN_IF_ERROR(expect(op, name, t, act, nf));
  return {};
}

}  // namespace

bool Backend::checks_ops() const {
#ifdef NDEBUG
  return !facts().gpu;
#else
  return true;
#endif
}

Status Backend::embedding_forward(Tensor out, ConstTensor ids, ConstTensor table, StreamId stream,
                                  float scale) {
  constexpr const char* op = "embedding_forward";
  const int64_t n = ids.dim(0), vocab = table.dim(0), d = table.dim(1);
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_rank(op, "ids", ids, 1));
    SPW_RETURN_IF_ERROR(expect_rank(op, "table", table, 2));
    SPW_RETURN_IF_ERROR(expect(op, "ids", ids, DType::kI32, {n}));
    SPW_RETURN_IF_ERROR(expect(op, "table", table, act, {vocab, d}));
    SPW_RETURN_IF_ERROR(expect(op, "out", out, act, {n, d}));
  }
  return do_embedding_forward(out.data(), ids.as<int32_t>(), table.data(), I(n), I(d), scale,
                              stream);
}

Status Backend::embedding_backward(Tensor dtable, ConstTensor ids, ConstTensor dout,
                                   StreamId stream, float scale) {
  constexpr const char* op = "embedding_backward";
  const int64_t n = ids.dim(0), vocab = dtable.dim(0), d = dtable.dim(1);
  if (checks_ops()) {
    SPW_RETURN_IF_ERROR(expect_rank(op, "ids", ids, 1));
    SPW_RETURN_IF_ERROR(expect_rank(op, "dtable", dtable, 2));
    SPW_RETURN_IF_ERROR(expect(op, "ids", ids, DType::kI32, {n}));
    SPW_RETURN_IF_ERROR(expect(op, "dtable", dtable, DType::kF32, {vocab, d}));
    SPW_RETURN_IF_ERROR(expect(op, "dout", dout, act_dtype(), {n, d}));
  }
  return do_embedding_backward(dtable.as<float>(), ids.as<int32_t>(), dout.data(), I(n), I(d),
                               scale, stream);
}

Status Backend::rmsnorm_forward(Tensor out, Tensor rstd, ConstTensor x, ConstTensor w, float eps,
                                StreamId stream, float weight_offset) {
  constexpr const char* op = "rmsnorm_forward";
  const int64_t n = x.dim(0), d = x.dim(1);
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_rank(op, "x", x, 2));
    SPW_RETURN_IF_ERROR(expect(op, "x", x, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "w", w, act, {d}));
    SPW_RETURN_IF_ERROR(expect(op, "out", out, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "rstd", rstd, DType::kF32, {n}));
  }
  return do_rmsnorm_forward(out.data(), rstd.as<float>(), x.data(), w.data(), I(n), I(d), eps,
                            weight_offset, stream);
}

Status Backend::residual_rmsnorm_forward(Tensor sum, Tensor out, Tensor rstd, ConstTensor x,
                                         ConstTensor r, ConstTensor w, float eps, StreamId stream,
                                         float weight_offset) {
  constexpr const char* op = "residual_rmsnorm_forward";
  const int64_t n = x.dim(0), d = x.dim(1);
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_rank(op, "x", x, 2));
    SPW_RETURN_IF_ERROR(expect(op, "x", x, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "r", r, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "w", w, act, {d}));
    SPW_RETURN_IF_ERROR(expect(op, "sum", sum, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "out", out, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "rstd", rstd, DType::kF32, {n}));
  }
  return do_residual_rmsnorm_forward(sum.data(), out.data(), rstd.as<float>(), x.data(), r.data(),
                                     w.data(), I(n), I(d), eps, weight_offset, stream);
}

Status Backend::rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dout, ConstTensor x,
                                 ConstTensor w, ConstTensor rstd, bool accumulate_dx,
                                 StreamId stream, float weight_offset) {
  constexpr const char* op = "rmsnorm_backward";
  const int64_t n = x.dim(0), d = x.dim(1);
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_rank(op, "x", x, 2));
    SPW_RETURN_IF_ERROR(expect(op, "x", x, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "dout", dout, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "w", w, act, {d}));
    SPW_RETURN_IF_ERROR(expect(op, "rstd", rstd, DType::kF32, {n}));
    SPW_RETURN_IF_ERROR(expect(op, "dx", dx, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "dw", dw, DType::kF32, {d}));
  }
  return do_rmsnorm_backward(dx.data(), dw.as<float>(), dout.data(), x.data(), w.data(),
                             rstd.as<float>(), I(n), I(d), accumulate_dx, weight_offset, stream);
}

Status Backend::linear_forward(Tensor y, ConstTensor x, ConstTensor w, ConstTensor b,
                               StreamId stream) {
  constexpr const char* op = "linear_forward";
  const int64_t n = x.dim(0), in = x.dim(1), out = y.dim(1);
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_rank(op, "x", x, 2));
    SPW_RETURN_IF_ERROR(expect_rank(op, "y", y, 2));
    SPW_RETURN_IF_ERROR(expect(op, "x", x, act, {n, in}));
    SPW_RETURN_IF_ERROR(expect(op, "w", w, act, {out, in}));
    SPW_RETURN_IF_ERROR(expect(op, "b", b, act, {out}));
    SPW_RETURN_IF_ERROR(expect(op, "y", y, act, {n, out}));
  }
  return do_linear_forward(y.data(), x.data(), w.data(), b.data(), I(n), I(in), I(out), stream);
}

Status Backend::linear_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                                ConstTensor w, bool accumulate_dx, StreamId stream) {
  constexpr const char* op = "linear_backward";
  const int64_t n = x.dim(0), in = x.dim(1), out = dy.dim(1);
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_rank(op, "x", x, 2));
    SPW_RETURN_IF_ERROR(expect_rank(op, "dy", dy, 2));
    SPW_RETURN_IF_ERROR(expect(op, "x", x, act, {n, in}));
    SPW_RETURN_IF_ERROR(expect(op, "w", w, act, {out, in}));
    SPW_RETURN_IF_ERROR(expect(op, "dy", dy, act, {n, out}));
    SPW_RETURN_IF_ERROR(expect(op, "dx", dx, act, {n, in}));
    SPW_RETURN_IF_ERROR(expect(op, "dw", dw, DType::kF32, {out, in}));
    SPW_RETURN_IF_ERROR(expect(op, "db", db, DType::kF32, {out}));
  }
  return do_linear_backward(dx.data(), dw.as<float>(), db.as<float>(), dy.data(), x.data(),
                            w.data(), I(n), I(in), I(out), accumulate_dx, stream);
}

Status Backend::rope_forward(Tensor x, float theta, const RopeScaling& scaling, StreamId stream,
                             Positions positions) {
  if (checks_ops()) {
    SPW_RETURN_IF_ERROR(expect_rank("rope_forward", "x", x, 4));
    SPW_RETURN_IF_ERROR(expect("rope_forward", "x", x, act_dtype(), x.shape()));
    SPW_RETURN_IF_ERROR(
        expect("rope_forward", "positions", positions, DType::kI32, {x.dim(0), x.dim(1)}));
  }
  return do_rope_forward(x.data(), I(x.dim(0)), I(x.dim(1)), I(x.dim(2)), I(x.dim(3)), theta,
                         scaling, positions.as<int32_t>(), stream);
}

Status Backend::rope_backward(Tensor dx, float theta, const RopeScaling& scaling, StreamId stream,
                              Positions positions) {
  if (checks_ops()) {
    SPW_RETURN_IF_ERROR(expect_rank("rope_backward", "dx", dx, 4));
    SPW_RETURN_IF_ERROR(expect("rope_backward", "dx", dx, act_dtype(), dx.shape()));
    SPW_RETURN_IF_ERROR(
        expect("rope_backward", "positions", positions, DType::kI32, {dx.dim(0), dx.dim(1)}));
  }
  return do_rope_backward(dx.data(), I(dx.dim(0)), I(dx.dim(1)), I(dx.dim(2)), I(dx.dim(3)), theta,
                          scaling, positions.as<int32_t>(), stream);
}

PackedBounds packed_bounds(std::span<const int32_t> positions, int seq) {
  if (positions.empty() || seq <= 0) return {};
  PackedBounds b;
  size_t start = 0;
  for (size_t i = 0; i <= positions.size(); ++i) {
    const bool starts = i == positions.size() || i % seq == 0 || positions[i] == 0;
    if (!starts || i == 0) continue;
    ++b.examples;
    b.longest = std::max(b.longest, static_cast<int>(i - start));
    start = i;
  }
  return b;
}

Status Backend::attention_forward(Tensor out, Tensor lse, ConstTensor q, ConstTensor k,
                                  ConstTensor v, StreamId stream, const AttentionParams& params) {
  constexpr const char* op = "attention_forward";
  const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), d = q.dim(3), hkv = k.dim(2);
  SPW_RETURN_IF_ERROR(check_attention_params(op, params));
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_attention_inputs(op, act, q, k, v));
    SPW_RETURN_IF_ERROR(expect(op, "out", out, act, {b, t, hq, d}));
    SPW_RETURN_IF_ERROR(expect(op, "lse", lse, DType::kF32, {b, hq, t}));
    SPW_RETURN_IF_ERROR(expect(op, "positions", params.positions, DType::kI32, {b, t}));
  }
  return do_attention_forward(out.data(), lse.as<float>(), q.data(), k.data(), v.data(), I(b), I(t),
                              I(hq), I(hkv), I(d), params.scale_for(I(d)), params.sliding_window,
                              params.positions.as<int32_t>(), params.packed, stream);
}

Status Backend::attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                                   ConstTensor k, ConstTensor v, ConstTensor out, ConstTensor lse,
                                   StreamId stream, const AttentionParams& params) {
  constexpr const char* op = "attention_backward";
  const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), d = q.dim(3), hkv = k.dim(2);
  SPW_RETURN_IF_ERROR(check_attention_params(op, params));
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_attention_inputs(op, act, q, k, v));
    SPW_RETURN_IF_ERROR(expect(op, "out", out, act, {b, t, hq, d}));
    SPW_RETURN_IF_ERROR(expect(op, "dout", dout, act, {b, t, hq, d}));
    SPW_RETURN_IF_ERROR(expect(op, "lse", lse, DType::kF32, {b, hq, t}));
    SPW_RETURN_IF_ERROR(expect(op, "dq", dq, act, {b, t, hq, d}));
    SPW_RETURN_IF_ERROR(expect(op, "dk", dk, act, {b, t, hkv, d}));
    SPW_RETURN_IF_ERROR(expect(op, "dv", dv, act, {b, t, hkv, d}));
    SPW_RETURN_IF_ERROR(expect(op, "positions", params.positions, DType::kI32, {b, t}));
  }
  return do_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                               v.data(), out.data(), lse.as<float>(), I(b), I(t), I(hq), I(hkv),
                               I(d), params.scale_for(I(d)), params.sliding_window,
                               params.positions.as<int32_t>(), params.packed, stream);
}

Status Backend::attention_key_bias_backward(Tensor db, ConstTensor dout, ConstTensor q,
                                            ConstTensor k, ConstTensor v, float theta,
                                            const RopeScaling& scaling, StreamId stream,
                                            Positions positions) {
  constexpr const char* op = "attention_key_bias_backward";
  const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), d = q.dim(3), hkv = k.dim(2);
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_attention_inputs(op, act, q, k, v));
    SPW_RETURN_IF_ERROR(expect(op, "dout", dout, act, {b, t, hq, d}));
    SPW_RETURN_IF_ERROR(expect(op, "db", db, DType::kF32, {hkv, d}));
    SPW_RETURN_IF_ERROR(expect(op, "positions", positions, DType::kI32, {b, t}));
  }
  return do_attention_key_bias_backward(db.as<float>(), dout.data(), q.data(), k.data(), v.data(),
                                        I(b), I(t), I(hq), I(hkv), I(d), theta, scaling,
                                        positions.as<int32_t>(), stream);
}

Status Backend::swiglu_forward(Tensor out, ConstTensor gate, ConstTensor up, StreamId stream) {
  const int64_t n = gate.dim(0), f = gate.dim(1);
  if (checks_ops())
    SPW_RETURN_IF_ERROR(
        expect_glu("swiglu_forward", act_dtype(), gate, {{"up", up}, {"out", out}}));
  return do_swiglu_forward(out.data(), gate.data(), up.data(), I(n), I(f), stream);
}

Status Backend::swiglu_backward(Tensor dgate, Tensor dup, ConstTensor dout, ConstTensor gate,
                                ConstTensor up, StreamId stream) {
  const int64_t n = gate.dim(0), f = gate.dim(1);
  if (checks_ops())
    SPW_RETURN_IF_ERROR(expect_glu("swiglu_backward", act_dtype(), gate,
                                   {{"up", up}, {"dout", dout}, {"dgate", dgate}, {"dup", dup}}));
  return do_swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), I(n),
                            I(f), stream);
}

Status Backend::geglu_forward(Tensor out, ConstTensor gate, ConstTensor up, StreamId stream) {
  const int64_t n = gate.dim(0), f = gate.dim(1);
  if (checks_ops())
    SPW_RETURN_IF_ERROR(expect_glu("geglu_forward", act_dtype(), gate, {{"up", up}, {"out", out}}));
  return do_geglu_forward(out.data(), gate.data(), up.data(), I(n), I(f), stream);
}

Status Backend::geglu_backward(Tensor dgate, Tensor dup, ConstTensor dout, ConstTensor gate,
                               ConstTensor up, StreamId stream) {
  const int64_t n = gate.dim(0), f = gate.dim(1);
  if (checks_ops())
    SPW_RETURN_IF_ERROR(expect_glu("geglu_backward", act_dtype(), gate,
                                   {{"up", up}, {"dout", dout}, {"dgate", dgate}, {"dup", dup}}));
  return do_geglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), I(n),
                           I(f), stream);
}

Status Backend::add_inplace(Tensor y, ConstTensor x, StreamId stream) {
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect("add_inplace", "y", y, act, y.shape()));
    SPW_RETURN_IF_ERROR(expect("add_inplace", "x", x, act, y.shape()));
  }
  return do_add_inplace(y.data(), x.data(), static_cast<size_t>(y.numel()), stream);
}

Status Backend::sum_squares(double* out, ConstTensor x, StreamId stream) {
  if (checks_ops()) SPW_RETURN_IF_ERROR(expect("sum_squares", "x", x, DType::kF32, x.shape()));
  return do_sum_squares(out, x.as<float>(), static_cast<size_t>(x.numel()), stream);
}

Status Backend::adamw(Tensor param, Tensor m, Tensor v, ConstTensor grad, const AdamWCoeffs& k,
                      float grad_scale, StreamId stream) {
  if (checks_ops()) {
    SPW_RETURN_IF_ERROR(expect("adamw", "grad", grad, DType::kF32, grad.shape()));
    SPW_RETURN_IF_ERROR(expect("adamw", "param", param, DType::kF32, grad.shape()));
    SPW_RETURN_IF_ERROR(expect("adamw", "m", m, DType::kF32, grad.shape()));
    SPW_RETURN_IF_ERROR(expect("adamw", "v", v, DType::kF32, grad.shape()));
  }
  return do_adamw(param.as<float>(), m.as<float>(), v.as<float>(), grad.as<float>(),
                  static_cast<size_t>(grad.numel()), k, grad_scale, stream);
}

Status Backend::lm_head_loss(Tensor losses, Tensor dx, Tensor dw, ConstTensor x, ConstTensor w,
                             ConstTensor labels, float loss_scale, Tensor logits_out, int chunk,
                             StreamId stream) {
  constexpr const char* op = "lm_head_loss";
  const int64_t n = x.dim(0), d = x.dim(1), v = w.dim(0);
  if (checks_ops()) {
    const DType act = act_dtype();
    SPW_RETURN_IF_ERROR(expect_rank(op, "x", x, 2));
    SPW_RETURN_IF_ERROR(expect_rank(op, "w", w, 2));
    SPW_RETURN_IF_ERROR(expect(op, "x", x, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "w", w, act, {v, d}));
    SPW_RETURN_IF_ERROR(expect(op, "labels", labels, DType::kI32, {n}));
    SPW_RETURN_IF_ERROR(expect(op, "losses", losses, DType::kF32, {n}));
    SPW_RETURN_IF_ERROR(expect(op, "dx", dx, act, {n, d}));
    SPW_RETURN_IF_ERROR(expect(op, "dw", dw, DType::kF32, {v, d}));
    SPW_RETURN_IF_ERROR(expect(op, "logits_out", logits_out, DType::kF32, {n, v}));
  }
  return do_lm_head_loss(losses.as<float>(), dx.data(), dw.as<float>(), x.data(), w.data(),
                         labels.as<int32_t>(), I(n), I(d), I(v), loss_scale, logits_out.as<float>(),
                         chunk, stream);
}

}  // namespace spillway::compute
