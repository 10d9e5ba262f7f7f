// Cross-entropy over one chunk of fp32 logits (cross-entropy.cu), for the fused chunked LM head:
// the backend computes logits = x·Wᵀ for `rows` tokens with cuBLASLt, this turns them into
// per-token losses and the bf16 gradient of the logits, and cuBLASLt then forms dx and dW from it.
#pragma once

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// For each row r < rows of logits[rows, v] (fp32): losses[r] = logsumexp(logits[r]) −
// logits[r, labels[r]], or 0 when labels[r] == -100. When dlogits != nullptr:
// dlogits[r, :] = loss_scale · (softmax(logits[r]) − onehot(labels[r])) in bf16, all zero for an
// ignored row. When logits_out != nullptr the logits are also copied there ([rows, v] fp32).
Status cross_entropy_forward_backward(float* losses, bf16* dlogits, float* logits_out,
                                      const float* logits, const int32_t* labels, int rows, int v,
                                      float loss_scale, cudaStream_t stream);

}  // namespace spillway::cuda
