// The ragged index and statistics moves of cudnn-ragged.cuh.
#include <cub/block/block_scan.cuh>

#include "compute/cuda/cudnn-ragged.cuh"

namespace spillway::cuda {

namespace {

constexpr int kIndexThreads = 1024;

__device__ bool starts_example(const int32_t* positions, int64_t i, int seq) {
  return i % seq == 0 || positions[i] == 0;
}

// One block: each thread counts the examples starting in its span of tokens, a block scan ranks
// them, each thread writes its examples' first tokens, then the entries are filled from those.
__global__ void ragged_index_kernel(const int32_t* positions, int64_t tokens, int seq,
                                    int64_t q_row, int64_t kv_row, int entries, int chunk,
                                    int max_length, int32_t* index, int* violation) {
  using Scan = cub::BlockScan<int, kIndexThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int total;
  const int per = static_cast<int>((tokens + kIndexThreads - 1) / kIndexThreads);
  const int64_t begin = static_cast<int64_t>(threadIdx.x) * per;
  const int64_t end = begin + per < tokens ? begin + per : tokens;
  int count = 0;
  for (int64_t i = begin; i < end; ++i) count += starts_example(positions, i, seq);
  int rank = 0;
  Scan(scan).ExclusiveSum(count, rank);
  if (threadIdx.x == kIndexThreads - 1) total = rank + count;
  for (int64_t i = begin; i < end; ++i) {
    if (!starts_example(positions, i, seq)) continue;
    if (rank < entries)
      index[cudnn_ragged_slot(chunk, rank / chunk, 3, rank % chunk)] = static_cast<int32_t>(i);
    ++rank;
  }
  __syncthreads();
  const int examples = total;
  if (threadIdx.x == 0 && violation != nullptr && examples > entries) violation[0] = examples;
  auto first_of = [&](int e) -> int64_t {
    return index[cudnn_ragged_slot(chunk, e / chunk, 3, e % chunk)];
  };
  // cudnn_ragged_fill rewrites a real sequence's first token with the value read here (another
  // thread may read it at the same time: the same bits either way) and an empty one's, which no
  // thread reads, with the end.
  for (int e = threadIdx.x; e < entries; e += kIndexThreads) {
    const bool real = e < examples;
    const int64_t first = real ? first_of(e) : tokens;
    const int64_t next = e + 1 < examples && e + 1 < entries ? first_of(e + 1) : tokens;
    const int64_t length = cudnn_ragged_fill(index, chunk, entries, e, real, first, next, tokens,
                                             q_row, kv_row, max_length);
    if (length > max_length && violation != nullptr) {
      atomicMax(&violation[1], static_cast<int>(length));
    }
  }
}

// One thread per (sequence, head, token) of a chunk's stats.
__global__ void ragged_stats_kernel(float* lse, float* stats, const int32_t* chunk_index, int chunk,
                                    int hq, int length, int seq, bool to_lse) {
  const int64_t n = static_cast<int64_t>(chunk) * hq * length;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int s = static_cast<int>(i % length);
  const int h = static_cast<int>(i / length % hq);
  const int e = static_cast<int>(i / length / hq);
  const int len = chunk_index[cudnn_ragged_slot(chunk, 0, 0, e)];
  if (s >= len) {
    if (!to_lse) stats[i] = 0.0f;
    return;
  }
  const int64_t token = static_cast<int64_t>(chunk_index[cudnn_ragged_slot(chunk, 0, 3, e)]) + s;
  const int64_t row = token / seq, pos = token % seq;
  float* at = lse + (row * hq + h) * seq + pos;
  if (to_lse) {
    *at = stats[i];
  } else {
    stats[i] = *at;
  }
}

}  // namespace

Status ragged_index(const int32_t* positions, int batch, int seq, int hq, int hkv, int head_dim,
                    int entries, int chunk, int max_length, int32_t* index, int* violation,
                    cudaStream_t stream) {
  const int64_t tokens = static_cast<int64_t>(batch) * seq;
  ragged_index_kernel<<<1, kIndexThreads, 0, stream>>>(
      positions, tokens, seq, static_cast<int64_t>(hq) * head_dim,
      static_cast<int64_t>(hkv) * head_dim, entries, chunk, max_length, index, violation);
  return CUDA_LAUNCH_CHECK("ragged_index_kernel");
}

Status ragged_stats_scatter(float* lse, const float* stats, const int32_t* chunk_index, int chunk,
                            int hq, int length, int seq, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(chunk) * hq * length;
  ragged_stats_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(
      lse, const_cast<float*>(stats), chunk_index, chunk, hq, length, seq, /*to_lse=*/true);
  return CUDA_LAUNCH_CHECK("ragged_stats_kernel");
}

Status ragged_stats_gather(float* stats, const float* lse, const int32_t* chunk_index, int chunk,
                           int hq, int length, int seq, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(chunk) * hq * length;
  ragged_stats_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(
      const_cast<float*>(lse), stats, chunk_index, chunk, hq, length, seq, /*to_lse=*/false);
  return CUDA_LAUNCH_CHECK("ragged_stats_kernel");
}

}  // namespace spillway::cuda
