// Token embedding (embedding.cu). Ids are device int32, validated by the caller.
#pragma once

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// out[n, d] = table[ids[n], :] · scale (Gemma's scaled embedding; 1 for the others)
Status embedding_forward(bf16* out, const int32_t* ids, const bf16* table, int n, int d,
                         float scale, cudaStream_t stream);
// dtable[ids[t], :] += dout[t, :] · scale (fp32), deterministic: no atomics; each thread owns
// columns and walks the tokens in order, so duplicate ids sum in token order.
Status embedding_backward(float* dtable, const int32_t* ids, const bf16* dout, int n, int d,
                          float scale, cudaStream_t stream);

}  // namespace spillway::cuda
