// SwiGLU forward/backward (formulas in swiglu.h).
#include "compute/cpu/swiglu.h"

#include <cmath>
#include <string>

#include "compute/cpu/vec-math.h"
#include "core/thread-pool.h"

namespace spillway::compute::cpu {

static constexpr size_t kMinChunk = 4096;

Status check_swiglu_shape(const char* what, int n, int f) {
  if (n < 0 || f < 0) {
    return invalid_argument(std::string(what) + ": bad shape n=" + std::to_string(n) +
                            " f=" + std::to_string(f));
  }
  return Status::ok_status();
}

#pragma omp declare simd
static inline float sigmoid(float g) {
  return 1.0f / (1.0f + expf_fast(-g));
}

SPW_MULTIVERSION
static void swiglu_forward_range(float* out, const float* gate, const float* up, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

SPW_MULTIVERSION
static void swiglu_backward_range(float* dgate, float* dup, const float* dout, const float* gate,
                                  const float* up, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i], s = sigmoid(g), go = dout[i];
    dup[i] = go * g * s;
    dgate[i] = go * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

Status swiglu_forward(float* out, const float* gate, const float* up, int n, int f) {
  SPW_RETURN_IF_ERROR(check_swiglu_shape("swiglu_forward", n, f));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n) * f,
      [&](size_t i0, size_t i1) { swiglu_forward_range(out + i0, gate + i0, up + i0, i1 - i0); },
      kMinChunk);
  return Status::ok_status();
}

Status swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, int n, int f) {
  SPW_RETURN_IF_ERROR(check_swiglu_shape("swiglu_backward", n, f));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n) * f,
      [&](size_t i0, size_t i1) {
        swiglu_backward_range(dgate + i0, dup + i0, dout + i0, gate + i0, up + i0, i1 - i0);
      },
      kMinChunk);
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
