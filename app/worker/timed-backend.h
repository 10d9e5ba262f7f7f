// TimedBackend: a compute Backend that forwards every op to another and times it through OpTimes
// (op-times.h), with the op's work: what `spillway-worker bench --ops` hands the engine for one
// profiled step, so that the table counts exactly the ops the engine issues, at the step's shapes,
// in the step's conditions (copies on the other streams, the L2 as the step leaves it).
//
// The work per call (OpWork), from the op's shapes:
//  - GEMMs: 2·n·in·out FLOPs per product; linear_backward is the input gradient and the weight
//    gradient (each 2·n·in·out, the first skipped when dx is absent) in one call, so one time.
//  - attention: the planner's count (step_flops, planner.h): per token 2·keys·q_dim forward, twice
//    that backward, keys the sequence (the causal half is in the factor) or the sliding window; the
//    key bias's gradient head_dim FMAs per (query head, query, visible key).
//  - LM head: 2·n·hidden·vocab for the logits, twice more with the gradients (planner.h).
//  - memory-bound ops: the least bytes read plus written (the tensors' sizes; bench-gpu-ops,
//    tests/gpu/ops-bench.cpp, derives the same per op); AdamW kAdamwBytesPerParam.
//
// Thread-safety, ownership: as Backend; borrows the inner backend and the OpTimes, which must
// outlive it. Its device() is the inner backend's.
#pragma once

#include "compute/backend.h"
#include "worker/op-times.h"

namespace spillway::worker {

class TimedBackend final : public compute::Backend {
 public:
  TimedBackend(compute::Backend& inner, OpTimes& times) : in_(inner), times_(times) {}

  compute::Device& device() const override { return in_.device(); }
  Status set_workspace(void* ptr, size_t bytes, const compute::OpShapes& shapes) override {
    return in_.set_workspace(ptr, bytes, shapes);
  }
  // The inner backend's, for the group with the inner backend in this one's place.
  Result<std::vector<std::unique_ptr<compute::Communicator>>> create_communicators(
      std::span<compute::Backend* const> group, compute::ProcessExchange* processes) override;

 protected:
  Status do_embedding_forward(void* out, const int32_t* ids, const void* table, int n, int d,
                              float scale, compute::StreamId s) override;
  Status do_embedding_backward(float* dtable, const int32_t* ids, const void* dout, int n, int d,
                               float scale, compute::StreamId s) override;
  Status do_rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n, int d,
                            float eps, float weight_offset, compute::StreamId s) override;
  Status do_residual_rmsnorm_forward(void* sum, void* out, float* rstd, const void* x,
                                     const void* r, const void* w, int n, int d, float eps,
                                     float weight_offset, compute::StreamId s) override;
  Status do_rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x, const void* w,
                             const float* rstd, int n, int d, bool accumulate_dx,
                             float weight_offset, compute::StreamId s) override;
  Status do_linear_forward(void* y, const void* x, const void* w, const void* b, int n, int in,
                           int out, compute::StreamId s) override;
  Status do_linear_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                            const void* w, int n, int in, int out, bool accumulate_dx,
                            compute::StreamId s) override;
  Status do_rope_forward(void* x, int batch, int seq, int heads, int head_dim, float theta,
                         const compute::RopeScaling& scaling, const int32_t* positions,
                         compute::StreamId s) override;
  Status do_rope_backward(void* dx, int batch, int seq, int heads, int head_dim, float theta,
                          const compute::RopeScaling& scaling, const int32_t* positions,
                          compute::StreamId s) override;
  Status do_attention_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                              int batch, int seq, int hq, int hkv, int head_dim, float scale,
                              int window, const int32_t* positions, compute::PackedBounds packed,
                              compute::StreamId s) override;
  Status do_attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q,
                               const void* k, const void* v, const void* out, const float* lse,
                               int batch, int seq, int hq, int hkv, int head_dim, float scale,
                               int window, const int32_t* positions, compute::PackedBounds packed,
                               compute::StreamId s) override;
  Status do_attention_key_bias_backward(float* db, const void* dout, const void* q, const void* k,
                                        const void* v, int batch, int seq, int hq, int hkv,
                                        int head_dim, float theta,
                                        const compute::RopeScaling& scaling,
                                        const int32_t* positions, compute::StreamId s) override;
  Status do_swiglu_forward(void* out, const void* gate, const void* up, int n, int f,
                           compute::StreamId s) override;
  Status do_swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                            const void* up, int n, int f, compute::StreamId s) override;
  Status do_geglu_forward(void* out, const void* gate, const void* up, int n, int f,
                          compute::StreamId s) override;
  Status do_geglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                           const void* up, int n, int f, compute::StreamId s) override;
  Status do_add_inplace(void* y, const void* x, size_t count, compute::StreamId s) override;
  Status do_sum_squares(double* out, const float* x, size_t count, compute::StreamId s) override;
  Status do_adamw(float* param, float* m, float* v, const float* grad, size_t count,
                  const compute::AdamWCoeffs& k, float grad_scale, compute::StreamId s) override;
  Status do_lm_head_loss(float* losses, void* dx, float* dw, const void* x, const void* w,
                         const int32_t* labels, int n, int d, int v, float loss_scale,
                         float* logits_out, int chunk, compute::StreamId s) override;

 private:
  // Tensor references of the act dtype, to hand the checked counts back to the inner backend's
  // public ops.
  compute::Tensor W(void* p, compute::Shape s) const { return {p, act_dtype(), s}; }
  compute::ConstTensor R(const void* p, compute::Shape s) const { return {p, act_dtype(), s}; }
  // Bytes of n elements of the act dtype.
  double act_bytes(double n) const { return n * static_cast<double>(dtype_size(act_dtype())); }
  Status timed(OpFamily family, const OpWork& work, compute::Shape shape, compute::StreamId s,
               const std::function<Status()>& op) {
    if (!times_.enabled()) return op();
    return times_.run(family, work, shape.to_string(), s, op);
  }

  compute::Backend& in_;
  OpTimes& times_;
};

}  // namespace spillway::worker
