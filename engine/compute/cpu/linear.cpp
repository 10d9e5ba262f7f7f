// Linear forward/backward: three sgemm calls and a column-sum for the bias.
#include "compute/cpu/linear.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

static constexpr size_t kColumnTile = 64;  // bias-gradient columns summed per pass over the rows

Status check_linear_shape(const char* what, int n, int in, int out) {
  if (n < 0 || in <= 0 || out <= 0) {
    return invalid_argument(std::string(what) + ": bad shape n=" + std::to_string(n) +
                            " in=" + std::to_string(in) + " out=" + std::to_string(out));
  }
  return Status::ok_status();
}

Status linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                      int out) {
  SPW_RETURN_IF_ERROR(check_linear_shape("linear_forward", n, in, out));
  if (n == 0) return Status::ok_status();
  float beta = 0.0f;
  if (b) {
    // Seed y with the bias so sgemm adds x·Wᵀ onto it (beta = 1).
    ThreadPool::global().parallel_for(
        static_cast<size_t>(n),
        [&](size_t i0, size_t i1) {
          for (size_t i = i0; i < i1; ++i) std::memcpy(y + i * out, b, sizeof(float) * out);
        },
        16);
    beta = 1.0f;
  }
  // y[n, out] = x[n, in] · W[out, in]ᵀ
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, beta, y,
              out);
  return Status::ok_status();
}

Status linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                       const float* w, int n, int in, int out, bool accumulate_dx) {
  SPW_RETURN_IF_ERROR(check_linear_shape("linear_backward", n, in, out));
  if (n == 0) return Status::ok_status();
  if (dx) {
    // dx[n, in] = dy[n, out] · W[out, in]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in,
                accumulate_dx ? 1.0f : 0.0f, dx, in);
  }
  if (dw) {
    // dW[out, in] += dy[n, out]ᵀ · x[n, in]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw,
                in);
  }
  if (db) {
    ThreadPool::global().parallel_for(
        static_cast<size_t>(out),
        [&](size_t j0, size_t j1) {
          // Summed in double: bias gradients are sums of many terms that largely cancel, and
          // AdamW turns their rounding noise into full-size updates. Tiles of kColumnTile
          // columns keep the sums on the stack (no op allocates).
          for (size_t c0 = j0; c0 < j1; c0 += kColumnTile) {
            const size_t c1 = std::min(j1, c0 + kColumnTile);
            double acc[kColumnTile] = {};
            for (int i = 0; i < n; ++i) {
              const float* r = dy + static_cast<size_t>(i) * out;
              for (size_t j = c0; j < c1; ++j) acc[j - c0] += r[j];
            }
            for (size_t j = c0; j < c1; ++j) db[j] += static_cast<float>(acc[j - c0]);
          }
        },
        kColumnTile);
  }
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
