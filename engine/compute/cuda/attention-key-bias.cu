// The gradient of the key projection's bias (Qwen2), the formula and the numerics of
// cpu/attention-key-bias.h: db = Σ_i Σ_j dS_ij · R_jᵀ q_i / sqrt(d), a near-total cancellation
// (Σ_j dS_ij = 0) that must stay exact to double rounding.
//
// Per query row i (as the CPU): scores and dP in fp32 (they only perturb the inputs), the softmax
// numerator e_j = exp(s_j − m) in fp32 with m the row's exact max, z = Σ e_j and D = Σ e_j·dP_j / z in
// double, dS_j = e_j / z · (dP_j − D) in double, and the rotation folded into the row sums
// A_f = Σ_j dS_j·cos a_jf, B_f = Σ_j dS_j·sin a_jf in double (cos/sin of the fp32 angle
// float(j)·inv_freq[f] in double, rounded to float: cpu::make_rope_table's table, in the scratch).
// A row's keys are streamed three times, in tiles of 32 staged in shared memory as fp32: for m,
// for z and D, for dS and the sums (the three must see the same e_j for Σ_j dS_j = 0 to hold).
//
// Layout as the attention kernels' generic set (attention-tile.cuh): block (b, h, 32 query rows),
// warp w rows 4w .. 4w + 3, lane l key l of a tile for scores and pair columns f = l + 32·c for
// the sums. Each block writes its d partial sums (double) to the scratch; a second kernel adds them
// per kv head in a fixed order. Deterministic, no atomics. Cost: five fp32 dot products of length d
// and d double FMAs per (query, visible key) pair, on CUDA cores.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "compute/cpu/rope.h"
#include "compute/cuda/attention-tile.cuh"
#include "compute/cuda/attention.cuh"

namespace spillway::cuda {

namespace {

using namespace attn;

constexpr int kMaxHeadDim = 256;
constexpr int kMaxPairs = kMaxHeadDim / 2;

// inv_freq by value: a kernel parameter, read through the constant cache.
struct KeyBiasFreqs {
  float inv[kMaxPairs];
};

// Scratch layout: cos and sin tables [seq, half] (floats), then the partials [b, hq, n_tiles, d]
// (doubles, from a 16-byte aligned offset).
size_t table_floats(int seq, int head_dim) { return (static_cast<size_t>(seq) * head_dim + 3) / 4 * 4; }
size_t partial_count(int batch, int seq, int hq, int head_dim) {
  return static_cast<size_t>(batch) * hq * ceil_div(seq, kGenRows) * head_dim;
}

// ---------------------------------------------------------------------------------------------
// kernels

// cos_t/sin_t[j, f] = cos/sin of float(j)·inv[f] (fp32 product), taken in double, rounded to float.
__global__ void key_bias_rope_table_kernel(float* __restrict__ cos_t, float* __restrict__ sin_t, int seq, int half,
                                           const __grid_constant__ KeyBiasFreqs freqs) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(seq) * half) return;
  const int j = static_cast<int>(idx / half), f = static_cast<int>(idx % half);
  const float angle = __fmul_rn(static_cast<float>(j), freqs.inv[f]);
  double s, c;
  sincos(static_cast<double>(angle), &s, &c);
  cos_t[idx] = static_cast<float>(c);
  sin_t[idx] = static_cast<float>(s);
}

// Block (tile, b, h): partial[b, h, tile, 0..d) = Σ over query rows [32·tile, +32) of head h of
// Σ_j dS_ij R_jᵀ q_i / sqrt(d). FC = pair columns per lane (half <= 32·FC).
template <int FC>
__global__ void __launch_bounds__(kGenThreads, 1)
    attention_key_bias_kernel(double* __restrict__ partial, const bf16* __restrict__ dout,
                              const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                              const float* __restrict__ cos_t, const float* __restrict__ sin_t, int seq, int hq,
                              int hkv, int d, int n_tiles, int bh_count, float scale) {
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
  const int bh = blockIdx.x % bh_count, tile = n_tiles - 1 - static_cast<int>(blockIdx.x / bh_count);
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
  // Query row r of the lane sees key k0 + lane; rows past the sequence contribute nothing.
  auto visible = [&](int k0, int r) { return k0 + lane <= q0 + row0 + r && q0 + row0 + r < seq; };

  // Pass 1: each row's max scaled score (key 0 is visible to every row, so m is finite).
  float m[kGenRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) m[r] = -INFINITY;
  for (int kt = 0; kt <= tile; ++kt) {
    const int k0 = kt * kGenRows;
    __syncthreads();
    stage_rows_f32(sK, ld, k_head + static_cast<size_t>(k0) * kv_stride, kv_stride, min(kGenRows, seq - k0), d);
    __syncthreads();
    float s[kGenRowsPerWarp];
    dot_4rows(s, sQ + row0 * ld, ld, sK + lane * ld, width);
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r) m[r] = fmaxf(m[r], warp_max(visible(k0, r) ? s[r] * scale : -INFINITY));
  }

  // Pass 2: z = Σ e_j and Σ e_j·dP_j in double, per lane, then summed over the warp.
  double z[kGenRowsPerWarp] = {}, pdp[kGenRowsPerWarp] = {};
  for (int kt = 0; kt <= tile; ++kt) {
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
  for (int kt = 0; kt <= tile; ++kt) {
    const int k0 = kt * kGenRows, rows = min(kGenRows, seq - k0);
    __syncthreads();
    stage_rows_f32(sK, ld, k_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    stage_rows_f32(sV, ld, v_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    for (int i = threadIdx.x; i < kGenRows * half; i += blockDim.x) {
      const bool in = i / half < rows;
      const size_t src = static_cast<size_t>(k0) * half + i;
      sCos[i] = in ? static_cast<double>(cos_t[src]) : 0.0;
      sSin[i] = in ? static_cast<double>(sin_t[src]) : 0.0;
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

  // (Σ_j dS_ij R_jᵀ q_i)[f] = q_i[f]·A_f + q_i[f + half]·B_f, [f + half] = q_i[f + half]·A_f − q_i[f]·B_f;
  // the warp sums its rows in order, then the block its warps.
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
    attention_key_bias_reduce_kernel(float* __restrict__ db, const double* __restrict__ partial, int batch, int hq,
                                     int hkv, int d, int n_tiles) {
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

// Calls f(std::integral_constant<int, FC>) with the fewest 32-pair chunks FC covering half.
template <class F>
Status with_pair_chunks(int half, F&& f) {
  if (half <= 32) return f(std::integral_constant<int, 1>{});
  if (half <= 64) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 4>{});
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers

size_t attention_key_bias_scratch_floats(int batch, int seq, int hq, int hkv, int head_dim) {
  return table_floats(seq, head_dim) + 2 * partial_count(batch, seq, hq, head_dim);
}

Status attention_key_bias_backward(float* db, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                   int batch, int seq, int hq, int hkv, int head_dim, float theta,
                                   const compute::RopeScaling& scaling, float* scratch, size_t scratch_floats,
                                   cudaStream_t stream) {
  if (batch < 0 || seq < 0 || hq <= 0 || hkv <= 0 || hq % hkv != 0 || head_dim <= 0 || head_dim % 2 != 0 ||
      head_dim > kMaxHeadDim) {
    return invalid_argument("attention_key_bias_backward: bad shape batch=" + std::to_string(batch) +
                            " seq=" + std::to_string(seq) + " hq=" + std::to_string(hq) +
                            " hkv=" + std::to_string(hkv) + " head_dim=" + std::to_string(head_dim) +
                            " (hq a multiple of hkv, head_dim even and at most " + std::to_string(kMaxHeadDim) +
                            ")");
  }
  if (batch == 0 || seq == 0) return Status::ok_status();
  SPW_ASSIGN_OR_RETURN(const std::vector<float> inv_freq, compute::cpu::rope_inv_freq(head_dim, theta, scaling));
  const size_t need = attention_key_bias_scratch_floats(batch, seq, hq, hkv, head_dim);
  if (scratch_floats < need || reinterpret_cast<uintptr_t>(scratch) % 16 != 0) {
    return invalid_argument("attention_key_bias_backward: scratch of " + std::to_string(scratch_floats) +
                            " floats, needs " + std::to_string(need) + ", 16-byte aligned");
  }
  const int half = head_dim / 2, d = head_dim;
  KeyBiasFreqs freqs{};
  for (int f = 0; f < half; ++f) freqs.inv[f] = inv_freq[f];
  float* cos_t = scratch;                  // [seq, half]
  float* sin_t = scratch + static_cast<size_t>(seq) * half;  // [seq, half]
  double* partial = reinterpret_cast<double*>(scratch + table_floats(seq, d));  // [b, hq, n_tiles, d]

  constexpr int kTableThreads = 256;
  key_bias_rope_table_kernel<<<ceil_div(static_cast<size_t>(seq) * half, kTableThreads), kTableThreads, 0,
                               stream>>>(cos_t, sin_t, seq, half, freqs);
  SPW_RETURN_IF_ERROR(CUDA_LAUNCH_CHECK("key_bias_rope_table_kernel"));

  const int n_tiles = static_cast<int>(ceil_div(seq, kGenRows)), bh_count = batch * hq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t smem = sizeof(double) * (2 * kGenRows * half + kGenRows * (kGenRows + 1) + kGenWarps * d) +
                      sizeof(float) * 4 * kGenRows * generic_ld(d);
  SPW_RETURN_IF_ERROR(with_pair_chunks(half, [&](auto fc) -> Status {
    const auto kernel = attention_key_bias_kernel<decltype(fc)::value>;
    SPW_RETURN_IF_ERROR(allow_smem(kernel, smem));
    kernel<<<n_tiles * bh_count, kGenThreads, smem, stream>>>(partial, dout, q, k, v, cos_t, sin_t, seq, hq, hkv, d,
                                                                n_tiles, bh_count, scale);
    return CUDA_LAUNCH_CHECK("attention_key_bias_kernel");
  }));

  attention_key_bias_reduce_kernel<<<dim3(ceil_div(d, 32), hkv), 256, 0, stream>>>(db, partial, batch, hq, hkv, d,
                                                                                   n_tiles);
  return CUDA_LAUNCH_CHECK("attention_key_bias_reduce_kernel");
}

}  // namespace spillway::cuda
