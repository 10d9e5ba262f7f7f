// SwiGLU forward/backward (formulas in swiglu.h).
#include "compute/cpu/swiglu.h"

#include <cmath>
#include <string>

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

static constexpr size_t kMinChunk = 4096;

static Status check_shape(const char* what, int n, int f) {
  if (n < 0 || f < 0) {
    return invalid_argument(std::string(what) + ": bad shape n=" + std::to_string(n) +
                            " f=" + std::to_string(f));
  }
  return Status::ok_status();
}

static inline float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

Status swiglu_forward(float* out, const float* gate, const float* up, int n, int f) {
  SPW_RETURN_IF_ERROR(check_shape("swiglu_forward", n, f));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n) * f,
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
      },
      kMinChunk);
  return Status::ok_status();
}

Status swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, int n, int f) {
  SPW_RETURN_IF_ERROR(check_shape("swiglu_backward", n, f));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n) * f,
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) {
          const float g = gate[i], s = sigmoid(g), go = dout[i];
          dup[i] = go * g * s;
          dgate[i] = go * up[i] * s * (1.0f + g * (1.0f - s));
        }
      },
      kMinChunk);
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
