// Token embedding: the forward gathers rows (out[t, :] = table[ids[t], :] · scale); the backward
// scatters them back (dtable[ids[t], :] += dout[t, :] · scale, fp32). scale is 1 but for Gemma's
// scaled word embedding; the forward's product is rounded to bf16 once.
//
// The backward is deterministic without atomics and without scratch: every element of dtable has
// one owning thread, which adds the tokens that hit its row in token order, exactly as the CPU
// reference does (so duplicate ids sum in token order and the bits match it). Ownership splits two
// ways for parallelism: blocks split the columns into chunks and the rows into `parts` classes
// (id mod parts). Each block scans all ids in tiles, compacts the tokens of its class into shared
// memory in token order, and each thread walks that list for its columns, keeping the current row
// in registers while consecutive tokens repeat its id (frequent tokens then cost no reload).
#include <algorithm>
#include <string>

#include "compute/cuda/embedding.cuh"
#include "compute/cuda/vec.cuh"

namespace spillway::cuda {

namespace {

// Backward: threads per block, tokens per scanned tile (a multiple of the block), list entries a
// thread prefetches at once, and the blocks the grid aims at (about 8 per SM on an H100).
constexpr int kBackwardThreads = 128;
constexpr int kTileTokens = 1024;
constexpr int kTokensPerThread = kTileTokens / kBackwardThreads;
constexpr int kPrefetch = 4;
constexpr int kBackwardTargetBlocks = 1024;

// ---------------------------------------------------------------------------------------------
// kernels

// blockDim (x: column groups of W, y: rows); grid (x: row blocks, y: column blocks).
template <int W>
__global__ void embedding_forward_kernel(bf16* __restrict__ out, const int32_t* __restrict__ ids,
                                         const bf16* __restrict__ table, int n, int d,
                                         float scale) {
  const int t = blockIdx.x * blockDim.y + threadIdx.y;
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * W;
  if (t >= n || c >= d) return;
  const bf16* src = table + static_cast<size_t>(ids[t]) * d + c;
  bf16* dst = out + static_cast<size_t>(t) * d + c;
  if (scale != 1.0f) {
    float v[W];
    load_vec(v, src);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] *= scale;
    store_vec(dst, v);
  } else if constexpr (W == kVecWidth) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  } else {
    *dst = *src;
  }
}

// grid (x: id class p of `parts`, y: column block); thread owns columns [c, c + W) of the rows
// whose id % parts == p.
template <int W>
__global__ void __launch_bounds__(kBackwardThreads)
    embedding_backward_kernel(float* __restrict__ dtable, const int32_t* __restrict__ ids,
                              const bf16* __restrict__ dout, int n, int d, int parts, float scale) {
  __shared__ int tok[kTileTokens];  // this tile's tokens of class p, in token order
  __shared__ int tok_id[kTileTokens];
  __shared__ int warp_total[kBackwardThreads / 32];

  const unsigned p = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int c = (blockIdx.y * kBackwardThreads + threadIdx.x) * W;
  const bool owns_columns = c < d;

  int cur = -1;  // the row held in acc, not yet stored
  float acc[W];
  for (int t0 = 0; t0 < n; t0 += kTileTokens) {
    // Compact: this thread checks tokens [first, first + kTokensPerThread); an exclusive scan of
    // the counts over the block gives where they go, so the list stays in token order.
    const int first = t0 + threadIdx.x * kTokensPerThread;
    unsigned hits = 0;
#pragma unroll
    for (int k = 0; k < kTokensPerThread; ++k) {
      const int t = first + k;
      if (t < n && static_cast<unsigned>(ids[t]) % static_cast<unsigned>(parts) == p)
        hits |= 1u << k;
    }
    const int count = __popc(hits);
    int offset = count;  // inclusive scan within the warp
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, offset, m);
      if (lane >= m) offset += v;
    }
    if (lane == 31) warp_total[warp] = offset;
    __syncthreads();
    offset -= count;
    int total = 0;
#pragma unroll
    for (int w = 0; w < kBackwardThreads / 32; ++w) {
      if (w < warp) offset += warp_total[w];
      total += warp_total[w];
    }
    for (int k = 0; k < kTokensPerThread; ++k) {
      if (hits & (1u << k)) {
        tok[offset] = first + k;
        tok_id[offset] = ids[first + k];
        ++offset;
      }
    }
    __syncthreads();

    if (owns_columns) {
      // Walk the list in token order, kPrefetch entries at a time: their dout loads are issued
      // together; the dtable updates then follow one by one.
      for (int e0 = 0; e0 < total; e0 += kPrefetch) {
        float g[kPrefetch][W];
        int id[kPrefetch];
#pragma unroll
        for (int u = 0; u < kPrefetch; ++u) {
          if (e0 + u < total) {
            id[u] = tok_id[e0 + u];
            load_vec(g[u], dout + static_cast<size_t>(tok[e0 + u]) * d + c);
          }
        }
#pragma unroll
        for (int u = 0; u < kPrefetch; ++u) {
          if (e0 + u < total) {
            if (id[u] != cur) {
              if (cur >= 0) store_vec(dtable + static_cast<size_t>(cur) * d + c, acc);
              cur = id[u];
              load_vec(acc, dtable + static_cast<size_t>(cur) * d + c);
            }
#pragma unroll
            for (int k = 0; k < W; ++k) acc[k] += g[u][k] * scale;
          }
        }
      }
    }
    __syncthreads();  // the next tile overwrites the list and warp_total
  }
  if (owns_columns && cur >= 0) store_vec(dtable + static_cast<size_t>(cur) * d + c, acc);
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

}  // namespace

Status embedding_forward(bf16* out, const int32_t* ids, const bf16* table, int n, int d,
                         float scale, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_shape("embedding_forward", n, d));
  if (n == 0) return Status::ok_status();
  const bool vec = d % kVecWidth == 0 && aligned16(out, table);
  const int w = vec ? kVecWidth : 1;
  const int groups = d / w;  // column groups per row
  // 256 threads: x over a row's groups (a multiple of the warp), y over rows.
  const int tx = std::min(256, (groups + 31) / 32 * 32);
  const int ty = 256 / tx;
  const dim3 block(tx, ty);
  const dim3 grid(ceil_div(n, ty), ceil_div(groups, tx));
  if (vec) {
    embedding_forward_kernel<kVecWidth><<<grid, block, 0, stream>>>(out, ids, table, n, d, scale);
  } else {
    embedding_forward_kernel<1><<<grid, block, 0, stream>>>(out, ids, table, n, d, scale);
  }
  return CUDA_LAUNCH_CHECK("embedding_forward_kernel");
}

Status embedding_backward(float* dtable, const int32_t* ids, const bf16* dout, int n, int d,
                          float scale, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_shape("embedding_backward", n, d));
  if (n == 0) return Status::ok_status();
  const bool vec = d % kVecWidth == 0 && aligned16(dtable, dout);
  const int w = vec ? kVecWidth : 1;
  const unsigned column_blocks = ceil_div(d, static_cast<size_t>(kBackwardThreads) * w);
  // As many id classes as keep the grid near its target; more than n would leave classes empty.
  const int parts = static_cast<int>(
      std::clamp<size_t>(kBackwardTargetBlocks / column_blocks, 1, static_cast<size_t>(n)));
  const dim3 grid(parts, column_blocks);
  if (vec) {
    embedding_backward_kernel<kVecWidth>
        <<<grid, kBackwardThreads, 0, stream>>>(dtable, ids, dout, n, d, parts, scale);
  } else {
    embedding_backward_kernel<1>
        <<<grid, kBackwardThreads, 0, stream>>>(dtable, ids, dout, n, d, parts, scale);
  }
  return CUDA_LAUNCH_CHECK("embedding_backward_kernel");
}

}  // namespace spillway::cuda
