// GeGLU forward/backward (formulas in geglu.h).
#include "compute/cpu/geglu.h"

#include <cmath>

#include "compute/cpu/swiglu.h"  // check_swiglu_shape: the same n, f of a gated unit
#include "core/thread-pool.h"

namespace spillway::compute::cpu {

namespace {

constexpr size_t kMinChunk = 4096;
constexpr float kBeta = 0.7978845608028654f;  // √(2/π)
constexpr float kKappa = 0.044715f;

inline float gelu_tanh(float g) {
  const float t = std::tanh(kBeta * (g + kKappa * g * g * g));
  return 0.5f * g * (1.0f + t);
}

// d gelu_tanh / dg, as torch's GeluBackward (approximate="tanh").
inline float gelu_tanh_grad(float g) {
  const float g2 = g * g;
  const float t = std::tanh(kBeta * (g + kKappa * g2 * g));
  return 0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * kBeta * (1.0f + 3.0f * kKappa * g2);
}

}  // namespace

Status geglu_forward(float* out, const float* gate, const float* up, int n, int f) {
  SPW_RETURN_IF_ERROR(check_swiglu_shape("geglu_forward", n, f));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n) * f,
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
      },
      kMinChunk);
  return Status::ok_status();
}

Status geglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                      const float* up, int n, int f) {
  SPW_RETURN_IF_ERROR(check_swiglu_shape("geglu_backward", n, f));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n) * f,
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) {
          const float g = gate[i], go = dout[i];
          dup[i] = go * gelu_tanh(g);
          dgate[i] = go * up[i] * gelu_tanh_grad(g);
        }
      },
      kMinChunk);
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
