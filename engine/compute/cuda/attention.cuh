// Causal GQA attention, forward and backward (attention.cu): a flash-attention kernel (tiles of
// queries and keys in shared memory, online softmax, tensor-core MMAs with fp32 accumulation; Dao,
// "FlashAttention-2", 2023). The scale, an optional sliding window and packed rows' positions (a
// block-diagonal mask) come in AttentionParams (compute/backend.h); tiles outside are skipped. The
// backward is deterministic: one pass owns dK, dV per key tile (looping over query tiles), another
// owns dQ per query tile, so no atomics.
#pragma once

#include "compute/backend.h"
#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// q[b, t, hq, d], k/v[b, t, hkv, d] → out[b, t, hq, d], lse[b, hq, t] (fp32, natural log of the
// sum of exp of the scaled scores). head_dim up to 256 (tensor cores for 64 and 128); hq a
// multiple of hkv.
Status attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                         int batch, int seq, int hq, int hkv, int head_dim,
                         const compute::AttentionParams& params, cudaStream_t stream);
// Scratch: attention_backward_scratch_floats (cuda-workspace.h; D = rowsum(dout · out), [b, hq,
// t]). dq[b, t, hq, d], dk/dv[b, t, hkv, d] (overwrite).
Status attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                          const bf16* k, const bf16* v, const bf16* out, const float* lse,
                          int batch, int seq, int hq, int hkv, int head_dim,
                          const compute::AttentionParams& params, float* scratch,
                          size_t scratch_floats, cudaStream_t stream);
// Scratch: attention_key_bias_scratch_floats (cuda-workspace.h).
// db[hkv, d] += ∂loss/∂b_k (fp32), the formula of cpu/attention-key-bias.h, with the softmax, dS
// and the rotated row sums in fp32/fp64 as that file says; deterministic. positions: [b, t] in
// device memory for packed rows (compute::Positions), or null.
Status attention_key_bias_backward(float* db, const bf16* dout, const bf16* q, const bf16* k,
                                   const bf16* v, int batch, int seq, int hq, int hkv, int head_dim,
                                   float theta, const compute::RopeScaling& scaling,
                                   const int32_t* positions, float* scratch, size_t scratch_floats,
                                   cudaStream_t stream);

}  // namespace spillway::cuda
