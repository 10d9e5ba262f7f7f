// One AdamW step's constants and its per-element arithmetic, the one definition every backend
// follows so that an element gets the same bits wherever its state lives (the CPU optimizer,
// train/adamw.h, and Backend::adamw on the CPU or the GPU; docs/architecture.md, "The HBM state
// tier").
//
// Per element, in exactly this order of IEEE fp32 operations (no fused multiply-add, correctly
// rounded sqrt and division), torch.optim.AdamW after clip_grad_norm_:
//   g = grad · grad_scale
//   p = p · decay_mul
//   m = m + (g − m) · one_minus_b1
//   v = v · b2 + (one_minus_b2 · g) · g
//   p = p − (step_size · m) / (sqrt(v) · inv_bc2_sqrt + eps)
// CUDA spells each operation with its _rn intrinsic (cuda/adamw.cu); C++ code that calls
// adamw_element must be compiled with -ffp-contract=off (and -fno-math-errno, so that sqrt
// vectorises).
#pragma once

#include <cmath>

namespace spillway::compute {

// The floats of one step, computed once on the host (train/adamw.h, adamw_coeffs): decay_mul =
// 1 − lr·wd (1 without decay), step_size = lr / (1 − β1^t), inv_bc2_sqrt = 1 / sqrt(1 − β2^t),
// each computed in double and rounded once.
struct AdamWCoeffs {
  float decay_mul = 1.0f;
  float one_minus_b1 = 0.0f;
  float b2 = 0.0f;
  float one_minus_b2 = 0.0f;
  float step_size = 0.0f;
  float inv_bc2_sqrt = 1.0f;
  float eps = 0.0f;
};

// One element: p, m, v updated in place from its gradient `grad` (before grad_scale).
inline void adamw_element(float& p, float& m, float& v, float grad, float grad_scale,
                          const AdamWCoeffs& k) {
  const float g = grad * grad_scale;
  p *= k.decay_mul;
  m += (g - m) * k.one_minus_b1;
  v = v * k.b2 + k.one_minus_b2 * g * g;
  const float denom = std::sqrt(v) * k.inv_bc2_sqrt + k.eps;
  p -= k.step_size * m / denom;
}

}  // namespace spillway::compute
