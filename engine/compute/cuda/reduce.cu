// The sum of squares Σ x² of an fp32 vector in double, for the global gradient norm: each block's
// gradient is reduced on the device when its backward is done, so the norm needs no pass over the
// host gradients (27 GB for a 7B model) between steps.
//
// Deterministic, two stages with no atomics, and an order that depends on `count` alone (not on
// the GPU, the grid or the pointer's alignment):
//   1. x is cut into P = min(1024, ceil(count / 16384)) chunks of `chunk` elements (a multiple of
//      4; the last chunk may be shorter). Block p sums chunk p: its 4-element groups are dealt to
//      the 256 threads round-robin, and thread t adds the squares of groups t, t + 256, t + 512,
//      ... in that order, each group's 4 elements in order; then the 256 sums are combined by a
//      fixed butterfly in each warp and the 8 warp sums by a fixed butterfly in warp 0. The result
//      is partial[p].
//   2. One block sums partial[0..P) the same way (thread t: partials t, t + 256, ...).
// Squares are exact in double (24-bit significands), so fused multiply-adds give the same bits as
// separate ones. Groups are loaded as one float4 when x is 16-byte aligned and element by element
// otherwise (or at the ragged end): the same values in the same order either way. Each thread
// loads 4 groups (64 bytes) before it adds them, so that the bytes in flight (over 10 MB when the
// grid fills an H100) well exceed HBM3's bandwidth-latency product (a few MB): the pass streams
// at memory bandwidth, about 0.3 ms for a 7B layer's 0.8 GB of fp32 gradients.
#include <algorithm>
#include <string>

#include "compute/cuda/reduce.cuh"
#include "compute/cuda/vec.cuh"

namespace spillway::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 4;            // elements per float4
constexpr int kUnroll = 4;           // groups in flight per thread
constexpr size_t kMinChunk = 16384;  // elements per partial sum, at least: 64 KiB of fp32
constexpr size_t kMaxPartials =
    kSumSquaresMaxPartials;  // about one wave of 256-thread blocks on an H100

// ---------------------------------------------------------------------------------------------
// kernels

// The sum over the 32 lanes in a fixed butterfly order; every lane gets it.
__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// The sum of `v` over the block's kThreads threads in a fixed order, valid in thread 0.
__device__ __forceinline__ double block_sum(double v) {
  __shared__ double warp_sums[kWarps];
  v = warp_sum_double(v);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) v = warp_sum_double(threadIdx.x < kWarps ? warp_sums[threadIdx.x] : 0.0);
  return v;
}

// Elements [i, i + 4) of x, those at or past `end` as 0 (whose squares add nothing).
template <bool kVec>
__device__ __forceinline__ float4 load_group(const float* __restrict__ x, size_t i, size_t end) {
  if (kVec && i + kGroup <= end) return *reinterpret_cast<const float4*>(x + i);
  float v[kGroup];
#pragma unroll
  for (int k = 0; k < kGroup; ++k) v[k] = i + k < end ? x[i + k] : 0.0f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ double add_squares(double acc, float4 v) {
  const double a = v.x, b = v.y, c = v.z, d = v.w;
  acc += a * a;
  acc += b * b;
  acc += c * c;
  acc += d * d;
  return acc;
}

// Stage 1: partials[p] = the sum of squares of chunk p = x[p·chunk, min(count, (p+1)·chunk)).
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    sum_squares_partial_kernel(double* __restrict__ partials, const float* __restrict__ x,
                               size_t count, size_t chunk) {
  const size_t begin = static_cast<size_t>(blockIdx.x) * chunk;
  const size_t end = min(count, begin + chunk);
  const size_t groups = (end - begin + kGroup - 1) / kGroup;
  double acc = 0.0;
  for (size_t g0 = threadIdx.x; g0 < groups; g0 += kThreads * kUnroll) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t g = g0 + static_cast<size_t>(u) * kThreads;
      v[u] = g < groups ? load_group<kVec>(x, begin + g * kGroup, end)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc = add_squares(acc, v[u]);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Stage 2: *out = Σ partials[0..n), by one block.
__global__ void __launch_bounds__(kThreads)
    sum_squares_final_kernel(double* __restrict__ out, const double* __restrict__ partials,
                             unsigned n) {
  double acc = 0.0;
  for (unsigned p = threadIdx.x; p < n; p += kThreads) acc += partials[p];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out = acc;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers

Status sum_squares(double* out, const float* x, size_t count, double* scratch,
                   size_t scratch_doubles, cudaStream_t stream) {
  if (out == nullptr || (count > 0 && x == nullptr)) {
    return invalid_argument("sum_squares: null pointer (out or x)");
  }
  if (scratch == nullptr || scratch_doubles < kMaxPartials) {
    return invalid_argument("sum_squares: scratch of " + std::to_string(scratch_doubles) +
                            " doubles, needs " + std::to_string(kMaxPartials));
  }
  unsigned partials = 0;
  if (count > 0) {
    const size_t wanted = std::min(kMaxPartials, (count + kMinChunk - 1) / kMinChunk);
    const size_t chunk = ((count + wanted - 1) / wanted + kGroup - 1) / kGroup * kGroup;
    partials = ceil_div(count, chunk);
    if (aligned16(x)) {
      sum_squares_partial_kernel<true><<<partials, kThreads, 0, stream>>>(scratch, x, count, chunk);
    } else {
      sum_squares_partial_kernel<false>
          <<<partials, kThreads, 0, stream>>>(scratch, x, count, chunk);
    }
    SPW_RETURN_IF_ERROR(CUDA_LAUNCH_CHECK("sum_squares_partial_kernel"));
  }
  sum_squares_final_kernel<<<1, kThreads, 0, stream>>>(out, scratch, partials);
  return CUDA_LAUNCH_CHECK("sum_squares_final_kernel");
}

}  // namespace spillway::cuda
