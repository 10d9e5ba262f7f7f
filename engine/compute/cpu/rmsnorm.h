// RMSNorm on float32 host tensors (transformers' LlamaRMSNorm, and Gemma3RMSNorm's (1 + w) with
// weight_offset 1; statistics in float32).
//
//   forward:  rstd[i] = 1 / sqrt(mean_j x[i,j]² + eps);  y[i,j] = x[i,j] · rstd[i] · (w[j] + o)
//   backward: with g = dy · (w + o),  dx = rstd · g − rstd³ · x · mean_j(g · x);
//             dw[j] += Σ_i dy·x·rstd
// The mean of squares is summed in double so wide rows (d = 8192) keep full float precision.
// Pure functions over caller-owned memory; parallel over rows (dx) and columns (dw) with
// ThreadPool::global().
#pragma once

#include "core/status.h"

namespace spillway::compute::cpu {

// kInvalidArgument (naming `what`) for n < 0, d <= 0 or eps < 0.
Status check_rmsnorm_shape(const char* what, int n, int d, float eps);

// y, x [n, d]; w [d]; rstd [n] (skipped when null). kInvalidArgument for a bad shape.
Status rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int n, int d,
                       float eps, float weight_offset = 0.0f);
// sum [n, d] = x + res, then y = rmsnorm(sum) as rmsnorm_forward: bit for bit add_inplace followed
// by rmsnorm_forward. sum may alias x.
Status residual_rmsnorm_forward(float* sum, float* y, float* rstd, const float* x, const float* res,
                                const float* w, int n, int d, float eps,
                                float weight_offset = 0.0f);
// dx [n, d] (overwrite, or add when accumulate_dx; skipped when null); dw [d] accumulates, summed
// over rows in double
// (skipped when null); dy, x [n, d]; w [d]; rstd [n] from the forward.
Status rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        const float* rstd, int n, int d, bool accumulate_dx,
                        float weight_offset = 0.0f);

}  // namespace spillway::compute::cpu
