// AdamW over fp32 arrays on the CPU: the one vector body behind the optimizer (train/adamw.h) and
// CpuBackend's Backend::adamw, so that both give compute/adamw-step.h's bits.
// Pure function over caller-owned memory; single-threaded (callers split the work).
#pragma once

#include <cstddef>

#include "compute/adamw-step.h"

namespace spillway::compute::cpu {

// Elements per tile of adamw_tiles: offsets that are multiples of it give the same vector lanes.
inline constexpr size_t kAdamWTile = 64;

// Updates `tiles` · kAdamWTile elements of p, m, v in place from g (each [tiles · kAdamWTile]
// fp32, not aliased).
void adamw_tiles(float* p, float* m, float* v, const float* g, size_t tiles, float grad_scale,
                 const AdamWCoeffs& k);

// Updates `count` elements (tiles, then a scalar tail): the same bits as adamw_element on each.
void adamw(float* p, float* m, float* v, const float* g, size_t count, float grad_scale,
           const AdamWCoeffs& k);

}  // namespace spillway::compute::cpu
