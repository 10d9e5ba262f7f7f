// RMSNorm forward and backward (formulas in rmsnorm.h).
#include "compute/cpu/rmsnorm.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

static size_t rows_per_chunk(int d) { return d >= 1024 ? 1 : 1024 / static_cast<size_t>(d) + 1; }

Status rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int n, int d,
                       float eps) {
  if (n < 0 || d <= 0) {
    return invalid_argument("rmsnorm: bad shape n=" + std::to_string(n) + " d=" + std::to_string(d));
  }
  if (!(eps >= 0.0f)) return invalid_argument("rmsnorm: eps must be >= 0");
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n),
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) {
          const float* xi = x + i * d;
          float* yi = y + i * d;
          double ss = 0.0;
          for (int j = 0; j < d; ++j) ss += double(xi[j]) * xi[j];
          const float r = static_cast<float>(1.0 / std::sqrt(ss / d + double(eps)));
          if (rstd) rstd[i] = r;
          for (int j = 0; j < d; ++j) yi[j] = xi[j] * r * w[j];
        }
      },
      rows_per_chunk(d));
  return Status::ok_status();
}

Status rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        const float* rstd, int n, int d, bool accumulate_dx) {
  if (n < 0 || d <= 0) {
    return invalid_argument("rmsnorm_backward: bad shape n=" + std::to_string(n) +
                            " d=" + std::to_string(d));
  }
  ThreadPool& pool = ThreadPool::global();
  if (dx) {
    pool.parallel_for(
        static_cast<size_t>(n),
        [&](size_t i0, size_t i1) {
          for (size_t i = i0; i < i1; ++i) {
            const float* xi = x + i * d;
            const float* gi = dy + i * d;
            float* dxi = dx + i * d;
            const float r = rstd[i];
            double dot = 0.0;  // Σ_j (dy·w)·x
            for (int j = 0; j < d; ++j) dot += double(gi[j]) * w[j] * xi[j];
            const float c = static_cast<float>(double(r) * r * r * dot / d);
            if (accumulate_dx) {
              for (int j = 0; j < d; ++j) dxi[j] += r * gi[j] * w[j] - c * xi[j];
            } else {
              for (int j = 0; j < d; ++j) dxi[j] = r * gi[j] * w[j] - c * xi[j];
            }
          }
        },
        rows_per_chunk(d));
  }
  if (dw) {
    // Column blocks: each task owns dw[j0, j1), so rows sum without atomics or partial buffers.
    // Summed in double, like the bias gradient (linear.cpp): over thousands of tokens the terms
    // largely cancel, and AdamW would turn float rounding noise into full-size updates.
    pool.parallel_for(
        static_cast<size_t>(d),
        [&](size_t j0, size_t j1) {
          std::vector<double> acc(j1 - j0, 0.0);
          for (int i = 0; i < n; ++i) {
            const float* xi = x + static_cast<size_t>(i) * d;
            const float* gi = dy + static_cast<size_t>(i) * d;
            const float r = rstd[i];
            for (size_t j = j0; j < j1; ++j) acc[j - j0] += double(gi[j] * xi[j]) * r;
          }
          for (size_t j = j0; j < j1; ++j) dw[j] += static_cast<float>(acc[j - j0]);
        },
        64);
  }
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
