// Fused, chunked LM head + cross-entropy on float32 host tensors (forward and backward in one).
//
// For each chunk of at most `chunk` tokens: logits = x·Wᵀ (sgemm), per row
// lse = log Σ exp(logits) (max-shifted, summed in double), CE = lse − logits[label]
// (torch.nn.functional.cross_entropy with ignore_index = −100, reduction "none"); then, when
// loss_scale != 0, dlogits = (softmax − onehot)·loss_scale (zero for ignored rows),
// dx = dlogits·W and dW += dlogitsᵀ·x. The full [n, v] logits never exist, only [chunk, v].
// Pure function over caller-owned memory, including the scratch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace spillway::compute::cpu {

// kInvalidArgument for n < 0, d <= 0, v <= 0 or chunk <= 0.
Status check_lm_head_shape(int n, int d, int v, int chunk);

// Bytes of scratch lm_head_loss needs: the logits of one chunk, min(n, chunk) · v floats.
size_t lm_head_scratch_bytes(int n, int v, int chunk);

// x [n, d]; w [v, d]; labels [n] (−100 ignored); losses [n] = CE of each token (0 where
// ignored); dx [n, d] (overwrite, when loss_scale != 0 and dx != null); dw [v, d] (accumulate,
// likewise); logits_out [n, v] when non-null; scratch [lm_head_scratch_bytes(n, v, chunk)].
// kInvalidArgument for a bad shape (check_lm_head_shape) or a label outside [0, v) other than
// −100 (nothing is written then).
Status lm_head_loss(float* losses, float* dx, float* dw, const float* x, const float* w,
                    const int32_t* labels, int n, int d, int v, float loss_scale, float* logits_out,
                    int chunk, void* scratch);

}  // namespace spillway::compute::cpu
