// Causal GQA attention, forward and backward (math: cpu/attention.h; launchers: attention.cuh).
//
// Two kernel sets (attention-path.cuh picks one; the public launchers take the flash set where it
// applies):
//   - generic: fp32 on CUDA cores, any head_dim up to 256. A block of 8 warps owns a tile of 32
//     rows; warp w owns 4 rows and lane l one column of each 32 × 32 score tile, K/V (or Q/dO)
//     tiles are staged in shared memory as fp32, softmax is online (running max and sum, as
//     FlashAttention).
//   - flash: head_dim 64 or 128 (the 7B models), FlashAttention-2 on tensor cores. 4 warps × 16
//     rows = 64 rows per block, tiles of 64 × 64, bf16 mma.sync with fp32 accumulators, K/V (or
//     Q/dO) tiles through cp.async into padded shared memory (row stride head_dim + 8 bf16: the 8
//     rows an ldmatrix reads fall in 8 different 16-byte bank groups), scores prescaled by
//     log2(e)/sqrt(d) for exp2. Tiles past the sequence are zero-filled, so any seq works.
// Both backwards are deterministic without atomics: D = rowsum(dO ∘ O) goes to the scratch first,
// then one kernel owns dK/dV per key tile (looping over the group's query heads and the query tiles
// at or after it) and another owns dQ per query tile (looping over key tiles up to it).
// Blocks are numbered so that the longest tiles (most keys or queries under the causal mask) start
// first.
#include <cmath>
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
                                       const bf16* __restrict__ out, size_t rows, int seq, int hq, int d) {
  const size_t row = static_cast<size_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;  // (b·seq + t)·hq + h
  if (row >= rows) return;  // whole warps
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
    attention_forward_generic_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ q,
                                     const bf16* __restrict__ k, const bf16* __restrict__ v, int seq, int hq,
                                     int hkv, int d, int n_tiles, int bh_count, float scale) {
  extern __shared__ float4 smem_f4[];
  const int ld = generic_ld(d), width = ld - 4;
  float* sQ = reinterpret_cast<float*>(smem_f4);  // [32, ld] each
  float* sK = sQ + kGenRows * ld;
  float* sV = sK + kGenRows * ld;
  const int bh = blockIdx.x % bh_count, tile = n_tiles - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int b = bh / hq, h = bh % hq, kvh = h / (hq / hkv);
  const int q0 = tile * kGenRows;
  const size_t q_stride = static_cast<size_t>(hq) * d, kv_stride = static_cast<size_t>(hkv) * d;
  const bf16* k_head = k + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * d;
  const bf16* v_head = v + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * d;
  stage_rows_f32(sQ, ld, q + (static_cast<size_t>(b) * seq + q0) * q_stride + static_cast<size_t>(h) * d, q_stride,
                 min(kGenRows, seq - q0), d);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = warp * kGenRowsPerWarp;
  float m[kGenRowsPerWarp], l[kGenRowsPerWarp], o[kGenRowsPerWarp][NC];
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) o[r][c] = 0.0f;
  }
  // Key tile 0 holds key 0, visible to every query, so m is finite from the first tile on.
  for (int kt = 0; kt <= tile; ++kt) {
    const int k0 = kt * kGenRows, rows = min(kGenRows, seq - k0);
    __syncthreads();  // the previous K/V tile is consumed
    stage_rows_f32(sK, ld, k_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    stage_rows_f32(sV, ld, v_head + static_cast<size_t>(k0) * kv_stride, kv_stride, rows, d);
    __syncthreads();
    float s[kGenRowsPerWarp], p[kGenRowsPerWarp];
    dot_4rows(s, sQ + row0 * ld, ld, sK + lane * ld, width);
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r) {
      const float x = (k0 + lane <= q0 + row0 + r) ? s[r] * scale : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(x));
      const float alpha = expf(m[r] - m_new);
      p[r] = expf(x - m_new);
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
                                         const float* __restrict__ delta, int seq, int hq, int hkv, int d,
                                         int n_tiles, int bh_count, float scale) {
  extern __shared__ float4 smem_f4[];
  const int ld = generic_ld(d), width = ld - 4;
  float* sQ = reinterpret_cast<float*>(smem_f4);  // [32, ld] each
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
  float row_lse[kGenRowsPerWarp], row_delta[kGenRowsPerWarp], acc[kGenRowsPerWarp][NC];
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    row_lse[r] = t < seq ? lse[static_cast<size_t>(bh) * seq + t] : 0.0f;
    row_delta[r] = t < seq ? delta[static_cast<size_t>(bh) * seq + t] : 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;
  }
  for (int kt = 0; kt <= tile; ++kt) {
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
      const bool visible = k0 + lane <= t && t < seq;
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
__global__ void __launch_bounds__(kGenThreads, 1)
    attention_backward_dkdv_generic_kernel(bf16* __restrict__ dk, bf16* __restrict__ dv,
                                           const bf16* __restrict__ dout, const bf16* __restrict__ q,
                                           const bf16* __restrict__ k, const bf16* __restrict__ v,
                                           const float* __restrict__ lse, const float* __restrict__ delta, int seq,
                                           int hq, int hkv, int d, int n_tiles, int bkv_count, float scale) {
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
  const size_t kv_off = (static_cast<size_t>(b) * seq + k0) * kv_stride + static_cast<size_t>(kvh) * d;
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
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const size_t bh = static_cast<size_t>(b) * hq + h;
    for (int qt = tile; qt < n_tiles; ++qt) {
      const int q0 = qt * kGenRows, rows = min(kGenRows, seq - q0);
      const size_t q_off = (static_cast<size_t>(b) * seq + q0) * q_stride + static_cast<size_t>(h) * d;
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
      const int t = q0 + lane;
#pragma unroll
      for (int r = 0; r < kGenRowsPerWarp; ++r) {
        const bool visible = t >= k0 + row0 + r && t < seq;
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
    const size_t off = (static_cast<size_t>(b) * seq + s) * kv_stride + static_cast<size_t>(kvh) * d;
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
// launchers (helpers)

Status check_shape(const char* op, int batch, int seq, int hq, int hkv, int head_dim) {
  if (batch < 0 || seq < 0 || hq <= 0 || hkv <= 0 || hq % hkv != 0 || head_dim <= 0 || head_dim > kMaxHeadDim) {
    return invalid_argument(std::string(op) + ": bad shape batch=" + std::to_string(batch) +
                            " seq=" + std::to_string(seq) + " hq=" + std::to_string(hq) +
                            " hkv=" + std::to_string(hkv) + " head_dim=" + std::to_string(head_dim) +
                            " (hq a multiple of hkv, head_dim at most " + std::to_string(kMaxHeadDim) + ")");
  }
  return Status::ok_status();
}

// Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KiB.
template <class Kernel>
Status allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
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

Status launch_delta(float* delta, const bf16* dout, const bf16* out, int batch, int seq, int hq, int d,
                    cudaStream_t stream) {
  const size_t rows = static_cast<size_t>(batch) * seq * hq;
  constexpr int kWarps = 8;
  attention_delta_kernel<<<ceil_div(rows, kWarps), 32 * kWarps, 0, stream>>>(delta, dout, out, rows, seq, hq, d);
  return CUDA_LAUNCH_CHECK("attention_delta_kernel");
}

Status forward_generic(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int batch, int seq,
                       int hq, int hkv, int d, cudaStream_t stream) {
  const int n_tiles = static_cast<int>(ceil_div(seq, kGenRows)), bh_count = batch * hq;
  const size_t smem = 3 * sizeof(float) * kGenRows * generic_ld(d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  return with_chunks(d, [&](auto nc) -> Status {
    const auto kernel = attention_forward_generic_kernel<decltype(nc)::value>;
    SPW_RETURN_IF_ERROR(allow_smem(kernel, smem));
    kernel<<<n_tiles * bh_count, kGenThreads, smem, stream>>>(out, lse, q, k, v, seq, hq, hkv, d, n_tiles,
                                                                bh_count, scale);
    return CUDA_LAUNCH_CHECK("attention_forward_generic_kernel");
  });
}

Status backward_generic(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                        const bf16* v, const float* lse, const float* delta, int batch, int seq, int hq, int hkv,
                        int d, cudaStream_t stream) {
  const int n_tiles = static_cast<int>(ceil_div(seq, kGenRows));
  const int ld = generic_ld(d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  return with_chunks(d, [&](auto nc) -> Status {
    constexpr int NC = decltype(nc)::value;
    const auto dkdv = attention_backward_dkdv_generic_kernel<NC>;
    const size_t dkdv_smem = sizeof(float) * (4 * kGenRows * ld + 2 * kGenRows);
    SPW_RETURN_IF_ERROR(allow_smem(dkdv, dkdv_smem));
    dkdv<<<n_tiles * batch * hkv, kGenThreads, dkdv_smem, stream>>>(dk, dv, dout, q, k, v, lse, delta, seq, hq,
                                                                     hkv, d, n_tiles, batch * hkv, scale);
    SPW_RETURN_IF_ERROR(CUDA_LAUNCH_CHECK("attention_backward_dkdv_generic_kernel"));
    const auto dqk = attention_backward_dq_generic_kernel<NC>;
    const size_t dq_smem = sizeof(float) * 4 * kGenRows * ld;
    SPW_RETURN_IF_ERROR(allow_smem(dqk, dq_smem));
    dqk<<<n_tiles * batch * hq, kGenThreads, dq_smem, stream>>>(dq, dout, q, k, v, lse, delta, seq, hq, hkv, d,
                                                                 n_tiles, batch * hq, scale);
    return CUDA_LAUNCH_CHECK("attention_backward_dq_generic_kernel");
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers

Status attention_forward_path(AttentionPath path, bf16* out, float* lse, const bf16* q, const bf16* k,
                              const bf16* v, int batch, int seq, int hq, int hkv, int head_dim,
                              cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_shape("attention_forward", batch, seq, hq, hkv, head_dim));
  if (path == AttentionPath::kFlash) {
    return invalid_argument("attention_forward: no flash kernels yet for head_dim " + std::to_string(head_dim));
  }
  if (batch == 0 || seq == 0) return Status::ok_status();
  return forward_generic(out, lse, q, k, v, batch, seq, hq, hkv, head_dim, stream);
}

Status attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int batch, int seq,
                         int hq, int hkv, int head_dim, cudaStream_t stream) {
  return attention_forward_path(AttentionPath::kAuto, out, lse, q, k, v, batch, seq, hq, hkv, head_dim, stream);
}

size_t attention_backward_scratch_floats(int batch, int seq, int hq, int hkv, int head_dim) {
  return static_cast<size_t>(batch) * hq * seq;  // delta[b, hq, t]
}

Status attention_backward_path(AttentionPath path, bf16* dq, bf16* dk, bf16* dv, const bf16* dout,
                               const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
                               int batch, int seq, int hq, int hkv, int head_dim, float* scratch,
                               size_t scratch_floats, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_shape("attention_backward", batch, seq, hq, hkv, head_dim));
  if (path == AttentionPath::kFlash) {
    return invalid_argument("attention_backward: no flash kernels yet for head_dim " + std::to_string(head_dim));
  }
  if (batch == 0 || seq == 0) return Status::ok_status();
  const size_t need = attention_backward_scratch_floats(batch, seq, hq, hkv, head_dim);
  if (scratch_floats < need) {
    return invalid_argument("attention_backward: scratch of " + std::to_string(scratch_floats) + " floats, needs " +
                            std::to_string(need));
  }
  float* delta = scratch;  // [b, hq, t]
  SPW_RETURN_IF_ERROR(launch_delta(delta, dout, out, batch, seq, hq, head_dim, stream));
  return backward_generic(dq, dk, dv, dout, q, k, v, lse, delta, batch, seq, hq, hkv, head_dim, stream);
}

Status attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                          const bf16* v, const bf16* out, const float* lse, int batch, int seq, int hq, int hkv,
                          int head_dim, float* scratch, size_t scratch_floats, cudaStream_t stream) {
  return attention_backward_path(AttentionPath::kAuto, dq, dk, dv, dout, q, k, v, out, lse, batch, seq, hq, hkv,
                                 head_dim, scratch, scratch_floats, stream);
}

}  // namespace spillway::cuda
