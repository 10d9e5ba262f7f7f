// Linear layer (torch.nn.Linear) on float32 host tensors through OpenBLAS sgemm.
//
//   forward:  y[n, out] = x[n, in] · W[out, in]ᵀ + b[out]
//   backward: dx[n, in] = dy · W;   dW[out, in] += dyᵀ · x;   db[out] += Σ_n dy
// GEMMs run on OpenBLAS's threads (openblas_set_num_threads, set by the CPU backend); the bias
// passes use ThreadPool::global(). Pure functions over caller-owned memory.
#pragma once

#include "core/status.h"

namespace spillway::compute::cpu {

// kInvalidArgument (naming `what`) for n < 0, in <= 0 or out <= 0.
Status check_linear_shape(const char* what, int n, int in, int out);

// b may be null. kInvalidArgument for a bad shape.
Status linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                      int out);
// dx (overwrite, or add when accumulate_dx), dw (accumulate) and db (accumulate, rows summed in
// double: bias gradients are sums of many largely cancelling terms) are each
// skipped when null.
Status linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                       const float* w, int n, int in, int out, bool accumulate_dx);

}  // namespace spillway::compute::cpu
