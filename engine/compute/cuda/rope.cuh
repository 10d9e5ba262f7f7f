// Rotary position embedding in place (rope.cu): rotate-half, angles a = pos · inv_freq[f] computed
// in fp32 as transformers does (inv_freq = 1 / theta^(2f/r), with Llama-3 scaling when
// scaling.factor > 0 or LongRoPE's factors when given, cos/sin times scaling.attention_factor, and
// only the first r = rotary_dim dims rotating: compute::RopeScaling).
#pragma once

#include "compute/backend.h"
#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// x[b, t, heads, head_dim], positions 0..seq-1 of each sequence, or those of `positions` [b, t]
// (device memory; packed rows, compute::Positions) when not null.
Status rope_forward(bf16* x, int batch, int seq, int heads, int head_dim, float theta,
                    const compute::RopeScaling& scaling, const int32_t* positions,
                    cudaStream_t stream);
// The transpose (rotation by -angle), in place on dx.
Status rope_backward(bf16* dx, int batch, int seq, int heads, int head_dim, float theta,
                     const compute::RopeScaling& scaling, const int32_t* positions,
                     cudaStream_t stream);

}  // namespace spillway::cuda
