// Elementwise helpers on float32 host tensors (the residual add). Pure functions; parallel with
// ThreadPool::global() for long vectors.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace spillway::compute::cpu {

// y[i] += x[i] for i < count.
Status add_inplace(float* y, const float* x, size_t count);

}  // namespace spillway::compute::cpu
