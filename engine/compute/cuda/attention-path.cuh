// The two kernel sets behind attention_forward / attention_backward (attention.cu), selectable for
// tests and benchmarks (internal to cuda/ and tests/gpu/):
//   kGeneric: fp32 CUDA-core tiles of 32 queries × 32 keys, any head_dim up to 256;
//   kFlash:   tensor-core tiles of 64 × 64 (FlashAttention-2), head_dim 64, 96, 128 or 256, any
//             seq;
//   kAuto:    kFlash where it applies, else kGeneric (what the public launchers do).
// Both give the same results up to rounding and each is deterministic.
#pragma once

#include "compute/cuda/attention.cuh"

namespace spillway::cuda {

enum class AttentionPath { kAuto, kGeneric, kFlash };

// As attention_forward; kInvalidArgument for kFlash with a head_dim it does not cover.
Status attention_forward_path(AttentionPath path, bf16* out, float* lse, const bf16* q,
                              const bf16* k, const bf16* v, int batch, int seq, int hq, int hkv,
                              int head_dim, const compute::AttentionParams& params,
                              cudaStream_t stream);
// As attention_backward.
Status attention_backward_path(AttentionPath path, bf16* dq, bf16* dk, bf16* dv, const bf16* dout,
                               const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                               const float* lse, int batch, int seq, int hq, int hkv, int head_dim,
                               const compute::AttentionParams& params, float* scratch,
                               size_t scratch_floats, cudaStream_t stream);

// As attention_key_bias_backward (kFlash: scores and dP on tensor cores, head_dim 64 or 128).
Status attention_key_bias_backward_path(AttentionPath path, float* db, const bf16* dout,
                                        const bf16* q, const bf16* k, const bf16* v, int batch,
                                        int seq, int hq, int hkv, int head_dim, float theta,
                                        const compute::RopeScaling& scaling,
                                        const int32_t* positions, float* scratch,
                                        size_t scratch_floats, cudaStream_t stream);

}  // namespace spillway::cuda
