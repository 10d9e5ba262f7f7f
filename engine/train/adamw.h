// CPU AdamW with exactly the semantics of torch.optim.AdamW (decoupled weight decay, bias
// correction) applied after torch.nn.utils.clip_grad_norm_, in the style of DeepSpeed's cpu_adam:
// a hyper-parameter struct, a vector body over 64-element tiles under the thread pool
// (compute/cpu/adamw.h, which CpuBackend's Backend::adamw runs too) and a scalar tail, one
// contiguous pass per block. The per-element arithmetic is compute/adamw-step.h's, which the GPU's
// AdamW follows operation for operation: a block updated on the GPU gets the same bits.
//
// Per element (torch/optim/adamw.py, _single_tensor_adamw, no amsgrad):
//   g  = grad · grad_scale                      (grad_scale = clip coefficient, 1 when off)
//   p  = p · (1 − lr·wd)                        (only where decay is on: ndim >= 2 tensors)
//   m  = m + (g − m)·(1 − β1)                   (exp_avg.lerp_)
//   v  = v·β2 + (1 − β2)·g²
//   p  = p − lr/(1 − β1^t) · m / (sqrt(v)/sqrt(1 − β2^t) + ε)
// Thread-safety: adamw_update may run concurrently on disjoint blocks; it uses the global pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "compute/adamw-step.h"
#include "model/parameter-layout.h"

namespace spillway {

class ThreadPool;

// No defaults of its own (zero): the trainer takes every value from the job (train/train-job.h,
// whose defaults are the job schema's), the tests from their golden files.
struct AdamWConfig {
  double lr = 0;  // this step's learning rate (after the schedule; Optimizer sets it per step)
  double beta1 = 0;
  double beta2 = 0;
  double eps = 0;
  double weight_decay = 0;
};

// The floats of step `step` (from 1) for the parameters with (`decay`) or without weight decay: the
// constants every backend's AdamW multiplies by (compute/adamw-step.h).
compute::AdamWCoeffs adamw_coeffs(const AdamWConfig& c, int64_t step, bool decay);

// Updates `count` elements in place. `step` counts from 1. `decay` selects weight decay. Runs on
// `pool` (null: ThreadPool::global()); the result does not depend on the pool's size.
void adamw_update_range(float* param, float* m, float* v, const float* grad, size_t count,
                        const AdamWConfig& c, int64_t step, float grad_scale, bool decay,
                        ThreadPool* pool = nullptr);

// Updates a whole parameter block (layout order), with decay per parameter view and padding
// left untouched, split over `pool` (null: the global thread pool).
void adamw_update_block(const BlockLayout& block, float* param, float* m, float* v,
                        const float* grad, const AdamWConfig& c, int64_t step, float grad_scale,
                        ThreadPool* pool = nullptr);

// Σ x² over `count` floats, in double (for the global gradient norm): compute::cpu::sum_squares,
// whose order of additions depends on `count` alone (compute/cpu/reduce.h), so the same bits
// whatever the pool size, and the same as the CPU backend's Backend::sum_squares.
double sum_of_squares(const float* x, size_t count);

// torch.nn.utils.clip_grad_norm_: the factor to multiply gradients by, given their global L2
// norm: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (clipping off).
float clip_coefficient(double total_norm, double max_norm);

}  // namespace spillway
