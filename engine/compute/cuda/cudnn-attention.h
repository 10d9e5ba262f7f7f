// Causal GQA attention through cuDNN's fused flash-attention engines (cudnn-graph.h), forward and
// backward, for the calls they cover; attention.cuh's kernels run the rest. On Hopper cuDNN's
// kernels use the GPU's asynchronous tensor-core instructions (wgmma, TMA) that attention.cu's
// FlashAttention-2 kernel does not, and run about twice as fast (tests/bench/figures/
// cudnn-attention-h200.json; README, "The CUDA backend").
//
// What cuDNN runs: causal attention with an optional sliding window (the backward only where the
// window spans the rows), the heads cudnn_attention_covers (cuda-workspace.h) allows, bf16, rows
// packed or not (below). The backward of unpacked rows runs a micro-batch in the chunks
// cudnn_attention_backward_chunk (cuda-workspace.h) gives: whole sequences, or one sequence in
// chunks of query heads (whole GQA groups, so each call's dK and dV are complete) whose graph
// keeps the layout's strides and whose pointers start at the chunk's first head; none past its
// bound. The graphs are
// those of FlashAttention's forward and backward written as cuDNN operations (Q·Kᵀ, scale, mask,
// softmax with its statistics, P·V; and the backward's dP, dS, dQ, dK, dV), which cuDNN's runtime
// fusion recognises as one kernel each. The backward's graph has no fp32 dQ accumulator (cuDNN
// then keeps dS in the workspace and computes dQ by a GEMM, no atomics) and takes only engines
// without CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, so the same inputs give the same bits; where none
// is deterministic the call falls back.
//
// The statistics cuDNN's forward writes are the log-sum-exp of each query's scaled scores in
// natural log, [b, hq, t], exactly attention_forward's lse: either backward can follow either
// forward.
//
// Packed rows (compute::Positions) run as cuDNN's ragged sequences: each example of the call is
// one sequence, its tokens where they lie in q, k, v (the flat [b·t] token array: ragged offsets),
// with a padding mask to its length and the causal mask (and window) inside it, so cuDNN computes
// no score across examples and none past an example's end. The host never reads the positions: a
// kernel builds the ragged index on the GPU (cudnn-ragged.cuh), and the plans are sized by the
// caller's bounds (compute::PackedBounds), bucketed (cuda-workspace.h) so that steps reuse them.
// cuDNN's statistics are per sequence [sequences, hq, length]; a kernel moves them to and from
// the lse [b, hq, t], so either backward still follows either forward.
//
// Plans are built once per shape (a few milliseconds, cuDNN's run-time compiled engines longer on
// the first call) and kept; a shape cuDNN refuses is remembered and falls back without asking
// again; why a call falls back is logged once per reason. Thread-safety: one thread, as the
// backend.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "compute/backend.h"
#include "compute/cuda-workspace.h"
#include "compute/cuda/cuda-common.cuh"
#include "compute/cuda/cudnn-graph.h"

namespace spillway::cuda {

// The shapes of one attention call, and the key of its plans. hq and hkv are the heads of the
// [b, t, h, d] layout; `heads`, where nonzero, the query heads a backward graph computes (a chunk
// of whole GQA groups, cudnn_attention_backward_chunk), each with heads / (hq / hkv) KV heads,
// its tensors strided as the layout's and bound at the chunk's first head. 0: all hq.
struct AttentionShape {
  int batch = 0, seq = 0, hq = 0, hkv = 0, head_dim = 0, window = 0, heads = 0;
  auto tie() const { return std::tie(batch, seq, hq, hkv, head_dim, window, heads); }
  bool operator<(const AttentionShape& o) const { return tie() < o.tie(); }
};

// The shapes of a packed call's plans: `entries` ragged sequences of up to `length` tokens.
struct RaggedShape {
  int entries = 0, length = 0, hq = 0, hkv = 0, head_dim = 0, window = 0;
  auto tie() const { return std::tie(entries, length, hq, hkv, head_dim, window); }
  bool operator<(const RaggedShape& o) const { return tie() < o.tie(); }
};

#if SPILLWAY_HAVE_CUDNN

class CudnnAttention {
 public:
  // cuDNN on the current device: kUnsupported (with the reason) when the library is missing or
  // older than 9.0, or SPILLWAY_CUDNN=0 is set (the module's own kernels then run everything).
  static Result<std::unique_ptr<CudnnAttention>> create();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // As attention_forward (attention.cuh) with the scale resolved. true: cuDNN ran it; false: it
  // does not cover the shape (or its workspace would not fit `workspace_bytes`), nothing ran.
  Result<bool> forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                       const AttentionShape& s, float scale, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream);
  // As attention_backward.
  Result<bool> backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                        const bf16* k, const bf16* v, const bf16* out, const float* lse,
                        const AttentionShape& s, float scale, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);

  // As forward and backward for packed rows: `positions` [batch, seq] in device memory and
  // `bounds` on their examples (compute::PackedBounds; the call falls back when they are unknown).
  // kInternal when an earlier call's positions broke its bounds (its attention was then wrong).
  Result<bool> forward_packed(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                              const AttentionShape& s, const int32_t* positions,
                              compute::PackedBounds bounds, float scale, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);
  Result<bool> backward_packed(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                               const bf16* k, const bf16* v, const bf16* out, const float* lse,
                               const AttentionShape& s, const int32_t* positions,
                               compute::PackedBounds bounds, float scale, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream);

  // "cuDNN 9.x.y", for logs and benchmark lines.
  std::string describe() const;

 private:
  // How a packed call runs: its plan's shape, chunk of sequences, the plan, and where its parts
  // lie in the scratch (cuda-workspace.h).
  struct RaggedRun {
    RaggedShape shape;  // entries = the chunk
    int entries = 0;    // sequences of the index
    int launches = 0;   // chunks that hold the call's examples
    const CudnnGraph* plan = nullptr;
    size_t index_bytes = 0, stats_bytes = 0, sum_bytes = 0;
    // The workspace as start_packed lays it out: [index][statistics][softmax sum][cuDNN's own].
    const int32_t* index = nullptr;  // launch c's index at chunk_index(c)
    float* stats = nullptr;
    void* softmax_sum = nullptr;  // the backward's
    void* own = nullptr;
    int index_ints = 0;  // cudnn_ragged_chunk_index_ints(shape.entries)
    const int32_t* chunk_index(int c) const { return index + static_cast<size_t>(c) * index_ints; }
  };

  CudnnAttention(const CudnnApi* api, cudnnHandle_t handle) : api_(api), handle_(handle) {}
  // The plan of `s` in `plans` (built on first use); null when cuDNN refuses the shape.
  Result<const CudnnGraph*> plan(std::map<AttentionShape, std::unique_ptr<CudnnGraph>>* plans,
                                 const AttentionShape& s, bool backward);
  Result<const CudnnGraph*> ragged_plan(const RaggedShape& s, bool backward);
  // The start of a packed call: the last call's bounds checked, the plan (false: cuDNN does not
  // run this one) and the ragged index of `positions` written at the workspace's start
  // ([index][statistics][softmax sum][cuDNN's own], RaggedRun's bytes).
  Result<bool> start_packed(const AttentionShape& s, const int32_t* positions,
                            compute::PackedBounds bounds, bool backward, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream, RaggedRun* run);
  // The run of a packed call, or a reason it falls back (logged once per reason).
  Result<bool> plan_packed(const AttentionShape& s, compute::PackedBounds bounds, bool backward,
                           size_t workspace_bytes, RaggedRun* run);
  Status check_bounds_kept() const;
  void say_once(const std::string& message);
  Status run(const CudnnGraph& g, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace, cudaStream_t stream);

  const CudnnApi* api_;
  cudnnHandle_t handle_;
  // Built plans; a null entry: cuDNN refused the shape.
  std::map<AttentionShape, std::unique_ptr<CudnnGraph>> forward_, backward_;
  std::map<RaggedShape, std::unique_ptr<CudnnGraph>> ragged_forward_, ragged_backward_;
  // Where the ragged index kernel reports positions that broke their bounds: host memory mapped
  // into the device (null when it could not be had; the check is then off).
  int* violation_host_ = nullptr;
  int* violation_device_ = nullptr;
  std::set<std::string> said_;
};

#else

// Built without cudnn_graph.h: nothing to hold (CudaBackend's pointer stays null).
class CudnnAttention {};

#endif  // SPILLWAY_HAVE_CUDNN

}  // namespace spillway::cuda
