// Causal GQA attention forward and backward (math in attention.h).
//
// Layout: row (b, t, head) of q/out/dout starts at ((b·T + t)·hq + head)·d; k/v likewise with
// hkv heads. To turn every inner loop into a SIMD axpy (no horizontal reductions), the operand
// that a score row runs over is first transposed per head to [b, head, d, T]: a row of scores
// S[t, 0..T) is then Σ_j q[t, j] · Kᵀ[j, 0..T). Work items are blocks of kRows query (or key)
// rows, so each loaded K/V/Q row feeds kRows multiply-adds; blocks are visited from both ends of
// the sequence alternately (0, last, 1, last−1, ...) so that any contiguous range of items covers
// the causal triangle evenly.
#include "compute/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "compute/cpu/scratch.h"
#include "compute/cpu/vec-math.h"
#include "core/thread-pool.h"

namespace spillway::compute::cpu {

namespace {

constexpr int kRows = 4;  // query (or key) rows per work item

inline int interleave(size_t i, int blocks) {
  const int k = static_cast<int>(i / 2);
  return (i % 2 == 0) ? k : blocks - 1 - k;
}

constexpr int kTile = 16;  // columns per register tile: 2 AVX2 or 4 SSE registers per row

// Row stride of a transposed head: T rounded up to whole tiles.
inline int padded(int seq) {
  return (seq + kTile - 1) / kTile * kTile;
}

// Floats of a transposed copy of x[b, T, heads, d]: [b, heads, d, padded(T)] plus one spare tile
// at the end so that a tile that starts inside the last row may run past it.
size_t transposed_floats(int batch, int seq, int heads, int d) {
  return static_cast<size_t>(batch) * heads * d * padded(seq) + kTile;
}

// x[b, T, heads, d] → xt [transposed_floats], zero padding.
void transpose_heads(float* xt, const float* x, int batch, int seq, int heads, int d) {
  const size_t tp = padded(seq);
  ThreadPool::global().parallel_for(static_cast<size_t>(batch) * heads, [&](size_t i0, size_t i1) {
    for (size_t bh = i0; bh < i1; ++bh) {
      const size_t b = bh / heads, h = bh % heads;
      float* dst = xt + bh * d * tp;
      for (int t = 0; t < seq; ++t) {
        const float* src = x + ((b * seq + t) * heads + h) * d;
        for (int j = 0; j < d; ++j) dst[j * tp + t] = src[j];
      }
      for (int j = 0; j < d; ++j) std::fill(dst + j * tp + seq, dst + (j + 1) * tp, 0.0f);
    }
  });
  std::fill_n(xt + static_cast<size_t>(batch) * heads * d * tp, kTile, 0.0f);
}

// out[r][0, count) = Σ_j a[r][j] · bt[j][0, count) for kRows rows. bt is [d, stride] and may be
// read up to whole tiles past `count`; out rows are written likewise (callers pad both).
// A kRows × kTile tile of sums stays in eight vector registers through the whole j loop.
static_assert(kRows == 4 && kTile == 16, "the register tile below is written out for 4 x 16");
SPW_MULTIVERSION
void rows_times_transposed(float* const out[kRows], const float* const a[kRows], const float* bt,
                           size_t stride, int count, int d) {
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
  for (int s0 = 0; s0 < count; s0 += kTile) {
    v8f c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {}, c30 = {}, c31 = {};
    const float* col = bt + s0;
    for (int j = 0; j < d; ++j, col += stride) {
      const v8f k0 = load8(col), k1 = load8(col + 8);
      c00 += a0[j] * k0, c01 += a0[j] * k1;
      c10 += a1[j] * k0, c11 += a1[j] * k1;
      c20 += a2[j] * k0, c21 += a2[j] * k1;
      c30 += a3[j] * k0, c31 += a3[j] * k1;
    }
    store8(out[0] + s0, c00), store8(out[0] + s0 + 8, c01);
    store8(out[1] + s0, c10), store8(out[1] + s0 + 8, c11);
    store8(out[2] + s0, c20), store8(out[2] + s0 + 8, c21);
    store8(out[3] + s0, c30), store8(out[3] + s0 + 8, c31);
  }
}

// acc[r][j0, j0 + 8·V) += Σ_{s in [s0, s1)} w[r][s] · row_s[j0, j0 + 8·V), row_s = base + s·stride.
template <int V>
inline __attribute__((always_inline)) void weighted_rows_tile(float* const acc[kRows],
                                                              const float* const w[kRows],
                                                              const float* base, size_t stride,
                                                              int s0, int s1, int j0) {
  v8f c[kRows][V];
  for (int r = 0; r < kRows; ++r)
    for (int x = 0; x < V; ++x) c[r][x] = load8(acc[r] + j0 + 8 * x);
  for (int s = s0; s < s1; ++s) {
    const float* row = base + s * stride + j0;
    v8f x8[V];
    for (int x = 0; x < V; ++x) x8[x] = load8(row + 8 * x);
    for (int r = 0; r < kRows; ++r) {
      const float wr = w[r][s];
      for (int x = 0; x < V; ++x) c[r][x] += wr * x8[x];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int x = 0; x < V; ++x) store8(acc[r] + j0 + 8 * x, c[r][x]);
}

// acc[r][0, d) += Σ_{s in [s0, s1)} w[r][s] · row_s[0, d) for kRows rows.
SPW_MULTIVERSION
void weighted_rows_sum(float* const acc[kRows], const float* const w[kRows], const float* base,
                       size_t stride, int s0, int s1, int d) {
  int j0 = 0;
  for (; j0 + 16 <= d; j0 += 16) weighted_rows_tile<2>(acc, w, base, stride, s0, s1, j0);
  for (; j0 + 8 <= d; j0 += 8) weighted_rows_tile<1>(acc, w, base, stride, s0, s1, j0);
  for (; j0 < d; ++j0) {  // head sizes that are not a multiple of 8
    for (int s = s0; s < s1; ++s) {
      const float x = base[s * stride + j0];
      for (int r = 0; r < kRows; ++r) acc[r][j0] += w[r][s] * x;
    }
  }
}

// s[u] = exp(s[u]·scale − m) for u < n; returns Σ s[u].
SPW_MULTIVERSION
float exp_shifted(float* s, int n, float scale, float m) {
  float l = 0.0f;
#pragma omp simd reduction(+ : l)
  for (int u = 0; u < n; ++u) {
    s[u] = expf_fast(s[u] * scale - m);
    l += s[u];
  }
  return l;
}

// One query row t against keys u < n: s[u] = P·(dp[u] − D_t) with P = exp(s[u]·scale − lse_t).
SPW_MULTIVERSION
void softmax_grad_row(float* s, const float* dp, float lse, float dt, int n, float scale) {
#pragma omp simd
  for (int u = 0; u < n; ++u) s[u] = expf_fast(s[u] * scale - lse) * (dp[u] - dt);
}

// One key row s against queries u < n: P = exp(s[u]·scale − lse[u]), s[u] = P·(p[u] − dt[u]),
// p[u] = P (on entry s holds scores and p holds dP).
SPW_MULTIVERSION
void softmax_grad_col(float* s, float* p, const float* lse, const float* dt, int n, float scale) {
#pragma omp simd
  for (int u = 0; u < n; ++u) {
    const float pr = expf_fast(s[u] * scale - lse[u]);
    s[u] = pr * (p[u] - dt[u]);
    p[u] = pr;
  }
}

// Rows per parallel chunk: enough work (~64k multiply-adds) to amortise the dispatch.
size_t min_blocks(int seq, int d) {
  const size_t per_block = static_cast<size_t>(std::max(1, seq / 2)) * d * 2 * kRows;
  return std::max<size_t>(1, 65536 / std::max<size_t>(1, per_block));
}

// One thread's row buffers: score rows s (and dP rows p in the backward) [kRows, stride], and
// output accumulators acc (and acc_v in the backward) [kRows, d].
struct RowBuffers {
  size_t stride;  // a score row: the sequence plus a tile of overrun
  float *s, *p, *acc, *acc_v;
};

RowBuffers take_rows(Scratch& sc, int seq, int d, bool backward) {
  RowBuffers r;
  r.stride = padded(seq) + kTile;
  r.s = sc.take<float>(kRows * r.stride);
  r.p = backward ? sc.take<float>(kRows * r.stride) : nullptr;
  r.acc = sc.take<float>(static_cast<size_t>(kRows) * d);
  r.acc_v = backward ? sc.take<float>(static_cast<size_t>(kRows) * d) : nullptr;
  return r;
}

size_t row_bytes(int seq, int d, bool backward) {
  Scratch count;
  take_rows(count, seq, d, backward);
  return count.bytes();
}

// Forward scratch: K transposed, then the per-thread rows.
struct ForwardScratch {
  float* kt;
  Scratch::Parts rows;
};

ForwardScratch take_forward(Scratch& sc, int batch, int seq, int hkv, int d) {
  ForwardScratch f;
  f.kt = sc.take<float>(transposed_floats(batch, seq, hkv, d));
  f.rows = sc.take_parts(row_bytes(seq, d, false));
  return f;
}

// Backward scratch: D, two transposed operands (K and V in pass 1, Q and dO in pass 2: hq >= hkv
// heads), then the per-thread rows.
struct BackwardScratch {
  float* delta;
  float *t0, *t1;
  Scratch::Parts rows;
};

BackwardScratch take_backward(Scratch& sc, int batch, int seq, int hq, int d) {
  BackwardScratch b;
  b.delta = sc.take<float>(static_cast<size_t>(batch) * hq * seq);
  b.t0 = sc.take<float>(transposed_floats(batch, seq, hq, d));
  b.t1 = sc.take<float>(transposed_floats(batch, seq, hq, d));
  b.rows = sc.take_parts(row_bytes(seq, d, true));
  return b;
}

// The scale to use (0: 1/sqrt(d)), and the window as a span that always applies: a query sees
// keys [t − span + 1, t], span = seq without a window (nothing earlier than 0 exists).
float resolve_scale(float scale, int d) {
  return scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(d));
}
int window_span(int window, int seq) {
  return window > 0 ? std::min(window, seq) : seq;
}
// The first key query t sees under span w, and in packed rows (pos: this row's positions, or
// null) no key before its example's first token.
inline int first_key(int t, int w, const int32_t* pos = nullptr) {
  const int first = std::max(0, t - w + 1);
  return pos ? std::max(first, t - pos[t]) : first;
}
// One past the last query that sees key s in a packed row (pos, or null): the end of s's example
// (the next token at position 0), else of the row.
inline int example_end(int s, int seq, const int32_t* pos) {
  if (!pos) return seq;
  int t = s + 1;
  while (t < seq && pos[t] != 0) ++t;
  return t;
}

Status check_window(const char* what, int window) {
  if (window >= 0) return Status::ok_status();
  return invalid_argument(std::string(what) + ": sliding window " + std::to_string(window) +
                          " (expected >= 0, 0 for none)");
}

}  // namespace

Status check_attention_shape(const char* what, int batch, int seq, int hq, int hkv, int d) {
  if (batch < 0 || seq < 0 || hq <= 0 || hkv <= 0 || d <= 0 || hq % hkv != 0) {
    return invalid_argument(std::string(what) + ": bad shape batch=" + std::to_string(batch) +
                            " seq=" + std::to_string(seq) + " hq=" + std::to_string(hq) +
                            " hkv=" + std::to_string(hkv) + " head_dim=" + std::to_string(d) +
                            " (hq must be a multiple of hkv)");
  }
  return Status::ok_status();
}

size_t attention_forward_scratch_bytes(int batch, int seq, int hq, int hkv, int head_dim) {
  if (!check_attention_shape("", batch, seq, hq, hkv, head_dim).ok() || batch == 0 || seq == 0)
    return 0;
  Scratch count;
  take_forward(count, batch, seq, hkv, head_dim);
  return count.bytes();
}

size_t attention_backward_scratch_bytes(int batch, int seq, int hq, int hkv, int head_dim) {
  if (!check_attention_shape("", batch, seq, hq, hkv, head_dim).ok() || batch == 0 || seq == 0)
    return 0;
  Scratch count;
  take_backward(count, batch, seq, hq, head_dim);
  return count.bytes();
}

Status attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         int batch, int seq, int hq, int hkv, int head_dim, void* scratch,
                         float scale_in, int window, const int32_t* positions) {
  SPW_RETURN_IF_ERROR(check_attention_shape("attention_forward", batch, seq, hq, hkv, head_dim));
  SPW_RETURN_IF_ERROR(check_window("attention_forward", window));
  if (batch == 0 || seq == 0) return Status::ok_status();
  const int d = head_dim, group = hq / hkv;
  const float scale = resolve_scale(scale_in, d);
  const int span = window_span(window, seq);
  Scratch ws(scratch);
  const ForwardScratch fs = take_forward(ws, batch, seq, hkv, d);
  transpose_heads(fs.kt, k, batch, seq, hkv, d);  // [b, hkv, d, tp]
  const size_t tp = padded(seq);
  const int blocks = (seq + kRows - 1) / kRows;
  const size_t items = static_cast<size_t>(batch) * hq * blocks;
  split_parts(items, min_blocks(seq, d), [&](size_t part, size_t i0, size_t i1) {
    Scratch ps(fs.rows[part]);
    const RowBuffers sc = take_rows(ps, seq, d, false);
    for (size_t item = i0; item < i1; ++item) {
      const size_t bh = item / blocks;  // b·hq + h
      const int b = static_cast<int>(bh / hq), h = static_cast<int>(bh % hq), kvh = h / group;
      const int t0 = interleave(item % blocks, blocks) * kRows;
      const int rows = std::min(kRows, seq - t0), count = t0 + rows;  // keys [lo, count)
      const int32_t* pos = positions ? positions + static_cast<size_t>(b) * seq : nullptr;
      const int lo = first_key(t0, span, pos);
      const size_t tok = static_cast<size_t>(b) * seq;
      const float* qr[kRows];
      float* sr[kRows];
      float* sl[kRows];  // score rows from key lo on
      float* ar[kRows];
      for (int r = 0; r < kRows; ++r) {
        qr[r] = q + ((tok + t0 + std::min(r, rows - 1)) * hq + h) * d;  // pad with a real row
        sr[r] = sc.s + r * sc.stride;
        sl[r] = sr[r] + lo;
        ar[r] = sc.acc + static_cast<size_t>(r) * d;
      }
      rows_times_transposed(sl, qr, fs.kt + (static_cast<size_t>(b) * hkv + kvh) * d * tp + lo, tp,
                            count - lo, d);
      float l_row[kRows];
      for (int r = 0; r < kRows; ++r) {
        // Keys [first, t] are visible (padding rows repeat the last real one); others weigh 0.
        const int t = t0 + std::min(r, rows - 1), first = first_key(t, span, pos);
        float* s = sr[r];
        const int visible = std::min(t + 1, count);
        float m = -std::numeric_limits<float>::infinity();
        for (int u = first; u < visible; ++u) m = std::max(m, s[u] * scale);
        const float l = exp_shifted(s + first, visible - first, scale, m);
        std::fill(s + lo, s + first, 0.0f);
        std::fill(s + visible, s + count, 0.0f);
        l_row[r] = l;
        if (lse && r < rows) lse[bh * seq + t] = m + std::log(l);
      }
      std::fill_n(sc.acc, static_cast<size_t>(kRows) * d, 0.0f);
      weighted_rows_sum(ar, sr, v + tok * hkv * d + static_cast<size_t>(kvh) * d,
                        static_cast<size_t>(hkv) * d, lo, count, d);
      for (int r = 0; r < rows; ++r) {
        const float inv_l = 1.0f / l_row[r];
        float* ot = out + ((tok + t0 + r) * hq + h) * d;
        for (int j = 0; j < d; ++j) ot[j] = ar[r][j] * inv_l;
      }
    }
  });
  return Status::ok_status();
}

Status attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                          const float* k, const float* v, const float* out, const float* lse,
                          int batch, int seq, int hq, int hkv, int head_dim, void* scratch,
                          float scale_in, int window, const int32_t* positions) {
  SPW_RETURN_IF_ERROR(check_attention_shape("attention_backward", batch, seq, hq, hkv, head_dim));
  SPW_RETURN_IF_ERROR(check_window("attention_backward", window));
  if (batch == 0 || seq == 0) return Status::ok_status();
  const int d = head_dim, group = hq / hkv;
  const float scale = resolve_scale(scale_in, d);
  const int span = window_span(window, seq);
  ThreadPool& pool = ThreadPool::global();
  const int blocks = (seq + kRows - 1) / kRows;
  const size_t chunk = min_blocks(seq, d);
  Scratch ws(scratch);
  const BackwardScratch bs = take_backward(ws, batch, seq, hq, d);

  // D[b, hq, t] = rowsum(dO ∘ O)
  const size_t q_rows = static_cast<size_t>(batch) * hq * seq;
  float* delta = bs.delta;
  pool.parallel_for(
      q_rows,
      [&](size_t i0, size_t i1) {
        for (size_t item = i0; item < i1; ++item) {
          const size_t bh = item / seq;
          const size_t b = bh / hq, h = bh % hq, t = item % seq;
          const size_t off = ((b * seq + t) * hq + h) * d;
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int j = 0; j < d; ++j) s += dout[off + j] * out[off + j];
          delta[item] = s;
        }
      },
      256);

  // Pass 1, blocks of query rows: P_ts = exp(S_ts − lse_t), dP_ts = dO_t·v_s,
  // dS = P∘(dP − D), dq_t = scale · Σ_{s<=t} dS_ts · k_s.
  {
    const size_t tp = padded(seq);
    float* kt = bs.t0;  // [b, hkv, d, tp]
    float* vt = bs.t1;
    transpose_heads(kt, k, batch, seq, hkv, d);
    transpose_heads(vt, v, batch, seq, hkv, d);
    split_parts(
        static_cast<size_t>(batch) * hq * blocks, chunk, [&](size_t part, size_t i0, size_t i1) {
          Scratch ps(bs.rows[part]);
          const RowBuffers sc = take_rows(ps, seq, d, true);
          for (size_t item = i0; item < i1; ++item) {
            const size_t bh = item / blocks;
            const int b = static_cast<int>(bh / hq), h = static_cast<int>(bh % hq);
            const int kvh = h / group;
            const int t0 = interleave(item % blocks, blocks) * kRows;
            const int rows = std::min(kRows, seq - t0), count = t0 + rows;
            const int32_t* pos = positions ? positions + static_cast<size_t>(b) * seq : nullptr;
            const int lo = first_key(t0, span, pos);  // keys [lo, count)
            const size_t tok = static_cast<size_t>(b) * seq;
            const float* qr[kRows];
            const float* gr[kRows];
            float* sr[kRows];
            float* pr[kRows];
            float* sl[kRows];  // S and dP rows from key lo on
            float* pl[kRows];
            float* ar[kRows];
            for (int r = 0; r < kRows; ++r) {
              const size_t off = ((tok + t0 + std::min(r, rows - 1)) * hq + h) * d;
              qr[r] = q + off;
              gr[r] = dout + off;
              sr[r] = sc.s + r * sc.stride;
              pr[r] = sc.p + r * sc.stride;
              sl[r] = sr[r] + lo;
              pl[r] = pr[r] + lo;
              ar[r] = sc.acc + static_cast<size_t>(r) * d;
            }
            const size_t kv_off = (static_cast<size_t>(b) * hkv + kvh) * d * tp + lo;
            rows_times_transposed(sl, qr, kt + kv_off, tp, count - lo, d);  // S
            rows_times_transposed(pl, gr, vt + kv_off, tp, count - lo, d);  // dP
            for (int r = 0; r < kRows; ++r) {
              const int t = t0 + std::min(r, rows - 1), first = first_key(t, span, pos);
              const float l = lse[bh * seq + t], dt = delta[bh * seq + t];
              const int visible = std::min(t + 1, count);
              float* s = sr[r];
              softmax_grad_row(s + first, pr[r] + first, l, dt, visible - first, scale);
              std::fill(s + lo, s + first, 0.0f);
              std::fill(s + visible, s + count, 0.0f);
            }
            std::fill_n(sc.acc, static_cast<size_t>(kRows) * d, 0.0f);
            weighted_rows_sum(ar, sr, k + tok * hkv * d + static_cast<size_t>(kvh) * d,
                              static_cast<size_t>(hkv) * d, lo, count, d);
            for (int r = 0; r < rows; ++r) {
              float* dqt = dq + ((tok + t0 + r) * hq + h) * d;
              for (int j = 0; j < d; ++j) dqt[j] = ar[r][j] * scale;
            }
          }
        });
  }

  // Pass 2, blocks of key rows, summed over the group's query heads and queries t >= s:
  // dk_s = scale · Σ_t dS_ts · q_t,  dv_s = Σ_t P_ts · dO_t.
  const size_t tp = padded(seq);
  float* qt = bs.t0;  // [b, hq, d, tp]
  float* gt = bs.t1;  // [b, hq, d, tp]
  transpose_heads(qt, q, batch, seq, hq, d);
  transpose_heads(gt, dout, batch, seq, hq, d);
  split_parts(
      static_cast<size_t>(batch) * hkv * blocks, chunk, [&](size_t part, size_t i0, size_t i1) {
        Scratch ps(bs.rows[part]);
        const RowBuffers sc = take_rows(ps, seq, d, true);
        for (size_t item = i0; item < i1; ++item) {
          const size_t bkh = item / blocks;
          const int b = static_cast<int>(bkh / hkv), kvh = static_cast<int>(bkh % hkv);
          const int s0 = interleave(item % blocks, blocks) * kRows;
          const int rows = std::min(kRows, seq - s0);
          const int32_t* pos = positions ? positions + static_cast<size_t>(b) * seq : nullptr;
          // Queries [s0, end): those of the last key's window and example.
          const int last_example_end = example_end(s0 + rows - 1, seq, pos);
          const int end = std::min({seq, s0 + rows - 1 + span, last_example_end});
          // Query t sees key s when s <= t < s + span, in s's example: each row's queries
          // [first, last), the same for every head of the group. A row's example ends where the
          // next row starts one, else with the row after it's.
          int first_of[kRows], last_of[kRows];
          for (int r = kRows - 1, example_end_r = last_example_end; r >= 0; --r) {
            const int s = s0 + r;
            if (pos && r + 1 < rows && pos[s + 1] == 0) example_end_r = s + 1;
            first_of[r] = std::min(s, end);
            last_of[r] = std::max(first_of[r], std::min({end, s + span, example_end_r}));
          }
          const size_t tok = static_cast<size_t>(b) * seq;
          const float* kr[kRows];
          const float* vr[kRows];
          float* sr[kRows];  // [kRows, T] scores, then dS, indexed by query t
          float* pr[kRows];  // [kRows, T] dP, then P
          float* ak[kRows];
          float* av[kRows];
          for (int r = 0; r < kRows; ++r) {
            const size_t off = ((tok + s0 + std::min(r, rows - 1)) * hkv + kvh) * d;
            kr[r] = k + off;
            vr[r] = v + off;
            sr[r] = sc.s + r * sc.stride;
            pr[r] = sc.p + r * sc.stride;
            ak[r] = sc.acc + static_cast<size_t>(r) * d;
            av[r] = sc.acc_v + static_cast<size_t>(r) * d;
          }
          std::fill_n(sc.acc, static_cast<size_t>(kRows) * d, 0.0f);
          std::fill_n(sc.acc_v, static_cast<size_t>(kRows) * d, 0.0f);
          for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
            const size_t bh = static_cast<size_t>(b) * hq + h;
            const size_t t_off = bh * d * tp;
            // Queries t in [s0, end) see at least one key of the block (end: the last key's
            // window). The score rows are indexed by t directly (entries below s0 unused) so
            // lse/D line up without offsets.
            const int n_t = end - s0;
            float* srs[kRows];
            float* prs[kRows];
            for (int r = 0; r < kRows; ++r) srs[r] = sr[r] + s0, prs[r] = pr[r] + s0;
            rows_times_transposed(srs, kr, qt + t_off + s0, tp, n_t, d);  // S[s, t]
            rows_times_transposed(prs, vr, gt + t_off + s0, tp, n_t, d);  // dP[s, t]
            const float* l = lse + bh * seq;
            const float* dt = delta + bh * seq;
            for (int r = 0; r < kRows; ++r) {
              float* sv = sr[r];
              float* pv = pr[r];
              const int first = first_of[r], last = last_of[r];
              for (int t = s0; t < first; ++t) sv[t] = pv[t] = 0.0f;
              softmax_grad_col(sv + first, pv + first, l + first, dt + first, last - first, scale);
              for (int t = last; t < end; ++t) sv[t] = pv[t] = 0.0f;
            }
            const float* q_rows = q + (tok * hq + h) * d;
            const float* g_rows = dout + (tok * hq + h) * d;
            weighted_rows_sum(ak, sr, q_rows, static_cast<size_t>(hq) * d, s0, end, d);
            weighted_rows_sum(av, pr, g_rows, static_cast<size_t>(hq) * d, s0, end, d);
          }
          for (int r = 0; r < rows; ++r) {
            const size_t off = ((tok + s0 + r) * hkv + kvh) * d;
            for (int j = 0; j < d; ++j) {
              dk[off + j] = ak[r][j] * scale;
              dv[off + j] = av[r][j];
            }
          }
        }
      });
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
