// Residual add.
#include "compute/cpu/elementwise.h"

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

Status add_inplace(float* y, const float* x, size_t count) {
  ThreadPool::global().parallel_for(
      count,
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) y[i] += x[i];
      },
      16384);
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
