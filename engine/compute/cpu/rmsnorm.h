// RMSNorm on float32 host tensors (transformers' LlamaRMSNorm, statistics in float32).
//
//   forward:  rstd[i] = 1 / sqrt(mean_j x[i,j]² + eps);  y[i,j] = x[i,j] · rstd[i] · w[j]
//   backward: with g = dy · w,  dx = rstd · g − rstd³ · x · mean_j(g · x);  dw[j] += Σ_i dy·x·rstd
// The mean of squares is summed in double so wide rows (d = 8192) keep full float precision.
// Pure functions over caller-owned memory; parallel over rows (dx) and columns (dw) with
// ThreadPool::global().
#pragma once

#include "core/status.h"

namespace spillway::compute::cpu {

// y, x [n, d]; w [d]; rstd [n]. kInvalidArgument for negative sizes or eps < 0.
Status rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int n, int d,
                       float eps);
// dx [n, d] (overwrite, or add when accumulate_dx; skipped when null); dw [d] accumulates, summed
// over rows in double
// (skipped when null); dy, x [n, d]; w [d]; rstd [n] from the forward.
Status rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        const float* rstd, int n, int d, bool accumulate_dx);

}  // namespace spillway::compute::cpu
