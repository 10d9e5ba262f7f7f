// RMSNorm (transformers' LlamaRMSNorm) forward, the fused residual + RMSNorm forward, and the
// backward.
//
// Forward, one warp per row: rstd = 1 / sqrt(mean(x²) + eps) from an fp32 sum of squares, then
// y = bf16(w · bf16(x · rstd)); with a weight offset o (Gemma3RMSNorm, o = 1) y = bf16((w + o) ·
// x · rstd), all in fp32 as Gemma3RMSNorm computes it. The normalised value is rounded to bf16
// before the weight multiplies it, as transformers does (`self.weight *
// hidden_states.to(input_dtype)`), so the outputs match a bf16 PyTorch model rather than an fp32
// one; the fused kernel normalises the bf16-rounded sum x + r, exactly what it stores. A warp reads
// its row twice: the second pass (to normalise) hits the cache the first filled.
//
// Backward (the fp32 formulas of cpu/rmsnorm.cpp, which ignore the forward's bf16 rounding: it
// is within bf16 tolerance of that forward's true derivative):
//   dx = rstd · dout · w − (rstd³ / d) · Σ_j (dout·w·x)_j · x,   dw += Σ_rows dout · x · rstd,
// with w + o for w in dx under a weight offset o.
// Deterministic: a block owns a fixed range of rows and all d columns (each thread 8 columns,
// held in registers, hence d <= 8192), reduces each row's dot product in a fixed order, and
// writes its column sums of dw to scratch; a second kernel adds those partials per column in a
// fixed order (in double) into dw. No atomics, so the same inputs give the same bits.
#include <algorithm>
#include <string>

#include "compute/cuda/rmsnorm.cuh"
#include "compute/cuda/vec.cuh"

namespace spillway::cuda {

namespace {

constexpr int kForwardWarps = 4;  // rows per forward block
constexpr int kBackwardMaxThreads = 1024;
constexpr int kBackwardMaxCols = 8 * kBackwardMaxThreads;  // 8 columns per thread in registers
constexpr int kMaxRowBlocks = kRmsnormMaxRowBlocks;  // bounds the dw partials to 1024 · d floats
constexpr int kDwRowLanes = 8;  // row-block lanes per column in the dw reduction

// ---------------------------------------------------------------------------------------------
// kernels

// Pass 2 of the forward, by one warp on one row: y = w · bf16(x · rstd), or with a weight offset
// y = (w + offset) · x · rstd unrounded until the store (Gemma3RMSNorm).
template <int W>
__device__ __forceinline__ void rmsnorm_write_row(bf16* y, const bf16* x, const bf16* w, int d,
                                                  float rstd, float offset) {
  for (int c = (threadIdx.x % 32) * W; c < d; c += 32 * W) {
    float v[W], g[W];
    load_vec(v, x + c);
    load_vec(g, w + c);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] *= rstd;
    if (offset == 0.0f) round_bf16(v);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] *= g[k] + offset;
    store_vec(y + c, v);
  }
}

__device__ __forceinline__ float rstd_of(float sum_squares, int d, float eps) {
  return 1.0f / sqrtf(sum_squares / static_cast<float>(d) + eps);
}

template <int W>
__global__ void rmsnorm_forward_kernel(bf16* __restrict__ out, float* __restrict__ rstd,
                                       const bf16* __restrict__ x, const bf16* __restrict__ w,
                                       int n, int d, float eps, float offset) {
  const int row = blockIdx.x * kForwardWarps + threadIdx.x / 32;
  if (row >= n) return;
  const bf16* xr = x + static_cast<size_t>(row) * d;
  float ss = 0.0f;
#pragma unroll 4
  for (int c = (threadIdx.x % 32) * W; c < d; c += 32 * W) {
    float v[W];
    load_vec(v, xr + c);
#pragma unroll
    for (int k = 0; k < W; ++k) ss += v[k] * v[k];
  }
  const float r = rstd_of(warp_sum(ss), d, eps);
  if (rstd != nullptr && threadIdx.x % 32 == 0) rstd[row] = r;
  rmsnorm_write_row<W>(out + static_cast<size_t>(row) * d, xr, w, d, r, offset);
}

// `sum` may alias `x` (hence no __restrict__ on them): each element is read, then written, by the
// same lane, and pass 2 re-reads what that lane wrote.
template <int W>
__global__ void residual_rmsnorm_forward_kernel(bf16* sum, bf16* __restrict__ out,
                                                float* __restrict__ rstd, const bf16* x,
                                                const bf16* __restrict__ r,
                                                const bf16* __restrict__ w, int n, int d, float eps,
                                                float offset) {
  const int row = blockIdx.x * kForwardWarps + threadIdx.x / 32;
  if (row >= n) return;
  const size_t base = static_cast<size_t>(row) * d;
  float ss = 0.0f;
#pragma unroll 4
  for (int c = (threadIdx.x % 32) * W; c < d; c += 32 * W) {
    float a[W], b[W];
    load_vec(a, x + base + c);
    load_vec(b, r + base + c);
#pragma unroll
    for (int k = 0; k < W; ++k) a[k] += b[k];
    round_bf16(a);  // normalise the bf16 sum that is stored
    store_vec(sum + base + c, a);
#pragma unroll
    for (int k = 0; k < W; ++k) ss += a[k] * a[k];
  }
  const float rs = rstd_of(warp_sum(ss), d, eps);
  if (rstd != nullptr && threadIdx.x % 32 == 0) rstd[row] = rs;
  rmsnorm_write_row<W>(out + base, sum + base, w, d, rs, offset);
}

// The block's sum of v, the same on every thread, in a fixed order. `slot` holds one float per
// warp; callers alternate two slots between rows, so one barrier per call suffices.
__device__ __forceinline__ float block_sum(float v, float* slot) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) slot[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) total += slot[i];
  return total;
}

// Block b owns rows [b·rows_per_block, …) and writes dw_partial[b, d] (when dw_partial is set).
// Thread t owns the G groups of W columns starting at (t + k·blockDim)·W, k < G.
template <int W, int G>
__global__ void __launch_bounds__(kBackwardMaxThreads)
    rmsnorm_backward_kernel(bf16* __restrict__ dx, float* __restrict__ dw_partial,
                            const bf16* __restrict__ dout, const bf16* __restrict__ x,
                            const bf16* __restrict__ w, const float* __restrict__ rstd, int n,
                            int d, int rows_per_block, bool accumulate_dx, float offset) {
  __shared__ float warp_dot[2][32];
  auto col = [](int k) { return static_cast<int>((threadIdx.x + k * blockDim.x) * W); };
  float wv[G][W], acc[G][W];
#pragma unroll
  for (int k = 0; k < G; ++k) {
    if (col(k) < d) {
      load_vec(wv[k], w + col(k));
#pragma unroll
      for (int j = 0; j < W; ++j) wv[k][j] += offset;  // the scale the forward applied
    }
#pragma unroll
    for (int j = 0; j < W; ++j) acc[k][j] = 0.0f;
  }
  const int row0 = blockIdx.x * rows_per_block;
  const int row1 = min(n, row0 + rows_per_block);
  for (int row = row0; row < row1; ++row) {
    const size_t base = static_cast<size_t>(row) * d;
    const float r = rstd[row];
    float gv[G][W], xv[G][W];
    float dot = 0.0f;  // this thread's part of Σ dout·w·x
#pragma unroll
    for (int k = 0; k < G; ++k) {
      if (col(k) < d) {
        load_vec(gv[k], dout + base + col(k));
        load_vec(xv[k], x + base + col(k));
#pragma unroll
        for (int j = 0; j < W; ++j) {
          dot += gv[k][j] * wv[k][j] * xv[k][j];
          acc[k][j] += gv[k][j] * xv[k][j] * r;
        }
      }
    }
    if (dx != nullptr) {
      dot = block_sum(dot, warp_dot[(row - row0) & 1]);
      const float coef = r * r * r * dot / static_cast<float>(d);
#pragma unroll
      for (int k = 0; k < G; ++k) {
        if (col(k) < d) {
          float o[W];
          if (accumulate_dx) {
            load_vec(o, dx + base + col(k));
          } else {
#pragma unroll
            for (int j = 0; j < W; ++j) o[j] = 0.0f;
          }
#pragma unroll
          for (int j = 0; j < W; ++j) o[j] += r * gv[k][j] * wv[k][j] - coef * xv[k][j];
          store_vec(dx + base + col(k), o);
        }
      }
    }
  }
  if (dw_partial == nullptr) return;
#pragma unroll
  for (int k = 0; k < G; ++k) {
    if (col(k) < d) store_vec(dw_partial + static_cast<size_t>(blockIdx.x) * d + col(k), acc[k]);
  }
}

// dw[c] += Σ_b dw_partial[b, c] in a fixed order, in double: blockDim (32 columns, kDwRowLanes
// lanes); lane l sums b = l, l + kDwRowLanes, … in turn, then the lane sums add in lane order.
__global__ void rmsnorm_backward_dw_kernel(float* __restrict__ dw,
                                           const float* __restrict__ dw_partial, int row_blocks,
                                           int d) {
  __shared__ double lane_sum[kDwRowLanes][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  double s = 0.0;
  if (c < d) {
    for (int b = threadIdx.y; b < row_blocks; b += kDwRowLanes)
      s += dw_partial[static_cast<size_t>(b) * d + c];
  }
  lane_sum[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= d) return;
  double total = 0.0;
  for (int l = 0; l < kDwRowLanes; ++l) total += lane_sum[l][threadIdx.x];
  dw[c] += static_cast<float>(total);
}

// ---------------------------------------------------------------------------------------------
// launchers

Status check_shape(const char* op, int n, int d) {
  if (n < 0 || d <= 0) {
    return invalid_argument(std::string(op) + ": bad shape n=" + std::to_string(n) +
                            " d=" + std::to_string(d));
  }
  return Status::ok_status();
}

Status check_forward(const char* op, int n, int d, float eps) {
  SPW_RETURN_IF_ERROR(check_shape(op, n, d));
  if (!(eps >= 0.0f))
    return invalid_argument(std::string(op) + ": eps must be >= 0, got " + std::to_string(eps));
  return Status::ok_status();
}

unsigned forward_blocks(int n) {
  return ceil_div(n, kForwardWarps);
}

// Rows per backward block: at most kMaxRowBlocks blocks.
int backward_rows_per_block(int n) {
  return static_cast<int>(ceil_div(n, std::min(n, kMaxRowBlocks)));
}

}  // namespace

Status rmsnorm_forward(bf16* out, float* rstd, const bf16* x, const bf16* w, int n, int d,
                       float eps, float weight_offset, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_forward("rmsnorm_forward", n, d, eps));
  if (n == 0) return Status::ok_status();
  if (d % kVecWidth == 0 && aligned16(out, x, w)) {
    rmsnorm_forward_kernel<kVecWidth><<<forward_blocks(n), 32 * kForwardWarps, 0, stream>>>(
        out, rstd, x, w, n, d, eps, weight_offset);
  } else {
    rmsnorm_forward_kernel<1><<<forward_blocks(n), 32 * kForwardWarps, 0, stream>>>(
        out, rstd, x, w, n, d, eps, weight_offset);
  }
  return CUDA_LAUNCH_CHECK("rmsnorm_forward_kernel");
}

Status residual_rmsnorm_forward(bf16* sum, bf16* out, float* rstd, const bf16* x, const bf16* r,
                                const bf16* w, int n, int d, float eps, float weight_offset,
                                cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_forward("residual_rmsnorm_forward", n, d, eps));
  if (n == 0) return Status::ok_status();
  if (d % kVecWidth == 0 && aligned16(sum, out, x, r, w)) {
    residual_rmsnorm_forward_kernel<kVecWidth>
        <<<forward_blocks(n), 32 * kForwardWarps, 0, stream>>>(sum, out, rstd, x, r, w, n, d, eps,
                                                               weight_offset);
  } else {
    residual_rmsnorm_forward_kernel<1><<<forward_blocks(n), 32 * kForwardWarps, 0, stream>>>(
        sum, out, rstd, x, r, w, n, d, eps, weight_offset);
  }
  return CUDA_LAUNCH_CHECK("residual_rmsnorm_forward_kernel");
}

Status rmsnorm_backward(bf16* dx, float* dw, const bf16* dout, const bf16* x, const bf16* w,
                        const float* rstd, int n, int d, bool accumulate_dx, float weight_offset,
                        float* scratch, size_t scratch_floats, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_shape("rmsnorm_backward", n, d));
  if (d > kBackwardMaxCols) {
    return invalid_argument("rmsnorm_backward: d=" + std::to_string(d) + " exceeds " +
                            std::to_string(kBackwardMaxCols));
  }
  if (n == 0) return Status::ok_status();
  const int rows_per_block = backward_rows_per_block(n);
  const unsigned row_blocks = ceil_div(n, rows_per_block);
  float* partial = nullptr;  // [row_blocks, d]
  if (dw != nullptr) {
    const size_t need = rmsnorm_backward_scratch_floats(n, d);
    if (scratch == nullptr || scratch_floats < need) {
      return invalid_argument("rmsnorm_backward: scratch of " + std::to_string(scratch_floats) +
                              " floats, needs " + std::to_string(need));
    }
    partial = scratch;
  }
  // Each thread holds 8 columns: one 16-byte group, or 8 strided columns when d is not a multiple
  // of 8 (1 when d <= 1024 fits a column per thread).
  const bool vec = d % kVecWidth == 0 && aligned16(dx, dout, x, w);
  auto threads_for = [](int columns_per_thread, int cols) {
    return static_cast<int>(ceil_div(ceil_div(cols, columns_per_thread), 32)) * 32;
  };
  if (vec) {
    rmsnorm_backward_kernel<kVecWidth, 1><<<row_blocks, threads_for(kVecWidth, d), 0, stream>>>(
        dx, partial, dout, x, w, rstd, n, d, rows_per_block, accumulate_dx, weight_offset);
  } else if (d <= kBackwardMaxThreads) {
    rmsnorm_backward_kernel<1, 1><<<row_blocks, threads_for(1, d), 0, stream>>>(
        dx, partial, dout, x, w, rstd, n, d, rows_per_block, accumulate_dx, weight_offset);
  } else {
    rmsnorm_backward_kernel<1, 8><<<row_blocks, threads_for(8, d), 0, stream>>>(
        dx, partial, dout, x, w, rstd, n, d, rows_per_block, accumulate_dx, weight_offset);
  }
  SPW_RETURN_IF_ERROR(CUDA_LAUNCH_CHECK("rmsnorm_backward_kernel"));
  if (dw == nullptr) return Status::ok_status();
  rmsnorm_backward_dw_kernel<<<ceil_div(d, 32), dim3(32, kDwRowLanes), 0, stream>>>(dw, partial,
                                                                                    row_blocks, d);
  return CUDA_LAUNCH_CHECK("rmsnorm_backward_dw_kernel");
}

}  // namespace spillway::cuda
