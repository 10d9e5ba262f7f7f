// Causal GQA attention forward and backward (math in attention.h).
//
// Layout: a row (b, t, head) of q/out/dout is q + ((b·T + t)·hq + head)·d; of k/v with hkv heads
// likewise. Work items are single rows; `interleave` maps item i of a (b, head) to row t so that
// consecutive items alternate short and long causal rows (0, T−1, 1, T−2, ...).
#include "compute/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

namespace {

inline float dot(const float* a, const float* b, int d) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < d; ++j) s += a[j] * b[j];
  return s;
}

inline void axpy(float* y, float a, const float* x, int d) {
#pragma omp simd
  for (int j = 0; j < d; ++j) y[j] += a * x[j];
}

inline int interleave(size_t i, int seq) {
  const int k = static_cast<int>(i / 2);
  return (i % 2 == 0) ? k : seq - 1 - k;
}

Status check_shape(const char* what, int batch, int seq, int hq, int hkv, int d) {
  if (batch < 0 || seq < 0 || hq <= 0 || hkv <= 0 || d <= 0 || hq % hkv != 0) {
    return invalid_argument(std::string(what) + ": bad shape batch=" + std::to_string(batch) +
                            " seq=" + std::to_string(seq) + " hq=" + std::to_string(hq) +
                            " hkv=" + std::to_string(hkv) + " head_dim=" + std::to_string(d) +
                            " (hq must be a multiple of hkv)");
  }
  return Status::ok_status();
}

// Rows per parallel chunk: enough work (~64k multiply-adds) to amortise the dispatch.
size_t min_rows(int seq, int d) {
  const size_t per_row = static_cast<size_t>(std::max(1, seq / 2)) * d * 2;
  return std::max<size_t>(1, 65536 / std::max<size_t>(1, per_row));
}

}  // namespace

Status attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         int batch, int seq, int hq, int hkv, int head_dim) {
  SPW_RETURN_IF_ERROR(check_shape("attention_forward", batch, seq, hq, hkv, head_dim));
  const int d = head_dim, group = hq / hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t items = static_cast<size_t>(batch) * hq * seq;
  ThreadPool::global().parallel_for(
      items,
      [&](size_t i0, size_t i1) {
        std::vector<float> p(seq);
        std::vector<float> acc(d);
        for (size_t item = i0; item < i1; ++item) {
          const size_t bh = item / seq;  // b·hq + h
          const int b = static_cast<int>(bh / hq), h = static_cast<int>(bh % hq);
          const int t = interleave(item % seq, seq), kvh = h / group;
          const size_t tok = static_cast<size_t>(b) * seq;
          const float* qt = q + ((tok + t) * hq + h) * d;
          float m = -std::numeric_limits<float>::infinity();
          for (int s = 0; s <= t; ++s) {
            p[s] = dot(qt, k + ((tok + s) * hkv + kvh) * d, d) * scale;
            m = std::max(m, p[s]);
          }
          float l = 0.0f;
          for (int s = 0; s <= t; ++s) {
            p[s] = std::exp(p[s] - m);
            l += p[s];
          }
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int s = 0; s <= t; ++s) axpy(acc.data(), p[s], v + ((tok + s) * hkv + kvh) * d, d);
          const float inv_l = 1.0f / l;
          float* ot = out + ((tok + t) * hq + h) * d;
          for (int j = 0; j < d; ++j) ot[j] = acc[j] * inv_l;
          lse[bh * seq + t] = m + std::log(l);
        }
      },
      min_rows(seq, d));
  return Status::ok_status();
}

Status attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                          const float* k, const float* v, const float* out, const float* lse,
                          int batch, int seq, int hq, int hkv, int head_dim) {
  SPW_RETURN_IF_ERROR(check_shape("attention_backward", batch, seq, hq, hkv, head_dim));
  const int d = head_dim, group = hq / hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  ThreadPool& pool = ThreadPool::global();
  const size_t rows = min_rows(seq, d);

  // D[b, hq, t] = rowsum(dO ∘ O)
  const size_t q_items = static_cast<size_t>(batch) * hq * seq;
  std::vector<float> delta(q_items);
  pool.parallel_for(
      q_items,
      [&](size_t i0, size_t i1) {
        for (size_t item = i0; item < i1; ++item) {
          const size_t bh = item / seq;
          const size_t b = bh / hq, h = bh % hq, t = item % seq;
          const size_t off = ((b * seq + t) * hq + h) * d;
          delta[item] = dot(dout + off, out + off, d);
        }
      },
      256);

  // dQ, one query row per item: dq_t = scale · Σ_{s<=t} dS_ts · k_s
  pool.parallel_for(
      q_items,
      [&](size_t i0, size_t i1) {
        for (size_t item = i0; item < i1; ++item) {
          const size_t bh = item / seq;
          const int b = static_cast<int>(bh / hq), h = static_cast<int>(bh % hq);
          const int t = interleave(item % seq, seq), kvh = h / group;
          const size_t tok = static_cast<size_t>(b) * seq;
          const size_t qoff = ((tok + t) * hq + h) * d;
          const float* qt = q + qoff;
          const float* dot_ = dout + qoff;
          const float l = lse[bh * seq + t], dt = delta[bh * seq + t];
          float* dqt = dq + qoff;
          std::fill(dqt, dqt + d, 0.0f);
          for (int s = 0; s <= t; ++s) {
            const size_t koff = ((tok + s) * hkv + kvh) * d;
            const float pr = std::exp(dot(qt, k + koff, d) * scale - l);
            const float ds = pr * (dot(dot_, v + koff, d) - dt);
            axpy(dqt, ds * scale, k + koff, d);
          }
        }
      },
      rows);

  // dK, dV, one key row per item, summed over the group's query heads and queries t >= s:
  // dk_s = scale · Σ dS_ts · q_t,  dv_s = Σ P_ts · dO_t
  const size_t k_items = static_cast<size_t>(batch) * hkv * seq;
  pool.parallel_for(
      k_items,
      [&](size_t i0, size_t i1) {
        for (size_t item = i0; item < i1; ++item) {
          const size_t bkh = item / seq;
          const int b = static_cast<int>(bkh / hkv), kvh = static_cast<int>(bkh % hkv);
          const int s = interleave(item % seq, seq);
          const size_t tok = static_cast<size_t>(b) * seq;
          const size_t koff = ((tok + s) * hkv + kvh) * d;
          const float* ks = k + koff;
          const float* vs = v + koff;
          float* dks = dk + koff;
          float* dvs = dv + koff;
          std::fill(dks, dks + d, 0.0f);
          std::fill(dvs, dvs + d, 0.0f);
          for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
            const size_t bh = static_cast<size_t>(b) * hq + h;
            for (int t = s; t < seq; ++t) {
              const size_t qoff = ((tok + t) * hq + h) * d;
              const float pr = std::exp(dot(q + qoff, ks, d) * scale - lse[bh * seq + t]);
              const float ds = pr * (dot(dout + qoff, vs, d) - delta[bh * seq + t]);
              axpy(dks, ds * scale, q + qoff, d);
              axpy(dvs, pr, dout + qoff, d);
            }
          }
        }
      },
      rows);
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
