// Chunked LM head + cross-entropy (math in cross-entropy.h).
#include "compute/cpu/cross-entropy.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "compute/cpu/vec-math.h"
#include "core/thread-pool.h"

namespace spillway::compute::cpu {

static constexpr int32_t kIgnoreIndex = -100;

// CE of one row of logits l[v] for `label`: log Σ exp(l) − l[label] (max-shifted, the sum in
// double). With grad_scale != 0 the row is overwritten by (softmax − onehot)·grad_scale.
SPW_MULTIVERSION
static double cross_entropy_row(float* l, int v, int label, float grad_scale) {
  float m = l[0];
  for (int j = 1; j < v; ++j) m = std::max(m, l[j]);
  const float target = l[label];
  double sum = 0.0;
  if (grad_scale != 0.0f) {
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < v; ++j) {
      l[j] = expf_fast(l[j] - m);  // the exponentials become the softmax in place
      sum += l[j];
    }
    const float k = static_cast<float>(grad_scale / sum);
#pragma omp simd
    for (int j = 0; j < v; ++j) l[j] *= k;
    l[label] -= grad_scale;
  } else {
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < v; ++j) sum += expf_fast(l[j] - m);
  }
  return double(m) + std::log(sum) - target;
}

Status check_lm_head_shape(int n, int d, int v, int chunk) {
  if (n < 0 || d <= 0 || v <= 0 || chunk <= 0) {
    return invalid_argument("lm_head_loss: bad shape n=" + std::to_string(n) +
                            " d=" + std::to_string(d) + " v=" + std::to_string(v) +
                            " chunk=" + std::to_string(chunk));
  }
  return Status::ok_status();
}

size_t lm_head_scratch_bytes(int n, int v, int chunk) {
  if (n <= 0 || v <= 0 || chunk <= 0) return 0;
  return sizeof(float) * static_cast<size_t>(std::min(n, chunk)) * v;
}

Status lm_head_loss(float* losses, float* dx, float* dw, const float* x, const float* w,
                    const int32_t* labels, int n, int d, int v, float loss_scale, float* logits_out,
                    int chunk, void* scratch) {
  SPW_RETURN_IF_ERROR(check_lm_head_shape(n, d, v, chunk));
  for (int i = 0; i < n; ++i) {
    if (labels[i] != kIgnoreIndex && (labels[i] < 0 || labels[i] >= v)) {
      return invalid_argument("lm_head_loss: label " + std::to_string(labels[i]) + " at position " +
                              std::to_string(i) + " is neither -100 nor in [0, " +
                              std::to_string(v) + ")");
    }
  }
  const bool grad = loss_scale != 0.0f;
  ThreadPool& pool = ThreadPool::global();
  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int rows = std::min(chunk, n - r0);
    const float* xc = x + static_cast<size_t>(r0) * d;  // [rows, d]
    float* logits = static_cast<float*>(scratch);       // [rows, v]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, v, d, 1.0f, xc, d, w, d, 0.0f,
                logits, v);
    if (logits_out) {
      std::memcpy(logits_out + static_cast<size_t>(r0) * v, logits,
                  sizeof(float) * static_cast<size_t>(rows) * v);
    }
    bool any_target = false;
    for (int r = 0; r < rows; ++r) any_target |= labels[r0 + r] != kIgnoreIndex;
    pool.parallel_for(
        static_cast<size_t>(rows),
        [&](size_t i0, size_t i1) {
          for (size_t r = i0; r < i1; ++r) {
            float* lr = logits + r * v;
            const int32_t label = labels[r0 + r];
            if (label == kIgnoreIndex) {
              losses[r0 + r] = 0.0f;
              if (grad) std::fill(lr, lr + v, 0.0f);
              continue;
            }
            losses[r0 + r] =
                static_cast<float>(cross_entropy_row(lr, v, label, grad ? loss_scale : 0.0f));
          }
        },
        1);
    if (!grad) continue;
    float* dxc = dx ? dx + static_cast<size_t>(r0) * d : nullptr;  // [rows, d]
    if (!any_target) {
      if (dxc) std::memset(dxc, 0, sizeof(float) * static_cast<size_t>(rows) * d);
      continue;
    }
    if (dxc) {
      // dx[rows, d] = dlogits[rows, v] · W[v, d]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, v, 1.0f, logits, v, w, d,
                  0.0f, dxc, d);
    }
    if (dw) {
      // dW[v, d] += dlogits[rows, v]ᵀ · x[rows, d]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, v, d, rows, 1.0f, logits, v, xc, d, 1.0f,
                  dw, d);
    }
  }
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
