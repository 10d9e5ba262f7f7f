// Causal GQA attention, forward and backward (math: cpu/attention.h; launchers: attention.cuh).
//
// Sliding window and packed rows: every kernel takes a KeyRange (attention-tile.cuh): query t sees
// key s when first(t) <= s <= t, first(t) being the window's edge or the first token of t's
// example. Tiles wholly outside are skipped (a query tile's key loop starts at the tile holding its
// first row's first key; a key tile's query loop ends at the last tile whose first query still
// sees the tile's last key), and the mask is applied inside the tiles an edge cuts. The scale is
// the caller's (AttentionParams).
//
// Two kernel sets (attention-path.cuh picks one; the public launchers take the flash set where it
// applies):
//   - generic: fp32 on CUDA cores, any head_dim up to 256. A block of 8 warps owns a tile of 32
//     rows; warp w owns 4 rows and lane l one column of each 32 × 32 score tile, K/V (or Q/dO)
//     tiles are staged in shared memory as fp32, softmax is online (running max and sum, as
//     FlashAttention).
//   - flash: head_dim 64, 96 (Phi-3), 128 (the 7B models) or 256 (Gemma 3), FlashAttention-2 on
//     tensor cores. 4 warps × 16 rows = 64 rows per block, tiles of 64 × 64, bf16 mma.sync with
//     fp32 accumulators, K/V (or Q/dO) tiles through cp.async into padded shared memory (row
//     stride head_dim + 8 bf16: the 8 rows an ldmatrix reads fall in 8 different 16-byte bank
//     groups), scores prescaled by log2(e)/sqrt(d) for exp2. Tiles past the sequence are
//     zero-filled, so any seq works.
// Both backwards are deterministic without atomics: D = rowsum(dO ∘ O) goes to the scratch first,
// then one kernel owns dK/dV per key tile (looping over the group's query heads and the query tiles
// at or after it) and another owns dQ per query tile (looping over key tiles up to it).
// Blocks are numbered so that the longest tiles (most keys or queries under the causal mask) start
// first.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "compute/cuda/attention-path.cuh"
#include "compute/cuda/attention-tile.cuh"
#include "compute/cuda/attention.cuh"

namespace spillway::cuda {

namespace {

using namespace attn;

constexpr int kMaxHeadDim = 256;

// ---------------------------------------------------------------------------------------------
// kernels: shared

// delta[b, h, t] = Σ_j dout[b, t, h, j] · out[b, t, h, j]; one warp per (b, t, h) row.
__global__ void attention_delta_kernel(float* __restrict__ delta, const bf16* __restrict__ dout,
                                       const bf16* __restrict__ out, size_t rows, int seq, int hq,
                                       int d) {
  const size_t row =
      static_cast<size_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;  // (b·seq + t)·hq + h
  if (row >= rows) return;                                                     // whole warps
  const int lane = threadIdx.x % 32;
  const bf16* g = dout + row * d;
  const bf16* o = out + row * d;
  float s = 0.0f;
  for (int j = lane; j < d; j += 32) s = fmaf(__bfloat162float(g[j]), __bfloat162float(o[j]), s);
  s = warp_sum_f(s);
  if (lane == 0) {
    const size_t h = row % hq, bt = row / hq, t = bt % seq, b = bt / seq;
    delta[(b * hq + h) * seq + t] = s;
  }
}

// ---------------------------------------------------------------------------------------------
// kernels: generic (fp32, head_dim <= 32·NC)

// Block (tile, b, h): query rows [32·tile, +32) of head h. Lane l of warp w: rows 4w .. 4w + 3,
// key l of each key tile and output columns l + 32·c.
template <int NC>
__global__ void __launch_bounds__(kGenThreads, 1)
    attention_forward_generic_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                                     const bf16* __restrict__ q, const bf16* __restrict__ k,
                                     const bf16* __restrict__ v, int seq, int hq, int hkv, int d,
                                     int n_tiles, int bh_count, float scale, KeyRange keys) {
  extern __shared__ float4 smem_f4[];
  const int ld = generic_ld(d), width = ld - 4;
  float* sQ = reinterpret_cast<float*>(smem_f4);  // [32, ld] each
  float* sK = sQ + kGenRows * ld;
  float* sV = sK + kGenRows * ld;
  const int bh = blockIdx.x % bh_count,
            tile = n_tiles - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
  const int q0 = tile * kGenRows;
  const size_t q_stride = static_cast<size_t>(hq) * d, kv_stride = static_cast<size_t>(hkv) * d;
  const bf16* k_head = k + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * d;
  const bf16* v_head = v + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * d;
  stage_rows_f32(sQ, ld,
                 q + (static_cast<size_t>(b) * seq + q0) * q_stride + static_cast<size_t>(h) * d,
                 q_stride, min(kGenRows, seq - q0), d);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * kGenRowsPerWarp;
  float m[kGenRowsPerWarp], l[kGenRowsPerWarp], o[kGenRowsPerWarp][NC];
  int first[kGenRowsPerWarp];  // each row's first key
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    first[r] = keys.first(b, q0 + row0 + r);
#pragma unroll
    for (int c = 0; c < NC; ++c) o[r][c] = 0.0f;
  }
  // A row may see no key of the first tiles (a window or an example shorter than the tile): m
  // stays −inf there, and the shift m_use keeps exp() from seeing −inf − (−inf).
  for (int kt = max(0, keys.first(b, q0)) / kGenRows; kt <= tile; ++kt) {
    const int k0 = kt * kGenRows, rows = min(kGenRows, seq - k0);
    __syncthreads();  // the previous K/V tile is consumed
    stage_rows_f32(sK, ld, k_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    stage_rows_f32(sV, ld, v_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    __syncthreads();
    float s[kGenRowsPerWarp], p[kGenRowsPerWarp];
    dot_4rows(s, sQ + row0 * ld, ld, sK + lane * ld, width);
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r) {
      const int t = q0 + row0 + r, key = k0 + lane;
      const float x = (key <= t && key >= first[r]) ? s[r] * scale : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(x));
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = expf(m[r] - m_use);
      p[r] = expf(x - m_use);
      l[r] = l[r] * alpha + warp_sum_f(p[r]);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < NC; ++c) o[r][c] *= alpha;
    }
    for (int j = 0; j < kGenRows; ++j) {
      float pj[kGenRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kGenRowsPerWarp; ++r) pj[r] = __shfl_sync(0xffffffffu, p[r], j);
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int col = lane + 32 * c;
        if (col < d) {
          const float vj = sV[j * ld + col];
#pragma unroll
          for (int r = 0; r < kGenRowsPerWarp; ++r) o[r][c] = fmaf(pj[r], vj, o[r][c]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    if (t >= seq) continue;
    const float inv_l = 1.0f / l[r];
    bf16* o_row = out + (static_cast<size_t>(b) * seq + t) * q_stride + static_cast<size_t>(h) * d;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int col = lane + 32 * c;
      if (col < d) o_row[col] = __float2bfloat16_rn(o[r][c] * inv_l);
    }
    if (lane == 0 && lse != nullptr) lse[static_cast<size_t>(bh) * seq + t] = m[r] + logf(l[r]);
  }
}

// Block (tile, b, h): dq for query rows [32·tile, +32) of head h, over key tiles 0 .. tile.
// Lane l of warp w: rows 4w .. 4w + 3, key l of each key tile and dq columns l + 32·c.
template <int NC>
__global__ void __launch_bounds__(kGenThreads, 1)
    attention_backward_dq_generic_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dout,
                                         const bf16* __restrict__ q, const bf16* __restrict__ k,
                                         const bf16* __restrict__ v, const float* __restrict__ lse,
                                         const float* __restrict__ delta, int seq, int hq, int hkv,
                                         int d, int n_tiles, int bh_count, float scale,
                                         KeyRange keys) {
  extern __shared__ float4 smem_f4[];
  const int ld = generic_ld(d), width = ld - 4;
  float* sQ = reinterpret_cast<float*>(smem_f4);  // [32, ld] each
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
  float row_lse[kGenRowsPerWarp], row_delta[kGenRowsPerWarp], acc[kGenRowsPerWarp][NC];
  int first[kGenRowsPerWarp];  // each row's first key
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    row_lse[r] = t < seq ? lse[static_cast<size_t>(bh) * seq + t] : 0.0f;
    row_delta[r] = t < seq ? delta[static_cast<size_t>(bh) * seq + t] : 0.0f;
    first[r] = keys.first(b, t);
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;
  }
  for (int kt = max(0, keys.first(b, q0)) / kGenRows; kt <= tile; ++kt) {
    const int k0 = kt * kGenRows, rows = min(kGenRows, seq - k0);
    __syncthreads();  // the previous K/V tile is consumed
    stage_rows_f32(sK, ld, k_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    stage_rows_f32(sV, ld, v_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    __syncthreads();
    float s[kGenRowsPerWarp], dp[kGenRowsPerWarp], ds[kGenRowsPerWarp];
    dot_4rows(s, sQ + row0 * ld, ld, sK + lane * ld, width);
    dot_4rows(dp, sdO + row0 * ld, ld, sV + lane * ld, width);
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r) {
      const int t = q0 + row0 + r;
      const bool visible = k0 + lane <= t && k0 + lane >= first[r] && t < seq;
      ds[r] = visible ? expf(s[r] * scale - row_lse[r]) * (dp[r] - row_delta[r]) : 0.0f;
    }
    for (int j = 0; j < kGenRows; ++j) {
      float dsj[kGenRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kGenRowsPerWarp; ++r) dsj[r] = __shfl_sync(0xffffffffu, ds[r], j);
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int col = lane + 32 * c;
        if (col < d) {
          const float kj = sK[j * ld + col];
#pragma unroll
          for (int r = 0; r < kGenRowsPerWarp; ++r) acc[r][c] = fmaf(dsj[r], kj, acc[r][c]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    if (t >= seq) continue;
    bf16* row = dq + (static_cast<size_t>(b) * seq + t) * q_stride + static_cast<size_t>(h) * d;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int col = lane + 32 * c;
      if (col < d) row[col] = __float2bfloat16_rn(acc[r][c] * scale);
    }
  }
}

// Block (tile, b, kv head): dk, dv for key rows [32·tile, +32), summed over the group's query heads
// and the query tiles tile .. n_tiles − 1. Lane l of warp w: keys 4w .. 4w + 3, query l of each
// query tile and output columns l + 32·c.
template <int NC>
__global__ void __launch_bounds__(kGenThreads, 1) attention_backward_dkdv_generic_kernel(
    bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout,
    const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
    const float* __restrict__ lse, const float* __restrict__ delta, int seq, int hq, int hkv, int d,
    int n_tiles, int bkv_count, float scale, KeyRange keys) {
  extern __shared__ float4 smem_f4[];
  const int ld = generic_ld(d), width = ld - 4;
  float* sK = reinterpret_cast<float*>(smem_f4);  // [32, ld] each
  float* sV = sK + kGenRows * ld;
  float* sQ = sV + kGenRows * ld;
  float* sdO = sQ + kGenRows * ld;
  float* sL = sdO + kGenRows * ld;  // [32] lse of the query tile
  float* sD = sL + kGenRows;        // [32] delta of the query tile
  const int bkv = blockIdx.x % bkv_count, tile = static_cast<int>(blockIdx.x / bkv_count);
  const int b = bkv / hkv, kvh = bkv % hkv, group = hq / hkv;
  const int k0 = tile * kGenRows;
  const size_t q_stride = static_cast<size_t>(hq) * d, kv_stride = static_cast<size_t>(hkv) * d;
  const size_t kv_off =
      (static_cast<size_t>(b) * seq + k0) * kv_stride + static_cast<size_t>(kvh) * d;
  const int k_rows = min(kGenRows, seq - k0);
  stage_rows_f32(sK, ld, k + kv_off, kv_stride, k_rows, d);
  stage_rows_f32(sV, ld, v + kv_off, kv_stride, k_rows, d);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * kGenRowsPerWarp;
  float acc_k[kGenRowsPerWarp][NC], acc_v[kGenRowsPerWarp][NC];
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
#pragma unroll
    for (int c = 0; c < NC; ++c) acc_k[r][c] = acc_v[r][c] = 0.0f;
  }
  // One past the last query tile that sees a key of this tile.
  int qt_end = tile + 1;
  while (qt_end < n_tiles && keys.first(b, qt_end * kGenRows) <= k0 + kGenRows - 1) ++qt_end;
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const size_t bh = static_cast<size_t>(b) * hq + h;
    for (int qt = tile; qt < qt_end; ++qt) {
      const int q0 = qt * kGenRows, rows = min(kGenRows, seq - q0);
      const size_t q_off =
          (static_cast<size_t>(b) * seq + q0) * q_stride + static_cast<size_t>(h) * d;
      __syncthreads();  // the previous Q/dO tile is consumed
      stage_rows_f32(sQ, ld, q + q_off, q_stride, rows, d);
      stage_rows_f32(sdO, ld, dout + q_off, q_stride, rows, d);
      if (threadIdx.x < kGenRows) {
        const int t = q0 + threadIdx.x;
        sL[threadIdx.x] = t < seq ? lse[bh * seq + t] : 0.0f;
        sD[threadIdx.x] = t < seq ? delta[bh * seq + t] : 0.0f;
      }
      __syncthreads();
      float s[kGenRowsPerWarp], dp[kGenRowsPerWarp], p[kGenRowsPerWarp], ds[kGenRowsPerWarp];
      dot_4rows(s, sK + row0 * ld, ld, sQ + lane * ld, width);
      dot_4rows(dp, sV + row0 * ld, ld, sdO + lane * ld, width);
      const int t = q0 + lane, first = keys.first(b, t);
#pragma unroll
      for (int r = 0; r < kGenRowsPerWarp; ++r) {
        const int key = k0 + row0 + r;
        const bool visible = t >= key && key >= first && t < seq;
        p[r] = visible ? expf(s[r] * scale - sL[lane]) : 0.0f;
        ds[r] = p[r] * (dp[r] - sD[lane]);
      }
      for (int i = 0; i < kGenRows; ++i) {
        float pi[kGenRowsPerWarp], dsi[kGenRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kGenRowsPerWarp; ++r) {
          pi[r] = __shfl_sync(0xffffffffu, p[r], i);
          dsi[r] = __shfl_sync(0xffffffffu, ds[r], i);
        }
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int col = lane + 32 * c;
          if (col < d) {
            const float gi = sdO[i * ld + col], qi = sQ[i * ld + col];
#pragma unroll
            for (int r = 0; r < kGenRowsPerWarp; ++r) {
              acc_v[r][c] = fmaf(pi[r], gi, acc_v[r][c]);
              acc_k[r][c] = fmaf(dsi[r], qi, acc_k[r][c]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    const int s = k0 + row0 + r;
    if (s >= seq) continue;
    const size_t off =
        (static_cast<size_t>(b) * seq + s) * kv_stride + static_cast<size_t>(kvh) * d;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int col = lane + 32 * c;
      if (col < d) {
        dk[off + col] = __float2bfloat16_rn(acc_k[r][c] * scale);
        dv[off + col] = __float2bfloat16_rn(acc_v[r][c]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// kernels: flash (tensor cores, head_dim D = 64, 96, 128 or 256)
//
// A tile is 64 rows of one head in shared memory, row stride D + 8 bf16. Warp w owns rows
// [16w, 16w + 16) of the block's own tile (queries in the forward and dQ kernels, keys in the dK/dV
// kernel) and reads the other operand's tile whole. Per lane, with g = lane / 4 and c = lane % 4,
// an accumulator element (e = 0..3) of the 16 × 8 block nb sits at row g + 8·(e / 2), column
// 8·nb + 2c + e % 2.

constexpr int kFlashWarps = kFlashTile / 16;  // one warp per 16 rows of the block's own tile
constexpr int kFlashThreads = 32 * kFlashWarps;
constexpr int kFlashChunk = 32;  // dK/dV: queries per step within a query tile (registers)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Writes the warp's 16 × D accumulator rows, times row_scale[2] (rows g, g + 8), as bf16 into the
// warp's own rows of the tile s, then copies rows [0, rows) of them to dst (row r at dst +
// r·stride) with 16-byte stores. Only this warp reads or writes those rows of s.
template <int D>
__device__ __forceinline__ void flash_store_rows(bf16* dst, size_t stride, int rows, bf16* s,
                                                 const float (&acc)[D / 8][4],
                                                 const float (&row_scale)[2]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  bf16* slab = s + warp * 16 * (D + 8);
  __syncwarp();
#pragma unroll
  for (int nb = 0; nb < D / 8; ++nb) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      *reinterpret_cast<uint32_t*>(slab + (g + 8 * hr) * (D + 8) + nb * 8 + 2 * c) =
          pack_bf16(acc[nb][2 * hr] * row_scale[hr], acc[nb][2 * hr + 1] * row_scale[hr]);
    }
  }
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = i / kChunks, ch = i % kChunks;
    if (warp * 16 + r < rows) {
      *reinterpret_cast<uint4*>(dst + static_cast<size_t>(warp * 16 + r) * stride + ch * 8) =
          *reinterpret_cast<const uint4*>(slab + r * (D + 8) + ch * 8);
    }
  }
}

// Block (tile, b, h): query rows [64·tile, +64) of head h against key tiles tile, tile − 1, .., 0
// (the diagonal tile first, so the running max is finite from the start: every row sees its own
// key). K and V have one buffer each, staggered: V(kt) loads during S = Q·Kᵀ, K(kt − 1) during P·V.
template <int D>
__global__ void __launch_bounds__(kFlashThreads)
    attention_forward_flash_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                                   const bf16* __restrict__ q, const bf16* __restrict__ k,
                                   const bf16* __restrict__ v, int seq, int hq, int hkv,
                                   int n_tiles, int bh_count, float scale_log2, KeyRange keys) {
  extern __shared__ uint4 smem_u4[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_u4);  // [64, D + 8] each
  bf16* sK = sQ + kFlashTileElems<D>;
  bf16* sV = sK + kFlashTileElems<D>;
  const int bh = blockIdx.x % bh_count,
            tile = n_tiles - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
  const int q0 = tile * kFlashTile, q_rows = min(kFlashTile, seq - q0);
  const size_t q_stride = static_cast<size_t>(hq) * D, kv_stride = static_cast<size_t>(hkv) * D;
  const size_t q_off = (static_cast<size_t>(b) * seq + q0) * q_stride + static_cast<size_t>(h) * D;
  const bf16* k_head = k + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
  const bf16* v_head = v + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
  flash_load_tile<D, kFlashThreads>(sQ, q + q_off, q_stride, q_rows);
  flash_load_tile<D, kFlashThreads>(sK, k_head + static_cast<size_t>(q0) * kv_stride, kv_stride,
                                    q_rows);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const uint32_t q_addr = smem_u32(sQ + warp * 16 * (D + 8)) + lane_off_a<D>(lane);
  const uint32_t k_addr = smem_u32(sK) + lane_off_b<D>(lane);
  const uint32_t v_addr = smem_u32(sV) + lane_off_bt<D>(lane);
  const int row_g = q0 + warp * 16 + g;  // the lane's rows: row_g and row_g + 8

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY},
        l[2] = {0.0f, 0.0f};  // running max (log2 units), partial sums
  const int first[2] = {keys.first(b, row_g), keys.first(b, row_g + 8)};  // the rows' first keys
  const int kt_lo = max(0, keys.first(b, q0)) / kFlashTile;  // the first tile any row sees
  const int edge = keys.first(b, q0 + kFlashTile - 1);       // keys below it are cut for some row
  for (int kt = tile; kt >= kt_lo; --kt) {
    const int k0 = kt * kFlashTile;
    cp_async_wait<0>();
    __syncthreads();  // K(kt) (and Q) landed; every warp is done with sV
    flash_load_tile<D, kFlashThreads>(sV, v_head + static_cast<size_t>(k0) * kv_stride, kv_stride,
                                      min(kFlashTile, seq - k0));
    cp_async_commit();

    float s[kFlashTile / 8][4] = {};
    mma_abt<D, kFlashTile>(s, q_addr, k_addr);
    if (kt == tile || k0 < edge) {  // the diagonal, or a window or example edge cuts it
#pragma unroll
      for (int nb = 0; nb < kFlashTile / 8; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + nb * 8 + 2 * c + (e & 1), row = row_g + 8 * (e >> 1);
          if (key > row || key < first[e >> 1]) s[nb][e] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < kFlashTile / 8; ++nb)
        mx = fmaxf(mx, fmaxf(s[nb][2 * hr], s[nb][2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx * scale_log2);
      const float alpha = fast_exp2(m[hr] - m_new);
      m[hr] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < kFlashTile / 8; ++nb) {
#pragma unroll
        for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
          s[nb][e] = fast_exp2(fmaf(s[nb][e], scale_log2, -m_new));
          sum += s[nb][e];
        }
      }
      l[hr] = l[hr] * alpha + sum;
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) {
        o[nb][2 * hr] *= alpha;
        o[nb][2 * hr + 1] *= alpha;
      }
    }

    cp_async_wait<0>();
    __syncthreads();  // V(kt) landed; every warp is done with sK
    if (kt > kt_lo) {
      flash_load_tile<D, kFlashThreads>(
          sK, k_head + static_cast<size_t>(k0 - kFlashTile) * kv_stride, kv_stride, kFlashTile);
      cp_async_commit();
    }
    mma_pb<D, kFlashTile>(o, s, v_addr);
  }

  float inv_l[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float sum = l[hr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv_l[hr] = 1.0f / sum;
    const int t = row_g + 8 * hr;
    if (lse != nullptr && c == 0 && t < seq)
      lse[static_cast<size_t>(bh) * seq + t] = (m[hr] + log2f(sum)) * kLn2;
  }
  flash_store_rows<D>(out + q_off, q_stride, q_rows, sQ, o, inv_l);
}

// Block (tile, b, h): dq for query rows [64·tile, +64) of head h over key tiles 0 .. tile, K/V
// double-buffered (tile kt + 1 loads while kt is used).
template <int D>
__global__ void __launch_bounds__(kFlashThreads)
    attention_backward_dq_flash_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dout,
                                       const bf16* __restrict__ q, const bf16* __restrict__ k,
                                       const bf16* __restrict__ v, const float* __restrict__ lse,
                                       const float* __restrict__ delta, int seq, int hq, int hkv,
                                       int n_tiles, int bh_count, float scale_log2, float scale,
                                       KeyRange keys) {
  extern __shared__ uint4 smem_u4[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_u4);  // [64, D + 8] each
  bf16* sdO = sQ + kFlashTileElems<D>;
  bf16* sK = sdO + kFlashTileElems<D>;     // two buffers
  bf16* sV = sK + 2 * kFlashTileElems<D>;  // two buffers
  const int bh = blockIdx.x % bh_count,
            tile = n_tiles - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
  const int q0 = tile * kFlashTile, q_rows = min(kFlashTile, seq - q0);
  const size_t q_stride = static_cast<size_t>(hq) * D, kv_stride = static_cast<size_t>(hkv) * D;
  const size_t q_off = (static_cast<size_t>(b) * seq + q0) * q_stride + static_cast<size_t>(h) * D;
  const bf16* k_head = k + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
  const bf16* v_head = v + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
  const int kt_lo = max(0, keys.first(b, q0)) / kFlashTile;  // the first tile any row sees
  const int k_lo = kt_lo * kFlashTile;
  const int edge = keys.first(b, q0 + kFlashTile - 1);  // keys below it are cut for some row
  flash_load_tile<D, kFlashThreads>(sQ, q + q_off, q_stride, q_rows);
  flash_load_tile<D, kFlashThreads>(sdO, dout + q_off, q_stride, q_rows);
  flash_load_tile<D, kFlashThreads>(sK, k_head + static_cast<size_t>(k_lo) * kv_stride, kv_stride,
                                    min(kFlashTile, seq - k_lo));
  flash_load_tile<D, kFlashThreads>(sV, v_head + static_cast<size_t>(k_lo) * kv_stride, kv_stride,
                                    min(kFlashTile, seq - k_lo));
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const uint32_t q_addr = smem_u32(sQ + warp * 16 * (D + 8)) + lane_off_a<D>(lane);
  const uint32_t do_addr = smem_u32(sdO + warp * 16 * (D + 8)) + lane_off_a<D>(lane);
  const int row_g = q0 + warp * 16 + g;  // the lane's rows: row_g and row_g + 8
  float row_lse[2], row_delta[2];        // lse in log2 units
  int first[2];                          // the rows' first keys
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int t = row_g + 8 * hr;
    row_lse[hr] = t < seq ? lse[static_cast<size_t>(bh) * seq + t] * kLog2e : 0.0f;
    row_delta[hr] = t < seq ? delta[static_cast<size_t>(bh) * seq + t] : 0.0f;
    first[hr] = keys.first(b, t);
  }

  float acc[D / 8][4] = {};
  for (int kt = kt_lo; kt <= tile; ++kt) {
    const int buf = (kt - kt_lo) & 1, k0 = kt * kFlashTile;
    const bool cut = kt == tile || k0 < edge;  // the diagonal, or a window or example edge
    cp_async_wait<0>();
    __syncthreads();  // K/V(kt) landed; every warp is done with the other buffer
    if (kt < tile) {
      const int next = k0 + kFlashTile;
      flash_load_tile<D, kFlashThreads>(sK + (buf ^ 1) * kFlashTileElems<D>,
                                        k_head + static_cast<size_t>(next) * kv_stride, kv_stride,
                                        min(kFlashTile, seq - next));
      flash_load_tile<D, kFlashThreads>(sV + (buf ^ 1) * kFlashTileElems<D>,
                                        v_head + static_cast<size_t>(next) * kv_stride, kv_stride,
                                        min(kFlashTile, seq - next));
      cp_async_commit();
    }
    const bf16* sKb = sK + buf * kFlashTileElems<D>;
    const bf16* sVb = sV + buf * kFlashTileElems<D>;
    float s[kFlashTile / 8][4] = {}, dp[kFlashTile / 8][4] = {};
    mma_abt<D, kFlashTile>(s, q_addr, smem_u32(sKb) + lane_off_b<D>(lane));
    mma_abt<D, kFlashTile>(dp, do_addr, smem_u32(sVb) + lane_off_b<D>(lane));
#pragma unroll
    for (int nb = 0; nb < kFlashTile / 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1;
        float p = fast_exp2(fmaf(s[nb][e], scale_log2, -row_lse[hr]));
        if (cut) {
          const int key = k0 + nb * 8 + 2 * c + (e & 1), row = row_g + 8 * hr;
          if (key > row || key < first[hr]) p = 0.0f;
        }
        s[nb][e] = p * (dp[nb][e] - row_delta[hr]);  // dS
      }
    }
    mma_pb<D, kFlashTile>(acc, s, smem_u32(sKb) + lane_off_bt<D>(lane));
  }
  const float row_scale[2] = {scale, scale};
  flash_store_rows<D>(dq + q_off, q_stride, q_rows, sQ, acc, row_scale);
}

// Block (tile, b, kv head): dk, dv for key rows [64·tile, +64), summed over the group's query heads
// and their query tiles tile .. n_tiles − 1 (Q, dO, lse and delta of the next one load while the
// current one is used). Works on Sᵀ = K·Qᵀ (keys as rows), kFlashChunk queries at a time.
template <int D>
__global__ void __launch_bounds__(kFlashThreads)
    attention_backward_dkdv_flash_kernel(bf16* __restrict__ dk, bf16* __restrict__ dv,
                                         const bf16* __restrict__ dout, const bf16* __restrict__ q,
                                         const bf16* __restrict__ k, const bf16* __restrict__ v,
                                         const float* __restrict__ lse,
                                         const float* __restrict__ delta, int seq, int hq, int hkv,
                                         int n_tiles, int bkv_count, float scale_log2, float scale,
                                         KeyRange keys) {
  extern __shared__ uint4 smem_u4[];
  bf16* sK = reinterpret_cast<bf16*>(smem_u4);  // [64, D + 8] each
  bf16* sV = sK + kFlashTileElems<D>;
  bf16* sQ = sV + kFlashTileElems<D>;                                  // two buffers
  bf16* sdO = sQ + 2 * kFlashTileElems<D>;                             // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kFlashTileElems<D>);  // [2][64] lse (log2 units)
  float* sD = sL + 2 * kFlashTile;                                     // [2][64] delta
  const int bkv = blockIdx.x % bkv_count, tile = static_cast<int>(blockIdx.x / bkv_count);
  const int b = bkv / hkv, kvh = bkv % hkv, group = hq / hkv;
  const int k0 = tile * kFlashTile, k_rows = min(kFlashTile, seq - k0);
  const size_t q_stride = static_cast<size_t>(hq) * D, kv_stride = static_cast<size_t>(hkv) * D;
  const size_t kv_off =
      (static_cast<size_t>(b) * seq + k0) * kv_stride + static_cast<size_t>(kvh) * D;
  // Query tiles tile .. the last whose first query still sees the tile's last key.
  int n_q = 1;
  while (tile + n_q < n_tiles && keys.first(b, (tile + n_q) * kFlashTile) <= k0 + kFlashTile - 1)
    ++n_q;
  const int n_iter = group * n_q;  // (query head, query tile) pairs

  // Iteration `it` → query head kvh·group + it / n_q, query tile tile + it % n_q, into buffer
  // `buf`.
  auto load_queries = [&](int it, int buf) {
    const int h = kvh * group + it / n_q, q0 = (tile + it % n_q) * kFlashTile;
    const size_t q_off =
        (static_cast<size_t>(b) * seq + q0) * q_stride + static_cast<size_t>(h) * D;
    const int rows = min(kFlashTile, seq - q0);
    flash_load_tile<D, kFlashThreads>(sQ + buf * kFlashTileElems<D>, q + q_off, q_stride, rows);
    flash_load_tile<D, kFlashThreads>(sdO + buf * kFlashTileElems<D>, dout + q_off, q_stride, rows);
    const size_t bh = static_cast<size_t>(b) * hq + h;
    const int i = threadIdx.x % kFlashTile, t = q0 + i;
    static_assert(kFlashThreads == 2 * kFlashTile, "one thread per lse and per delta entry");
    if (threadIdx.x < kFlashTile) {
      sL[buf * kFlashTile + i] =
          t < seq ? lse[bh * seq + t] * kLog2e : INFINITY;  // padding rows: P = 0
    } else {
      sD[buf * kFlashTile + i] = t < seq ? delta[bh * seq + t] : 0.0f;
    }
  };
  flash_load_tile<D, kFlashThreads>(sK, k + kv_off, kv_stride, k_rows);
  flash_load_tile<D, kFlashThreads>(sV, v + kv_off, kv_stride, k_rows);
  load_queries(0, 0);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const uint32_t k_addr = smem_u32(sK + warp * 16 * (D + 8)) + lane_off_a<D>(lane);
  const uint32_t v_addr = smem_u32(sV + warp * 16 * (D + 8)) + lane_off_a<D>(lane);
  const int key_g = k0 + warp * 16 + g;  // the lane's keys: key_g and key_g + 8

  float acc_k[D / 8][4] = {}, acc_v[D / 8][4] = {};
  for (int it = 0; it < n_iter; ++it) {
    const int buf = it & 1;
    cp_async_wait<0>();
    __syncthreads();  // tile `it` landed (lse/delta stores too); every warp is done with the other
                      // buffer
    if (it + 1 < n_iter) {
      load_queries(it + 1, buf ^ 1);
      cp_async_commit();
    }
    const int q0 = (tile + it % n_q) * kFlashTile;
    const uint32_t q_base = smem_u32(sQ + buf * kFlashTileElems<D>);
    const uint32_t do_base = smem_u32(sdO + buf * kFlashTileElems<D>);
    const float* row_lse = sL + buf * kFlashTile;
    const float* row_delta = sD + buf * kFlashTile;
    const bool edge_cut = keys.first(b, q0 + kFlashTile - 1) > k0;  // a window or example edge
#pragma unroll
    for (int qc = 0; qc < kFlashTile; qc += kFlashChunk) {
      if (q0 == k0 && qc + kFlashChunk <= warp * 16) continue;  // every query before every key
      const uint32_t chunk = qc * (D + 8) * 2;
      float st[kFlashChunk / 8][4] = {}, dpt[kFlashChunk / 8][4] = {};
      mma_abt<D, kFlashChunk>(st, k_addr, q_base + chunk + lane_off_b<D>(lane));
      mma_abt<D, kFlashChunk>(dpt, v_addr, do_base + chunk + lane_off_b<D>(lane));
#pragma unroll
      for (int nb = 0; nb < kFlashChunk / 8; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = qc + nb * 8 + 2 * c + (e & 1);  // query within the tile
          float p = fast_exp2(fmaf(st[nb][e], scale_log2, -row_lse[i]));
          if (q0 == k0 && i < key_g + 8 * (e >> 1) - k0) p = 0.0f;  // diagonal tile: query < key
          if (edge_cut && key_g + 8 * (e >> 1) < keys.first(b, q0 + i)) p = 0.0f;  // before it
          dpt[nb][e] = p * (dpt[nb][e] - row_delta[i]);                            // dSᵀ
          st[nb][e] = p;                                                           // Pᵀ
        }
      }
      mma_pb<D, kFlashChunk>(acc_v, st, do_base + chunk + lane_off_bt<D>(lane));
      mma_pb<D, kFlashChunk>(acc_k, dpt, q_base + chunk + lane_off_bt<D>(lane));
    }
  }
  const float k_scale[2] = {scale, scale}, v_scale[2] = {1.0f, 1.0f};
  flash_store_rows<D>(dk + kv_off, kv_stride, k_rows, sK, acc_k, k_scale);
  flash_store_rows<D>(dv + kv_off, kv_stride, k_rows, sV, acc_v, v_scale);
}

// ---------------------------------------------------------------------------------------------
// launchers (helpers)

Status check_shape(const char* op, int batch, int seq, int hq, int hkv, int head_dim) {
  if (batch < 0 || seq < 0 || hq <= 0 || hkv <= 0 || hq % hkv != 0 || head_dim <= 0 ||
      head_dim > kMaxHeadDim) {
    return invalid_argument(
        std::string(op) + ": bad shape batch=" + std::to_string(batch) +
        " seq=" + std::to_string(seq) + " hq=" + std::to_string(hq) +
        " hkv=" + std::to_string(hkv) + " head_dim=" + std::to_string(head_dim) +
        " (hq a multiple of hkv, head_dim at most " + std::to_string(kMaxHeadDim) + ")");
  }
  return Status::ok_status();
}

// Calls f(std::integral_constant<int, NC>) with the fewest 32-column chunks NC covering head_dim.
template <class F>
Status with_chunks(int head_dim, F&& f) {
  if (head_dim <= 32) return f(std::integral_constant<int, 1>{});
  if (head_dim <= 64) return f(std::integral_constant<int, 2>{});
  if (head_dim <= 128) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

// The flash kernels need head_dim 64, 96, 128 or 256 and 16-byte aligned tensors (cp.async, uint4
// stores); rows are then 16-byte aligned too.
template <class... T>
bool flash_applies(int head_dim, const T*... p) {
  return (head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256) &&
         ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

// Calls f(std::integral_constant<int, D>) for the flash kernels' head_dim D (flash_applies).
template <class F>
Status with_flash_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 96:
      return f(std::integral_constant<int, 96>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    default:
      return f(std::integral_constant<int, 256>{});
  }
}

// Which kernels run: kFlash must apply, kAuto takes it where it does.
Result<bool> use_flash(const char* op, AttentionPath path, bool applies, int head_dim) {
  if (path == AttentionPath::kFlash && !applies) {
    return invalid_argument(
        std::string(op) +
        ": the flash kernels need head_dim 64, 96, 128 or 256 and 16-byte aligned "
        "tensors, got head_dim " +
        std::to_string(head_dim));
  }
  return path != AttentionPath::kGeneric && applies;
}

Status launch_delta(float* delta, const bf16* dout, const bf16* out, int batch, int seq, int hq,
                    int d, cudaStream_t stream) {
  const size_t rows = static_cast<size_t>(batch) * seq * hq;
  constexpr int kWarps = 8;
  attention_delta_kernel<<<ceil_div(rows, kWarps), 32 * kWarps, 0, stream>>>(delta, dout, out, rows,
                                                                             seq, hq, d);
  return CUDA_LAUNCH_CHECK("attention_delta_kernel");
}

// The keys each query sees, as the kernels take them (span in [1, seq]).
KeyRange key_range(const compute::AttentionParams& params, int seq) {
  const int span = params.sliding_window > 0 ? std::min(params.sliding_window, seq) : seq;
  return {span, seq, params.positions.as<int32_t>()};
}

Status check_params(const char* op, const compute::AttentionParams& params) {
  if (params.sliding_window >= 0 && params.scale >= 0.0f) return Status::ok_status();
  return invalid_argument(std::string(op) + ": sliding window " +
                          std::to_string(params.sliding_window) + " and scale " +
                          std::to_string(params.scale) + " (expected both >= 0)");
}

Status forward_generic(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                       int batch, int seq, int hq, int hkv, int d, float scale, KeyRange keys,
                       cudaStream_t stream) {
  const int n_tiles = static_cast<int>(ceil_div(seq, kGenRows)), bh_count = batch * hq;
  const size_t smem = 3 * sizeof(float) * kGenRows * generic_ld(d);
  return with_chunks(d, [&](auto nc) -> Status {
    const auto kernel = attention_forward_generic_kernel<decltype(nc)::value>;
    SPW_RETURN_IF_ERROR(allow_smem(kernel, smem));
    kernel<<<n_tiles * bh_count, kGenThreads, smem, stream>>>(out, lse, q, k, v, seq, hq, hkv, d,
                                                              n_tiles, bh_count, scale, keys);
    return CUDA_LAUNCH_CHECK("attention_forward_generic_kernel");
  });
}

template <int D>
Status forward_flash(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int batch,
                     int seq, int hq, int hkv, float scale, KeyRange keys, cudaStream_t stream) {
  const int n_tiles = static_cast<int>(ceil_div(seq, kFlashTile)), bh_count = batch * hq;
  const size_t smem = 3 * sizeof(bf16) * kFlashTileElems<D>;
  const auto kernel = attention_forward_flash_kernel<D>;
  SPW_RETURN_IF_ERROR(allow_smem(kernel, smem));
  const float scale_log2 = kLog2e * scale;
  kernel<<<n_tiles * bh_count, kFlashThreads, smem, stream>>>(out, lse, q, k, v, seq, hq, hkv,
                                                              n_tiles, bh_count, scale_log2, keys);
  return CUDA_LAUNCH_CHECK("attention_forward_flash_kernel");
}

template <int D>
Status backward_flash(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                      const bf16* v, const float* lse, const float* delta, int batch, int seq,
                      int hq, int hkv, float scale, KeyRange keys, cudaStream_t stream) {
  const int n_tiles = static_cast<int>(ceil_div(seq, kFlashTile));
  const float scale_log2 = scale * kLog2e;
  const auto dkdv = attention_backward_dkdv_flash_kernel<D>;
  const size_t dkdv_smem = 6 * sizeof(bf16) * kFlashTileElems<D> + 4 * sizeof(float) * kFlashTile;
  SPW_RETURN_IF_ERROR(allow_smem(dkdv, dkdv_smem));
  dkdv<<<n_tiles * batch * hkv, kFlashThreads, dkdv_smem, stream>>>(
      dk, dv, dout, q, k, v, lse, delta, seq, hq, hkv, n_tiles, batch * hkv, scale_log2, scale,
      keys);
  SPW_RETURN_IF_ERROR(CUDA_LAUNCH_CHECK("attention_backward_dkdv_flash_kernel"));
  const auto dqk = attention_backward_dq_flash_kernel<D>;
  const size_t dq_smem = 6 * sizeof(bf16) * kFlashTileElems<D>;
  SPW_RETURN_IF_ERROR(allow_smem(dqk, dq_smem));
  dqk<<<n_tiles * batch * hq, kFlashThreads, dq_smem, stream>>>(
      dq, dout, q, k, v, lse, delta, seq, hq, hkv, n_tiles, batch * hq, scale_log2, scale, keys);
  return CUDA_LAUNCH_CHECK("attention_backward_dq_flash_kernel");
}

Status backward_generic(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                        const bf16* k, const bf16* v, const float* lse, const float* delta,
                        int batch, int seq, int hq, int hkv, int d, float scale, KeyRange keys,
                        cudaStream_t stream) {
  const int n_tiles = static_cast<int>(ceil_div(seq, kGenRows));
  const int ld = generic_ld(d);
  return with_chunks(d, [&](auto nc) -> Status {
    constexpr int NC = decltype(nc)::value;
    const auto dkdv = attention_backward_dkdv_generic_kernel<NC>;
    const size_t dkdv_smem = sizeof(float) * (4 * kGenRows * ld + 2 * kGenRows);
    SPW_RETURN_IF_ERROR(allow_smem(dkdv, dkdv_smem));
    dkdv<<<n_tiles * batch * hkv, kGenThreads, dkdv_smem, stream>>>(
        dk, dv, dout, q, k, v, lse, delta, seq, hq, hkv, d, n_tiles, batch * hkv, scale, keys);
    SPW_RETURN_IF_ERROR(CUDA_LAUNCH_CHECK("attention_backward_dkdv_generic_kernel"));
    const auto dqk = attention_backward_dq_generic_kernel<NC>;
    const size_t dq_smem = sizeof(float) * 4 * kGenRows * ld;
    SPW_RETURN_IF_ERROR(allow_smem(dqk, dq_smem));
    dqk<<<n_tiles * batch * hq, kGenThreads, dq_smem, stream>>>(
        dq, dout, q, k, v, lse, delta, seq, hq, hkv, d, n_tiles, batch * hq, scale, keys);
    return CUDA_LAUNCH_CHECK("attention_backward_dq_generic_kernel");
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers

Status attention_forward_path(AttentionPath path, bf16* out, float* lse, const bf16* q,
                              const bf16* k, const bf16* v, int batch, int seq, int hq, int hkv,
                              int head_dim, const compute::AttentionParams& params,
                              cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_shape("attention_forward", batch, seq, hq, hkv, head_dim));
  SPW_RETURN_IF_ERROR(check_params("attention_forward", params));
  SPW_ASSIGN_OR_RETURN(
      const bool flash,
      use_flash("attention_forward", path, flash_applies(head_dim, out, q, k, v), head_dim));
  if (batch == 0 || seq == 0) return Status::ok_status();
  const float scale = params.scale_for(head_dim);
  const KeyRange keys = key_range(params, seq);
  if (!flash)
    return forward_generic(out, lse, q, k, v, batch, seq, hq, hkv, head_dim, scale, keys, stream);
  return with_flash_dim(head_dim, [&](auto d) {
    return forward_flash<decltype(d)::value>(out, lse, q, k, v, batch, seq, hq, hkv, scale, keys,
                                             stream);
  });
}

Status attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                         int batch, int seq, int hq, int hkv, int head_dim,
                         const compute::AttentionParams& params, cudaStream_t stream) {
  return attention_forward_path(AttentionPath::kAuto, out, lse, q, k, v, batch, seq, hq, hkv,
                                head_dim, params, stream);
}

Status attention_backward_path(AttentionPath path, bf16* dq, bf16* dk, bf16* dv, const bf16* dout,
                               const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                               const float* lse, int batch, int seq, int hq, int hkv, int head_dim,
                               const compute::AttentionParams& params, float* scratch,
                               size_t scratch_floats, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_shape("attention_backward", batch, seq, hq, hkv, head_dim));
  SPW_RETURN_IF_ERROR(check_params("attention_backward", params));
  SPW_ASSIGN_OR_RETURN(
      const bool flash,
      use_flash("attention_backward", path, flash_applies(head_dim, dq, dk, dv, dout, q, k, v, out),
                head_dim));
  if (batch == 0 || seq == 0) return Status::ok_status();
  const size_t need = attention_backward_scratch_floats(batch, seq, hq, hkv, head_dim, false);
  if (scratch_floats < need) {
    return invalid_argument("attention_backward: scratch of " + std::to_string(scratch_floats) +
                            " floats, needs " + std::to_string(need));
  }
  float* delta = scratch;  // [b, hq, t]
  SPW_RETURN_IF_ERROR(launch_delta(delta, dout, out, batch, seq, hq, head_dim, stream));
  const float scale = params.scale_for(head_dim);
  const KeyRange keys = key_range(params, seq);
  if (flash) {
    return with_flash_dim(head_dim, [&](auto d) {
      return backward_flash<decltype(d)::value>(dq, dk, dv, dout, q, k, v, lse, delta, batch, seq,
                                                hq, hkv, scale, keys, stream);
    });
  }
  return backward_generic(dq, dk, dv, dout, q, k, v, lse, delta, batch, seq, hq, hkv, head_dim,
                          scale, keys, stream);
}

Status attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                          const bf16* k, const bf16* v, const bf16* out, const float* lse,
                          int batch, int seq, int hq, int hkv, int head_dim,
                          const compute::AttentionParams& params, float* scratch,
                          size_t scratch_floats, cudaStream_t stream) {
  return attention_backward_path(AttentionPath::kAuto, dq, dk, dv, dout, q, k, v, out, lse, batch,
                                 seq, hq, hkv, head_dim, params, scratch, scratch_floats, stream);
}

}  // namespace spillway::cuda
