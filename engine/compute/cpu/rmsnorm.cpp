// RMSNorm forward and backward (formulas in rmsnorm.h).
#include "compute/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

static constexpr size_t kColumnTile = 64;  // dw columns summed per pass over the rows

static size_t rows_per_chunk(int d) {
  return d >= 1024 ? 1 : 1024 / static_cast<size_t>(d) + 1;
}

// One row: y = x · rstd · (w + offset); returns rstd. offset 0 leaves w as it is (w + 0 == w).
static inline float norm_row(float* y, const float* x, const float* w, int d, float eps,
                             float offset) {
  double ss = 0.0;
  for (int j = 0; j < d; ++j) ss += double(x[j]) * x[j];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / d + double(eps)));
  for (int j = 0; j < d; ++j) y[j] = x[j] * r * (w[j] + offset);
  return r;
}

Status check_rmsnorm_shape(const char* what, int n, int d, float eps) {
  if (n < 0 || d <= 0) {
    return invalid_argument(std::string(what) + ": bad shape n=" + std::to_string(n) +
                            " d=" + std::to_string(d));
  }
  if (!(eps >= 0.0f)) return invalid_argument(std::string(what) + ": eps must be >= 0");
  return Status::ok_status();
}

Status rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int n, int d,
                       float eps, float weight_offset) {
  SPW_RETURN_IF_ERROR(check_rmsnorm_shape("rmsnorm_forward", n, d, eps));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n),
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) {
          const float r = norm_row(y + i * d, x + i * d, w, d, eps, weight_offset);
          if (rstd) rstd[i] = r;
        }
      },
      rows_per_chunk(d));
  return Status::ok_status();
}

Status residual_rmsnorm_forward(float* sum, float* y, float* rstd, const float* x, const float* res,
                                const float* w, int n, int d, float eps, float weight_offset) {
  SPW_RETURN_IF_ERROR(check_rmsnorm_shape("residual_rmsnorm_forward", n, d, eps));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n),
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) {
          float* si = sum + i * d;  // may be x's row: each element is read before it is written
          const float* xi = x + i * d;
          const float* ri = res + i * d;
          for (int j = 0; j < d; ++j) si[j] = xi[j] + ri[j];
          const float r = norm_row(y + i * d, si, w, d, eps, weight_offset);
          if (rstd) rstd[i] = r;
        }
      },
      rows_per_chunk(d));
  return Status::ok_status();
}

Status rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        const float* rstd, int n, int d, bool accumulate_dx, float weight_offset) {
  SPW_RETURN_IF_ERROR(check_rmsnorm_shape("rmsnorm_backward", n, d, 0.0f));
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
            const float off = weight_offset;
            double dot = 0.0;  // Σ_j (dy·(w + offset))·x
            for (int j = 0; j < d; ++j) dot += double(gi[j]) * (w[j] + off) * xi[j];
            const float c = static_cast<float>(double(r) * r * r * dot / d);
            if (accumulate_dx) {
              for (int j = 0; j < d; ++j) dxi[j] += r * gi[j] * (w[j] + off) - c * xi[j];
            } else {
              for (int j = 0; j < d; ++j) dxi[j] = r * gi[j] * (w[j] + off) - c * xi[j];
            }
          }
        },
        rows_per_chunk(d));
  }
  if (dw) {
    // Column blocks: each task owns dw[j0, j1), so rows sum without atomics or partial buffers.
    // Summed in double, like the bias gradient (linear.cpp): over thousands of tokens the terms
    // largely cancel, and AdamW would turn float rounding noise into full-size updates. Tiles of
    // kColumnTile columns keep the sums on the stack (no op allocates).
    pool.parallel_for(
        static_cast<size_t>(d),
        [&](size_t j0, size_t j1) {
          for (size_t c0 = j0; c0 < j1; c0 += kColumnTile) {
            const size_t c1 = std::min(j1, c0 + kColumnTile);
            double acc[kColumnTile] = {};
            for (int i = 0; i < n; ++i) {
              const float* xi = x + static_cast<size_t>(i) * d;
              const float* gi = dy + static_cast<size_t>(i) * d;
              const float r = rstd[i];
              for (size_t j = c0; j < c1; ++j) acc[j - c0] += double(gi[j] * xi[j]) * r;
            }
            for (size_t j = c0; j < c1; ++j) dw[j] += static_cast<float>(acc[j - c0]);
          }
        },
        kColumnTile);
  }
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
