// GEMMs through cuBLASLt (gemm.cu): bf16 inputs, fp32 accumulation; outputs bf16 (activations) or
// fp32 accumulated with beta = 1 (weight gradients). One Gemm per backend: it owns the cuBLASLt
// handle and caches one matmul plan (descriptors + heuristic algorithm) per shape.
// Not thread-safe (one trainer thread drives a backend).
#pragma once

#include <cublasLt.h>

#include <map>
#include <memory>
#include <tuple>

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// Row-major conventions as torch.nn.Linear: x[n, in], W[out, in], y[n, out].
class Gemm {
 public:
  static Result<std::unique_ptr<Gemm>> create();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Bytes of cuBLASLt workspace the plans may use (passed to every call).
  static constexpr size_t kWorkspaceBytes = kGemmWorkspaceBytes;

  // y[n, out] = x · Wᵀ (+ bias[out] when bias != nullptr, fused in the epilogue); y bf16.
  Status linear_forward(bf16* y, const bf16* x, const bf16* w, const bf16* bias, int n, int in,
                        int out, void* workspace, cudaStream_t stream);
  // y[n, out] fp32 = x · Wᵀ (the LM head's logits chunk).
  Status linear_forward_f32(float* y, const bf16* x, const bf16* w, int n, int in, int out,
                            void* workspace, cudaStream_t stream);
  // dx[n, in] = dy[n, out] · W (bf16; beta 1 when accumulate).
  Status linear_backward_input(bf16* dx, const bf16* dy, const bf16* w, int n, int in, int out,
                               bool accumulate, void* workspace, cudaStream_t stream);
  // dw[out, in] += dyᵀ · x (fp32, beta = 1).
  Status linear_backward_weight(float* dw, const bf16* dy, const bf16* x, int n, int in, int out,
                                void* workspace, cudaStream_t stream);

 private:
  struct Plan;
  Gemm() = default;
  // Key: (op kind, m, n, k, flags).
  using Key = std::tuple<int, int, int, int, int>;
  Result<Plan*> plan(const Key& key);
  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

// db[out] += Σ_n dy[n, out] (fp32), deterministic: per-column partial sums over fixed row blocks
// into `scratch` (bias_backward_scratch_floats, cuda-workspace.h), then one ordered sum.
Status bias_backward(float* db, const bf16* dy, int n, int out, float* scratch,
                     size_t scratch_floats, cudaStream_t stream);

}  // namespace spillway::cuda
