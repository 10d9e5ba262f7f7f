// The gradient of the key projection's bias (Qwen2), the formula and the numerics of
// cpu/attention-key-bias.h: db = Σ_i Σ_j dS_ij · R_jᵀ q_i / sqrt(d), a near-total cancellation
// (Σ_j dS_ij = 0) that must stay exact to double rounding.
//
// Per query row i (as the CPU): scores and dP in fp32 (they only perturb the inputs), the softmax
// numerator e_j = exp(s_j − m) in fp32 with m the row's exact max, z = Σ e_j and D = Σ e_j·dP_j / z
// in double, dS_j = e_j / z · (dP_j − D) in double, and the rotation folded into the row sums A_f =
// Σ_j dS_j·cos a_jf, B_f = Σ_j dS_j·sin a_jf in double (cos/sin of the fp32 angle
// float(j)·inv_freq[f] in double, rounded to float: cpu::make_rope_table's values, in the scratch
// as double). A row's keys are streamed three times: for m, for z and D, for dS and the sums (the
// three must see the same e_j for Σ_j dS_j = 0 to hold).
//
// Two kernels, both writing d partial sums (double) per (b, h, query tile) to the scratch, which a
// third adds per kv head in a fixed order (deterministic, no atomics):
//   - generic (any even head_dim up to 256): fp32 CUDA-core tiles as the attention kernels' generic
//     set (attention-tile.cuh), 32 query rows per block. Per (query, visible key) pair: five fp32
//     dot products of length d and d double FMAs.
//   - flash (head_dim 64, 128): 64 query rows per block of 8 warps, scores and dP on tensor cores
//     (bf16 mma.sync, fp32 sums), dS staged in shared memory; per pair what remains is the d
//     double FMAs of the sums, which bound it (FP64 units: ~2 SM cycles per pair at d = 128).
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "compute/cpu/rope.h"
#include "compute/cuda/attention-path.cuh"
#include "compute/cuda/attention-tile.cuh"
#include "compute/cuda/attention.cuh"

namespace spillway::cuda {

namespace {

using namespace attn;

constexpr int kMaxHeadDim = 256;
constexpr int kMaxPairs = kMaxHeadDim / 2;
constexpr int kKbFlashThreads = 256;  // the flash kernel: 8 warps over 64 query rows

// inv_freq by value: a kernel parameter, read through the constant cache.
struct KeyBiasFreqs {
  float inv[kMaxPairs];
};

// Scratch layout (doubles): the cos and sin tables [seq, half] each, then the partials
// [b, hq, tiles, d] (tiles of 32 rows for the generic kernel, of 64 for the flash one).
size_t table_count(int seq, int head_dim) {
  return static_cast<size_t>(seq) * head_dim;
}

// ---------------------------------------------------------------------------------------------
// kernels

// cos_t/sin_t[j, f] = cos/sin of float(j)·inv[f] (fp32 product), taken in double, rounded to float
// (the values of cpu::make_rope_table), stored as double for the sums.
__global__ void key_bias_rope_table_kernel(double* __restrict__ cos_t, double* __restrict__ sin_t,
                                           int seq, int half, float scale,
                                           const __grid_constant__ KeyBiasFreqs freqs) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(seq) * half) return;
  const int j = static_cast<int>(idx / half), f = static_cast<int>(idx % half);
  const float angle = __fmul_rn(static_cast<float>(j), freqs.inv[f]);
  double s, c;
  sincos(static_cast<double>(angle), &s, &c);
  // rounded to float and scaled by the attention factor in fp32 (the CPU table), kept as double
  cos_t[idx] = __fmul_rn(static_cast<float>(c), scale);
  sin_t[idx] = __fmul_rn(static_cast<float>(s), scale);
}

// Block (tile, b, h): partial[b, h, tile, 0..d) = Σ over query rows [32·tile, +32) of head h of
// Σ_j dS_ij R_jᵀ q_i / sqrt(d). FC = pair columns per lane (half <= 32·FC).
template <int FC>
__global__ void __launch_bounds__(kGenThreads, 1)
    attention_key_bias_kernel(double* __restrict__ partial, const bf16* __restrict__ dout,
                              const bf16* __restrict__ q, const bf16* __restrict__ k,
                              const bf16* __restrict__ v, const double* __restrict__ cos_t,
                              const double* __restrict__ sin_t, int seq, int hq, int hkv, int d,
                              int n_tiles, int bh_count, float scale, KeyRange keys) {
  extern __shared__ double2 smem_d2[];
  const int half = d / 2, ld = generic_ld(d), width = ld - 4;
  double* sCos = reinterpret_cast<double*>(smem_d2);  // [32, half] the key tile's table rows
  double* sSin = sCos + kGenRows * half;              // [32, half]
  double* sDs = sSin + kGenRows * half;               // [32 rows, 33] dS of the tile (padded row)
  double* sOut = sDs + kGenRows * (kGenRows + 1);     // [8 warps, d] the warps' sums
  float* sQ = reinterpret_cast<float*>(sOut + kGenWarps * d);  // [32, ld] each
  float* sdO = sQ + kGenRows * ld;
  float* sK = sdO + kGenRows * ld;
  float* sV = sK + kGenRows * ld;
  const int bh = blockIdx.x % bh_count,
            tile = n_tiles - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
  const int q0 = tile * kGenRows;
  const size_t q_stride = static_cast<size_t>(hq) * d, kv_stride = static_cast<size_t>(hkv) * d;
  const size_t q_off = (static_cast<size_t>(b) * seq + q0) * q_stride + static_cast<size_t>(h) * d;
  const bf16* k_head = k + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * d;
  const bf16* v_head = v + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * d;
  const int q_rows = min(kGenRows, seq - q0);
  stage_rows_f32(sQ, ld, q + q_off, q_stride, q_rows, d);
  stage_rows_f32(sdO, ld, dout + q_off, q_stride, q_rows, d);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * kGenRowsPerWarp;
  int first[kGenRowsPerWarp];  // each row's first key (its example's first token)
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) first[r] = keys.first(b, q0 + row0 + r);
  // Query row r of the lane sees key k0 + lane; rows past the sequence contribute nothing.
  auto visible = [&](int k0, int r) {
    const int t = q0 + row0 + r, key = k0 + lane;
    return key <= t && key >= first[r] && t < seq;
  };
  const int kt_lo = max(0, keys.first(b, q0)) / kGenRows;  // the first key tile any row sees

  // Pass 1: each row's max scaled score (every row sees its own key, so m is finite).
  float m[kGenRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) m[r] = -INFINITY;
  for (int kt = kt_lo; kt <= tile; ++kt) {
    const int k0 = kt * kGenRows;
    __syncthreads();
    stage_rows_f32(sK, ld, k_head + static_cast<size_t>(k0) * kv_stride, kv_stride,
                   min(kGenRows, seq - k0), d);
    __syncthreads();
    float s[kGenRowsPerWarp];
    dot_4rows(s, sQ + row0 * ld, ld, sK + lane * ld, width);
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r)
      m[r] = fmaxf(m[r], warp_max(visible(k0, r) ? s[r] * scale : -INFINITY));
  }

  // Pass 2: z = Σ e_j and Σ e_j·dP_j in double, per lane, then summed over the warp.
  double z[kGenRowsPerWarp] = {}, pdp[kGenRowsPerWarp] = {};
  for (int kt = kt_lo; kt <= tile; ++kt) {
    const int k0 = kt * kGenRows, rows = min(kGenRows, seq - k0);
    __syncthreads();
    stage_rows_f32(sK, ld, k_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    stage_rows_f32(sV, ld, v_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    __syncthreads();
    float s[kGenRowsPerWarp], dp[kGenRowsPerWarp];
    dot_4rows(s, sQ + row0 * ld, ld, sK + lane * ld, width);
    dot_4rows(dp, sdO + row0 * ld, ld, sV + lane * ld, width);
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r) {
      if (!visible(k0, r)) continue;
      const float e = expf(s[r] * scale - m[r]);
      z[r] += e;
      pdp[r] += static_cast<double>(e) * dp[r];
    }
  }
  double inv_z[kGenRowsPerWarp], delta[kGenRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    const double zr = warp_sum_d(z[r]);
    delta[r] = warp_sum_d(pdp[r]) / zr;
    inv_z[r] = 1.0 / zr;
  }

  // Pass 3: dS in double, and the rotated row sums A, B over pairs f = lane + 32·c.
  double A[kGenRowsPerWarp][FC] = {}, B[kGenRowsPerWarp][FC] = {};
  for (int kt = kt_lo; kt <= tile; ++kt) {
    const int k0 = kt * kGenRows, rows = min(kGenRows, seq - k0);
    __syncthreads();
    stage_rows_f32(sK, ld, k_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    stage_rows_f32(sV, ld, v_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    for (int i = threadIdx.x; i < kGenRows * half; i += blockDim.x) {
      const bool in = i / half < rows;
      // The table row of key k0 + i / half: its position.
      const size_t src =
          in ? static_cast<size_t>(keys.position(b, k0 + i / half)) * half + i % half : 0;
      sCos[i] = in ? cos_t[src] : 0.0;
      sSin[i] = in ? sin_t[src] : 0.0;
    }
    __syncthreads();
    float s[kGenRowsPerWarp], dp[kGenRowsPerWarp];
    dot_4rows(s, sQ + row0 * ld, ld, sK + lane * ld, width);
    dot_4rows(dp, sdO + row0 * ld, ld, sV + lane * ld, width);
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r) {
      double ds = 0.0;
      if (visible(k0, r)) {
        const float e = expf(s[r] * scale - m[r]);
        ds = static_cast<double>(e) * inv_z[r] * (static_cast<double>(dp[r]) - delta[r]);
      }
      sDs[(row0 + r) * (kGenRows + 1) + lane] = ds;  // the warp's own rows
    }
    __syncwarp();
    for (int j = 0; j < kGenRows; ++j) {
      double dsj[kGenRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kGenRowsPerWarp; ++r) dsj[r] = sDs[(row0 + r) * (kGenRows + 1) + j];
#pragma unroll
      for (int c = 0; c < FC; ++c) {
        const int f = lane + 32 * c;
        if (f < half) {
          const double cj = sCos[j * half + f], sj = sSin[j * half + f];
#pragma unroll
          for (int r = 0; r < kGenRowsPerWarp; ++r) {
            A[r][c] = fma(dsj[r], cj, A[r][c]);
            B[r][c] = fma(dsj[r], sj, B[r][c]);
          }
        }
      }
    }
  }

  // (Σ_j dS_ij R_jᵀ q_i)[f] = q_i[f]·A_f + q_i[f + half]·B_f, [f + half] = q_i[f + half]·A_f −
  // q_i[f]·B_f; the warp sums its rows in order, then the block its warps.
#pragma unroll
  for (int c = 0; c < FC; ++c) {
    const int f = lane + 32 * c;
    if (f >= half) continue;
    double lo = 0.0, hi = 0.0;
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r) {
      const double q_lo = sQ[(row0 + r) * ld + f], q_hi = sQ[(row0 + r) * ld + f + half];
      lo += scale * (q_lo * A[r][c] + q_hi * B[r][c]);
      hi += scale * (q_hi * A[r][c] - q_lo * B[r][c]);
    }
    sOut[warp * d + f] = lo;
    sOut[warp * d + f + half] = hi;
  }
  __syncthreads();
  double* out = partial + (static_cast<size_t>(bh) * n_tiles + tile) * d;
  for (int e = threadIdx.x; e < d; e += blockDim.x) {
    double sum = 0.0;
    for (int w = 0; w < kGenWarps; ++w) sum += sOut[w * d + e];
    out[e] = sum;
  }
}

// db[g, e] += Σ over b, the group's query heads and the tiles of partial[b, h, tile, e], in a fixed
// order: slot s of 8 takes every 8th term, then the slots add up in order. Block (32 columns, g).
__global__ void __launch_bounds__(256)
    attention_key_bias_reduce_kernel(float* __restrict__ db, const double* __restrict__ partial,
                                     int batch, int hq, int hkv, int d, int n_tiles) {
  constexpr int kSlots = 8;
  __shared__ double sums[kSlots][32];
  const int g = blockIdx.y, col = threadIdx.x % 32, slot = threadIdx.x / 32;
  const int e = blockIdx.x * 32 + col;
  const int group = hq / hkv, per_batch = group * n_tiles;  // (head of the group, tile) terms
  const size_t count = static_cast<size_t>(batch) * per_batch;
  double acc = 0.0;
  if (e < d) {
    for (size_t i = slot; i < count; i += kSlots) {
      const size_t bb = i / per_batch, rest = i % per_batch;  // rest = hh·n_tiles + tile
      acc += partial[((bb * hq + static_cast<size_t>(g) * group) * n_tiles + rest) * d + e];
    }
  }
  sums[slot][col] = acc;
  __syncthreads();
  if (slot == 0 && e < d) {
    double total = 0.0;
    for (int s = 0; s < kSlots; ++s) total += sums[s][col];
    db[static_cast<size_t>(g) * d + e] += static_cast<float>(total);
  }
}

// Block (tile, b, h), head_dim D = 64 or 128: partial[b, h, tile, 0..D) for query rows
// [64·tile, +64), the same sums as attention_key_bias_kernel with the scores and dP on tensor cores
// (bf16 products are exact, fp32 sums). Warp w computes rows 16·(w % 4) .. +16 against keys
// 32·(w / 4) .. +32 of each 64-key tile; the two warps of a row slab combine their row statistics
// through shared memory. In pass 3 the tile's dS go to shared memory (double) and thread t sums
// pair column f = t % (D/2) over rows of group t / (D/2), reading the table from global memory
// (L1/L2-resident); the next K/V tile loads meanwhile.
template <int D>
__global__ void __launch_bounds__(kKbFlashThreads, 2)
    attention_key_bias_flash_kernel(double* __restrict__ partial, const bf16* __restrict__ dout,
                                    const bf16* __restrict__ q, const bf16* __restrict__ k,
                                    const bf16* __restrict__ v, const double* __restrict__ cos_t,
                                    const double* __restrict__ sin_t, int seq, int hq, int hkv,
                                    int n_tiles, int bh_count, float scale, KeyRange keys) {
  constexpr int kHalf = D / 2;
  constexpr int kGroups = kKbFlashThreads / kHalf;  // row groups sharing a pair column
  constexpr int kRows = kFlashTile / kGroups;       // rows per thread in the sums
  constexpr int kDsLd = kFlashTile + 2;  // doubles per key row of sDs (even: 16-byte rows)
  extern __shared__ uint4 smem_u4[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_u4);  // [64, D + 8] each
  bf16* sdO = sQ + kFlashTileElems<D>;
  bf16* sK = sdO + kFlashTileElems<D>;
  bf16* sV = sK + kFlashTileElems<D>;
  double* sDs =
      reinterpret_cast<double*>(sV + kFlashTileElems<D>);  // [64 keys, kDsLd] dS of the tile
  double* sStat = sDs + kFlashTile * kDsLd;                // [2 key halves, 64 rows] × 2
  float* sMax = reinterpret_cast<float*>(sStat + 2 * 2 * kFlashTile);  // [2 key halves, 64 rows]
  const int bh = blockIdx.x % bh_count,
            tile = n_tiles - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
  const int q0 = tile * kFlashTile;
  const size_t q_stride = static_cast<size_t>(hq) * D, kv_stride = static_cast<size_t>(hkv) * D;
  const size_t q_off = (static_cast<size_t>(b) * seq + q0) * q_stride + static_cast<size_t>(h) * D;
  const bf16* k_head = k + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
  const bf16* v_head = v + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
  flash_load_tile<D, kKbFlashThreads>(sQ, q + q_off, q_stride, min(kFlashTile, seq - q0));
  flash_load_tile<D, kKbFlashThreads>(sdO, dout + q_off, q_stride, min(kFlashTile, seq - q0));
  cp_async_commit();
  auto load_keys = [&](int kt, bool with_v) {
    const int k0 = kt * kFlashTile, rows = min(kFlashTile, seq - k0);
    flash_load_tile<D, kKbFlashThreads>(sK, k_head + static_cast<size_t>(k0) * kv_stride, kv_stride,
                                        rows);
    if (with_v)
      flash_load_tile<D, kKbFlashThreads>(sV, v_head + static_cast<size_t>(k0) * kv_stride,
                                          kv_stride, rows);
    cp_async_commit();
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int slab = warp % 4, kh = warp / 4;  // rows 16·slab .., keys 32·kh .. of a tile
  const uint32_t q_addr = smem_u32(sQ + slab * 16 * (D + 8)) + lane_off_a<D>(lane);
  const uint32_t do_addr = smem_u32(sdO + slab * 16 * (D + 8)) + lane_off_a<D>(lane);
  const uint32_t k_addr = smem_u32(sK + kh * 32 * (D + 8)) + lane_off_b<D>(lane);
  const uint32_t v_addr = smem_u32(sV + kh * 32 * (D + 8)) + lane_off_b<D>(lane);
  const int row_l = slab * 16 + g;  // the lane's rows in the tile: row_l and row_l + 8
  const int first[2] = {keys.first(b, q0 + row_l), keys.first(b, q0 + row_l + 8)};
  // Whether the lane's accumulator element (nb, e) of key tile k0 is a visible (query, key) pair.
  auto visible = [&](int k0, int nb, int e) {
    const int t = q0 + row_l + 8 * (e >> 1), key = k0 + kh * 32 + nb * 8 + 2 * c + (e & 1);
    return key <= t && key >= first[e >> 1] && t < seq;
  };
  const int kt_lo = max(0, keys.first(b, q0)) / kFlashTile;  // the first key tile any row sees

  // Pass 1: the rows' max scaled scores (every row in range sees its own key).
  float m[2] = {-INFINITY, -INFINITY};
  for (int kt = kt_lo; kt <= tile; ++kt) {
    if (kt > kt_lo) __syncthreads();  // every warp is done with the previous K tile
    load_keys(kt, false);
    cp_async_wait<0>();
    __syncthreads();
    float s[4][4] = {};
    mma_abt<D, 32>(s, q_addr, k_addr);
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (visible(kt * kFlashTile, nb, e)) m[e >> 1] = fmaxf(m[e >> 1], s[nb][e] * scale);
      }
    }
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    m[hr] = fmaxf(m[hr], __shfl_xor_sync(0xffffffffu, m[hr], 1));
    m[hr] = fmaxf(m[hr], __shfl_xor_sync(0xffffffffu, m[hr], 2));
    if (c == 0) sMax[kh * kFlashTile + row_l + 8 * hr] = m[hr];
  }
  __syncthreads();
#pragma unroll
  for (int hr = 0; hr < 2; ++hr)
    m[hr] = fmaxf(sMax[row_l + 8 * hr], sMax[kFlashTile + row_l + 8 * hr]);

  // Pass 2: z = Σ e_j and Σ e_j·dP_j in double: per lane, then over the quad, then the key halves.
  double z[2] = {}, pdp[2] = {};
  for (int kt = kt_lo; kt <= tile; ++kt) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_keys(kt, true);
    cp_async_wait<0>();
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {};
    mma_abt<D, 32>(s, q_addr, k_addr);
    mma_abt<D, 32>(dp, do_addr, v_addr);
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (!visible(kt * kFlashTile, nb, e)) continue;
        const float ev = expf(s[nb][e] * scale - m[e >> 1]);
        z[e >> 1] += ev;
        pdp[e >> 1] += static_cast<double>(ev) * dp[nb][e];
      }
    }
  }
  double* sZ = sStat;                     // [2 key halves, 64 rows]
  double* sPdp = sStat + 2 * kFlashTile;  // [2 key halves, 64 rows]
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    for (int x = 1; x <= 2; x <<= 1) {
      z[hr] += __shfl_xor_sync(0xffffffffu, z[hr], x);
      pdp[hr] += __shfl_xor_sync(0xffffffffu, pdp[hr], x);
    }
    if (c == 0) {
      sZ[kh * kFlashTile + row_l + 8 * hr] = z[hr];
      sPdp[kh * kFlashTile + row_l + 8 * hr] = pdp[hr];
    }
  }
  __syncthreads();
  double inv_z[2], delta[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = row_l + 8 * hr;
    const double zr = sZ[r] + sZ[kFlashTile + r];
    delta[hr] = (sPdp[r] + sPdp[kFlashTile + r]) / zr;
    inv_z[hr] = 1.0 / zr;
  }

  // Pass 3: dS in double, then A_f, B_f over the tile's keys for this thread's rows and pair f.
  const int f = threadIdx.x % kHalf, group = threadIdx.x / kHalf;
  double A[kRows] = {}, B[kRows] = {};
  __syncthreads();  // every warp is done with the last K/V tile of pass 2
  load_keys(kt_lo, true);
  for (int kt = kt_lo; kt <= tile; ++kt) {
    const int k0 = kt * kFlashTile;
    cp_async_wait<0>();
    __syncthreads();  // K/V(kt) landed; every thread is done with sDs of the previous tile
#pragma unroll
    for (int sub = 0; sub < 32; sub += 16) {  // 16 keys at a time: fewer registers next to A, B
      const uint32_t rows = sub * (D + 8) * 2;
      float s[2][4] = {}, dp[2][4] = {};
      mma_abt<D, 16>(s, q_addr, k_addr + rows);
      mma_abt<D, 16>(dp, do_addr, v_addr + rows);
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int hr = e >> 1;
          double ds = 0.0;
          if (visible(k0 + sub, nb, e)) {
            const float ev = expf(s[nb][e] * scale - m[hr]);
            ds = static_cast<double>(ev) * inv_z[hr] * (static_cast<double>(dp[nb][e]) - delta[hr]);
          }
          sDs[(kh * 32 + sub + nb * 8 + 2 * c + (e & 1)) * kDsLd + row_l + 8 * hr] = ds;
        }
      }
    }
    __syncthreads();  // sDs complete; every warp is done with sK/sV
    if (kt < tile) load_keys(kt + 1, true);
    // Key k0 + j's table row is its position.
    auto row = [&](int j) { return static_cast<size_t>(keys.position(b, k0 + j)) * kHalf + f; };
    const int n_keys = min(kFlashTile, seq - k0);
    double cj = cos_t[row(0)], sj = sin_t[row(0)];  // one key ahead: the table comes from L1/L2
#pragma unroll 1
    for (int j = 0; j < n_keys; ++j) {
      const size_t next = row(min(j + 1, n_keys - 1));
      const double cn = cos_t[next], sn = sin_t[next];
      const double2* ds2 = reinterpret_cast<const double2*>(sDs + j * kDsLd + group * kRows);
#pragma unroll
      for (int r = 0; r < kRows / 2; ++r) {
        const double2 ds = ds2[r];
        A[2 * r] = fma(ds.x, cj, A[2 * r]);
        B[2 * r] = fma(ds.x, sj, B[2 * r]);
        A[2 * r + 1] = fma(ds.y, cj, A[2 * r + 1]);
        B[2 * r + 1] = fma(ds.y, sj, B[2 * r + 1]);
      }
      cj = cn;
      sj = sn;
    }
  }

  // (Σ_j dS_ij R_jᵀ q_i)[f] = q_i[f]·A_f + q_i[f + half]·B_f, [f + half] = q_i[f + half]·A_f −
  // q_i[f]·B_f; each thread sums its rows in order, then the groups add up in order (sDs reused).
  double lo = 0.0, hi = 0.0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const bf16* q_row = sQ + (group * kRows + r) * (D + 8);
    const double q_lo = __bfloat162float(q_row[f]), q_hi = __bfloat162float(q_row[f + kHalf]);
    lo += scale * (q_lo * A[r] + q_hi * B[r]);
    hi += scale * (q_hi * A[r] - q_lo * B[r]);
  }
  __syncthreads();     // every thread is done with sDs
  double* sOut = sDs;  // [kGroups, D]
  sOut[group * D + f] = lo;
  sOut[group * D + f + kHalf] = hi;
  __syncthreads();
  double* out = partial + (static_cast<size_t>(bh) * n_tiles + tile) * D;
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    double sum = 0.0;
    for (int gr = 0; gr < kGroups; ++gr) sum += sOut[gr * D + e];
    out[e] = sum;
  }
}

// Calls f(std::integral_constant<int, FC>) with the fewest 32-pair chunks FC covering half.
template <class F>
Status with_pair_chunks(int half, F&& f) {
  if (half <= 32) return f(std::integral_constant<int, 1>{});
  if (half <= 64) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 4>{});
}

Status key_bias_generic(double* partial, const bf16* dout, const bf16* q, const bf16* k,
                        const bf16* v, const double* cos_t, const double* sin_t, int batch, int seq,
                        int hq, int hkv, int d, int n_tiles, KeyRange keys, cudaStream_t stream) {
  const int half = d / 2, bh_count = batch * hq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t smem =
      sizeof(double) * (2 * kGenRows * half + kGenRows * (kGenRows + 1) + kGenWarps * d) +
      sizeof(float) * 4 * kGenRows * generic_ld(d);
  return with_pair_chunks(half, [&](auto fc) -> Status {
    const auto kernel = attention_key_bias_kernel<decltype(fc)::value>;
    SPW_RETURN_IF_ERROR(allow_smem(kernel, smem));
    kernel<<<n_tiles * bh_count, kGenThreads, smem, stream>>>(
        partial, dout, q, k, v, cos_t, sin_t, seq, hq, hkv, d, n_tiles, bh_count, scale, keys);
    return CUDA_LAUNCH_CHECK("attention_key_bias_kernel");
  });
}

template <int D>
Status key_bias_flash(double* partial, const bf16* dout, const bf16* q, const bf16* k,
                      const bf16* v, const double* cos_t, const double* sin_t, int batch, int seq,
                      int hq, int hkv, int n_tiles, KeyRange keys, cudaStream_t stream) {
  const int bh_count = batch * hq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const size_t smem = 4 * sizeof(bf16) * kFlashTileElems<D> +
                      sizeof(double) * (kFlashTile * (kFlashTile + 2) + 4 * kFlashTile) +
                      sizeof(float) * 2 * kFlashTile;
  const auto kernel = attention_key_bias_flash_kernel<D>;
  SPW_RETURN_IF_ERROR(allow_smem(kernel, smem));
  kernel<<<n_tiles * bh_count, kKbFlashThreads, smem, stream>>>(
      partial, dout, q, k, v, cos_t, sin_t, seq, hq, hkv, n_tiles, bh_count, scale, keys);
  return CUDA_LAUNCH_CHECK("attention_key_bias_flash_kernel");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers

static_assert(kKeyBiasTileRows == kGenRows, "cuda-workspace.h's tile rows are the kernels'");

Status attention_key_bias_backward_path(AttentionPath path, float* db, const bf16* dout,
                                        const bf16* q, const bf16* k, const bf16* v, int batch,
                                        int seq, int hq, int hkv, int head_dim, float theta,
                                        const compute::RopeScaling& scaling,
                                        const int32_t* positions, float* scratch,
                                        size_t scratch_floats, cudaStream_t stream) {
  if (batch < 0 || seq < 0 || hq <= 0 || hkv <= 0 || hq % hkv != 0 || head_dim <= 0 ||
      head_dim % 2 != 0 || head_dim > kMaxHeadDim) {
    return invalid_argument(
        "attention_key_bias_backward: bad shape batch=" + std::to_string(batch) +
        " seq=" + std::to_string(seq) + " hq=" + std::to_string(hq) +
        " hkv=" + std::to_string(hkv) + " head_dim=" + std::to_string(head_dim) +
        " (hq a multiple of hkv, head_dim even and at most " + std::to_string(kMaxHeadDim) + ")");
  }
  const bool flash_applies = (head_dim == 64 || head_dim == 128) &&
                             (reinterpret_cast<uintptr_t>(dout) | reinterpret_cast<uintptr_t>(q) |
                              reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) %
                                     16 ==
                                 0;
  if (path == AttentionPath::kFlash && !flash_applies) {
    return invalid_argument(
        "attention_key_bias_backward: the flash kernel needs head_dim 64 or 128 and 16-byte "
        "aligned tensors, got head_dim " +
        std::to_string(head_dim));
  }
  if (compute::cpu::rope_rotary_dim(head_dim, scaling) != head_dim) {
    return unsupported(
        "attention_key_bias_backward: a key bias with partial rotation (rotary_dim " +
        std::to_string(scaling.rotary_dim) + " of head_dim " + std::to_string(head_dim) +
        ") is not supported");
  }
  if (batch == 0 || seq == 0) return Status::ok_status();
  SPW_ASSIGN_OR_RETURN(const std::vector<float> inv_freq,
                       compute::cpu::rope_inv_freq(head_dim, theta, scaling));
  const size_t need = attention_key_bias_scratch_floats(batch, seq, hq, hkv, head_dim);
  if (scratch_floats < need || reinterpret_cast<uintptr_t>(scratch) % 16 != 0) {
    return invalid_argument("attention_key_bias_backward: scratch of " +
                            std::to_string(scratch_floats) + " floats, needs " +
                            std::to_string(need) + ", 16-byte aligned");
  }
  const int half = head_dim / 2, d = head_dim;
  KeyBiasFreqs freqs{};
  for (int f = 0; f < half; ++f) freqs.inv[f] = inv_freq[f];
  double* cos_t = reinterpret_cast<double*>(scratch);       // [seq, half]
  double* sin_t = cos_t + static_cast<size_t>(seq) * half;  // [seq, half]
  double* partial = cos_t + table_count(seq, d);            // [b, hq, tiles, d]

  constexpr int kTableThreads = 256;
  key_bias_rope_table_kernel<<<ceil_div(static_cast<size_t>(seq) * half, kTableThreads),
                               kTableThreads, 0, stream>>>(cos_t, sin_t, seq, half,
                                                           scaling.attention_factor, freqs);
  SPW_RETURN_IF_ERROR(CUDA_LAUNCH_CHECK("key_bias_rope_table_kernel"));

  const bool flash = path != AttentionPath::kGeneric && flash_applies;
  const KeyRange keys{seq, seq, positions};  // causal, no window: the formula has none
  const int n_tiles = static_cast<int>(ceil_div(seq, flash ? kFlashTile : kGenRows));
  if (!flash) {
    SPW_RETURN_IF_ERROR(key_bias_generic(partial, dout, q, k, v, cos_t, sin_t, batch, seq, hq, hkv,
                                         d, n_tiles, keys, stream));
  } else if (d == 64) {
    SPW_RETURN_IF_ERROR(key_bias_flash<64>(partial, dout, q, k, v, cos_t, sin_t, batch, seq, hq,
                                           hkv, n_tiles, keys, stream));
  } else {
    SPW_RETURN_IF_ERROR(key_bias_flash<128>(partial, dout, q, k, v, cos_t, sin_t, batch, seq, hq,
                                            hkv, n_tiles, keys, stream));
  }
  attention_key_bias_reduce_kernel<<<dim3(ceil_div(d, 32), hkv), 256, 0, stream>>>(
      db, partial, batch, hq, hkv, d, n_tiles);
  return CUDA_LAUNCH_CHECK("attention_key_bias_reduce_kernel");
}

Status attention_key_bias_backward(float* db, const bf16* dout, const bf16* q, const bf16* k,
                                   const bf16* v, int batch, int seq, int hq, int hkv, int head_dim,
                                   float theta, const compute::RopeScaling& scaling,
                                   const int32_t* positions, float* scratch, size_t scratch_floats,
                                   cudaStream_t stream) {
  return attention_key_bias_backward_path(AttentionPath::kAuto, db, dout, q, k, v, batch, seq, hq,
                                          hkv, head_dim, theta, scaling, positions, scratch,
                                          scratch_floats, stream);
}

}  // namespace spillway::cuda
