// The key bias's gradient in double precision (see attention-key-bias.h for the formula).
#include "compute/cpu/attention-key-bias.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "compute/cpu/scratch.h"
#include "compute/cpu/vec-math.h"
#include "core/thread-pool.h"

namespace spillway::compute::cpu {
namespace {

constexpr int kRowsPerBlock = 32;  // query rows per work item (and per partial sum)

inline float dot(const float* a, const float* b, int n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

struct Shape {
  int batch, seq, hq, hkv, d;
};

// out[d] += Σ over query rows [i0, i1) of head h of sequence b: Σ_j dS_ij R_jᵀ q_i / sqrt(d).
// Scores, dP and the unnormalised softmax stay float32: they only perturb the inputs, and the
// result is exact for the perturbed ones as long as Σ_j dS_ij = 0, which the double normalisation
// and D below keep. Scratch: s, dp of seq floats, ds of seq doubles, ab of d doubles.
SPW_MULTIVERSION
void block_rows(double* out, const float* dout, const float* q, const float* k, const float* v,
                const Shape& sh, int b, int h, int i0, int i1, const RopeTable& table,
                const int32_t* pos, float* s, float* dp, double* ds, double* ab) {
  const int d = sh.d, half = d / 2, g = h / (sh.hq / sh.hkv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  double* A = ab;
  double* B = ab + half;
  for (int i = i0; i < i1; ++i) {
    const size_t qi = ((static_cast<size_t>(b) * sh.seq + i) * sh.hq + h) * d;
    const float* q_i = q + qi;
    const float* do_i = dout + qi;
    const int j0 = pos ? i - pos[i] : 0, n = i + 1;  // keys j0..i: this example's
    float m = -std::numeric_limits<float>::infinity();
    for (int j = j0; j < n; ++j) {
      const size_t kj = ((static_cast<size_t>(b) * sh.seq + j) * sh.hkv + g) * d;
      s[j] = dot(q_i, k + kj, d) * scale;
      dp[j] = dot(do_i, v + kj, d);
      m = std::max(m, s[j]);
    }
#pragma omp simd
    for (int j = j0; j < n; ++j) s[j] = expf_fast(s[j] - m);
    double z = 0, pdp = 0;
#pragma omp simd reduction(+ : z, pdp)
    for (int j = j0; j < n; ++j) {
      z += s[j];
      pdp += double(s[j]) * dp[j];
    }
    const double D = pdp / z, inv_z = 1.0 / z;
#pragma omp simd
    for (int j = j0; j < n; ++j) ds[j] = double(s[j]) * inv_z * (double(dp[j]) - D);
    std::fill(ab, ab + d, 0.0);
    for (int j = j0; j < n; ++j) {
      const size_t at = static_cast<size_t>(pos ? pos[j] : j) * half;  // key j's rotation
      const float* c = table.cos.data() + at;
      const float* sn = table.sin.data() + at;
#pragma omp simd
      for (int f = 0; f < half; ++f) {
        A[f] += ds[j] * c[f];
        B[f] += ds[j] * sn[f];
      }
    }
    for (int f = 0; f < half; ++f) {
      out[f] += scale * (q_i[f] * A[f] + q_i[f + half] * B[f]);
      out[f + half] += scale * (q_i[f + half] * A[f] - q_i[f] * B[f]);
    }
  }
}

// One thread's buffers for block_rows.
struct RowBuffers {
  float *s, *dp;
  double *ds, *ab;
};

RowBuffers take_rows(Scratch& sc, int seq, int d) {
  RowBuffers r;
  r.s = sc.take<float>(seq);
  r.dp = sc.take<float>(seq);
  r.ds = sc.take<double>(seq);
  r.ab = sc.take<double>(d);
  return r;
}

size_t blocks_of(int seq) {
  return (static_cast<size_t>(seq) + kRowsPerBlock - 1) / kRowsPerBlock;
}

// The partial sums [items, d] (item = (b, h, block of rows)), then the per-thread rows.
struct KeyBiasScratch {
  double* partial;
  Scratch::Parts rows;
};

KeyBiasScratch take_key_bias(Scratch& sc, int batch, int seq, int hq, int d) {
  KeyBiasScratch k;
  k.partial = sc.take<double>(static_cast<size_t>(batch) * hq * blocks_of(seq) * d);
  Scratch count;
  take_rows(count, seq, d);
  k.rows = sc.take_parts(count.bytes());
  return k;
}

}  // namespace

Status check_attention_key_bias_shape(const char* what, int batch, int seq, int hq, int hkv,
                                      int head_dim) {
  if (batch < 0 || seq < 0 || hq <= 0 || hkv <= 0 || hq % hkv != 0 || head_dim <= 0 ||
      head_dim % 2 != 0) {
    return invalid_argument(
        std::string(what) +
        ": needs batch, seq >= 0, hq a multiple of hkv and an even head_dim, got batch " +
        std::to_string(batch) + ", seq " + std::to_string(seq) + ", hq " + std::to_string(hq) +
        ", hkv " + std::to_string(hkv) + ", head_dim " + std::to_string(head_dim));
  }
  return Status::ok_status();
}

size_t attention_key_bias_scratch_bytes(int batch, int seq, int hq, int hkv, int head_dim) {
  if (!check_attention_key_bias_shape("", batch, seq, hq, hkv, head_dim).ok() || batch == 0 ||
      seq == 0)
    return 0;
  Scratch count;
  take_key_bias(count, batch, seq, hq, head_dim);
  return count.bytes();
}

Status attention_key_bias_backward(float* db, const float* dout, const float* q, const float* k,
                                   const float* v, int batch, int seq, int hq, int hkv,
                                   int head_dim, const RopeTable& table, void* scratch,
                                   const int32_t* positions) {
  SPW_RETURN_IF_ERROR(
      check_attention_key_bias_shape("attention_key_bias_backward", batch, seq, hq, hkv, head_dim));
  if (table.head_dim != head_dim || table.seq < seq) {
    return invalid_argument("attention_key_bias_backward: RoPE table of head_dim " +
                            std::to_string(table.head_dim) + " for " + std::to_string(table.seq) +
                            " positions, needs " + std::to_string(head_dim) + " and " +
                            std::to_string(seq));
  }
  if (table.rotary_dim != head_dim) {
    return unsupported(
        "attention_key_bias_backward: a key bias with partial rotation (rotary_dim " +
        std::to_string(table.rotary_dim) + " of head_dim " + std::to_string(head_dim) +
        ") is not supported");
  }
  if (batch == 0 || seq == 0) return Status::ok_status();
  const Shape sh{batch, seq, hq, hkv, head_dim};
  const size_t blocks = blocks_of(seq);
  const size_t items = static_cast<size_t>(batch) * hq * blocks;  // (b, h, block of rows)
  Scratch ws(scratch);
  const KeyBiasScratch ks = take_key_bias(ws, batch, seq, hq, head_dim);
  double* partial = ks.partial;
  std::fill_n(partial, items * head_dim, 0.0);
  split_parts(items, 1, [&](size_t part, size_t c0, size_t c1) {
    Scratch ps(ks.rows[part]);
    const RowBuffers rb = take_rows(ps, seq, head_dim);
    for (size_t c = c0; c < c1; ++c) {
      const size_t bh = c / blocks;
      const int b = static_cast<int>(bh / hq), i0 = static_cast<int>(c % blocks) * kRowsPerBlock;
      const int32_t* pos = positions ? positions + static_cast<size_t>(b) * seq : nullptr;
      block_rows(partial + c * head_dim, dout, q, k, v, sh, b, static_cast<int>(bh % hq), i0,
                 std::min(seq, i0 + kRowsPerBlock), table, pos, rb.s, rb.dp, rb.ds, rb.ab);
    }
  });
  // Sum the partials in a fixed order: kv head g takes query heads g·group .. (g+1)·group − 1.
  const int group = hq / hkv;
  for (int g = 0; g < hkv; ++g) {
    for (int e = 0; e < head_dim; ++e) {
      double acc = 0;
      for (int b = 0; b < batch; ++b)
        for (int h = g * group; h < (g + 1) * group; ++h)
          for (size_t blk = 0; blk < blocks; ++blk)
            acc += partial[((static_cast<size_t>(b) * hq + h) * blocks + blk) * head_dim + e];
      db[static_cast<size_t>(g) * head_dim + e] += static_cast<float>(acc);
    }
  }
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
