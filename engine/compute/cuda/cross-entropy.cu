// Cross-entropy over a chunk of fp32 logits, with the gradient of the logits (the CPU reference is
// compute/cpu/cross-entropy.cpp; torch.nn.functional.cross_entropy with ignore_index -100).
//
// One block per row. Pass 1 reads the row once for the running (max, Σ exp(x − max)) pair of each
// thread (the online softmax normaliser of Milakov & Gimelshein, 2018, as llm.c's fused
// classifier), copying the logits out on the way when asked; the pairs are combined in a fixed
// order (warp shuffles, then the warps in index order), so the result is deterministic.
// loss = log Σ + max − x[label]. Pass 2 re-reads the row and writes
// dlogits = loss_scale · (exp(x − max) / Σ − onehot(label)) in bf16.
// Rows are read as float4 when the row pointers allow it, with a scalar tail, else scalar.
// A label outside [0, v) that is not -100 cannot be reported from the device without a sync: its
// loss is NaN (the step loss shows it) and its dlogits row zero.
#include <math_constants.h>

#include <cstdint>
#include <string>

#include "compute/cuda/cross-entropy.cuh"

namespace spillway::cuda {

namespace {

constexpr int32_t kIgnoreIndex = -100;
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// Σ exp(x − m) over the elements seen so far, with m their maximum.
struct MaxSum {
  float m;
  float s;
};

// Rescales the sum to a new maximum x_max (a no-op unless it grew); false while every element
// seen is -inf, when there is nothing to add.
__device__ __forceinline__ bool raise_max(MaxSum& t, float x_max) {
  if (x_max > t.m) {
    t.s *= expf(t.m - x_max);  // 0 while t.m is still -inf
    t.m = x_max;
  }
  return t.m != -INFINITY;
}

__device__ __forceinline__ void absorb(MaxSum& t, float4 q) {
  if (raise_max(t, fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)))) {
    t.s += expf(q.x - t.m) + expf(q.y - t.m) + expf(q.z - t.m) + expf(q.w - t.m);
  }
}

__device__ __forceinline__ void absorb(MaxSum& t, float q) {
  if (raise_max(t, q)) t.s += expf(q - t.m);
}

// Commutative bit for bit, so either operand order gives the same pair.
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ MaxSum block_combine(MaxSum t) {
  __shared__ MaxSum warp_part[kWarps];
  __shared__ MaxSum total;
  for (int offset = 16; offset > 0; offset >>= 1) {
    t = combine(t, {__shfl_down_sync(0xffffffffu, t.m, offset),
                    __shfl_down_sync(0xffffffffu, t.s, offset)});
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) warp_part[warp] = t;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum r = warp_part[0];
    for (int i = 1; i < kWarps; ++i) r = combine(r, warp_part[i]);
    total = r;
  }
  __syncthreads();
  return total;
}

__device__ __forceinline__ void store4(bf16* p, float a, float b, float c, float d) {
  struct alignas(8) Bf16x4 {
    __nv_bfloat162 lo, hi;
  };
  *reinterpret_cast<Bf16x4*>(p) = {__floats2bfloat162_rn(a, b), __floats2bfloat162_rn(c, d)};
}

}  // namespace

// ---- kernels ------------------------------------------------------------------------------------

// Block r handles row r: losses[r], dlogits[r, :] and logits_out[r, :] (each when non-null).
__global__ void __launch_bounds__(kThreads) cross_entropy_forward_backward_kernel(
    float* __restrict__ losses, bf16* __restrict__ dlogits, float* __restrict__ logits_out,
    const float* __restrict__ logits, const int32_t* __restrict__ labels, int v, float loss_scale) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * v;
  const float* x = logits + offset;
  float* x_out = logits_out ? logits_out + offset : nullptr;
  bf16* dx = dlogits ? dlogits + offset : nullptr;
  const int label = labels[blockIdx.x];
  const bool ignored = label == kIgnoreIndex;
  const bool valid = label >= 0 && label < v;

  // float4 over the row when every row pointer is aligned for it (fp32 16 bytes, bf16 8 bytes).
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(x_out) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(dx) % 8 == 0;
  const int v4 = vec ? v / 4 : 0;
  const float4* x4 = reinterpret_cast<const float4*>(x);

  if (!valid) {  // ignored (loss 0) or out of range (NaN): no softmax, a zero gradient
    if (threadIdx.x == 0) losses[blockIdx.x] = ignored ? 0.0f : CUDART_NAN_F;
    for (int i = threadIdx.x; i < v4; i += kThreads) {
      if (x_out) reinterpret_cast<float4*>(x_out)[i] = x4[i];
      if (dx) store4(dx + 4 * i, 0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int j = 4 * v4 + threadIdx.x; j < v; j += kThreads) {
      if (x_out) x_out[j] = x[j];
      if (dx) dx[j] = __float2bfloat16_rn(0.0f);
    }
    return;
  }

  // Pass 1: the normaliser (and the copy).
  MaxSum t{-INFINITY, 0.0f};
  for (int i = threadIdx.x; i < v4; i += kThreads) {
    const float4 q = x4[i];
    if (x_out) reinterpret_cast<float4*>(x_out)[i] = q;
    absorb(t, q);
  }
  for (int j = 4 * v4 + threadIdx.x; j < v; j += kThreads) {
    const float q = x[j];
    if (x_out) x_out[j] = q;
    absorb(t, q);
  }
  const MaxSum r = block_combine(t);
  if (threadIdx.x == 0) losses[blockIdx.x] = (r.m - x[label]) + logf(r.s);
  if (!dx) return;

  // Pass 2: dlogits = loss_scale · softmax − loss_scale · onehot.
  const float k = loss_scale / r.s;
  const float m = r.m;
  for (int i = threadIdx.x; i < v4; i += kThreads) {
    const float4 q = x4[i];
    const int j = 4 * i;
    store4(dx + j, expf(q.x - m) * k - (j == label ? loss_scale : 0.0f),
           expf(q.y - m) * k - (j + 1 == label ? loss_scale : 0.0f),
           expf(q.z - m) * k - (j + 2 == label ? loss_scale : 0.0f),
           expf(q.w - m) * k - (j + 3 == label ? loss_scale : 0.0f));
  }
  for (int j = 4 * v4 + threadIdx.x; j < v; j += kThreads) {
    dx[j] = __float2bfloat16_rn(expf(x[j] - m) * k - (j == label ? loss_scale : 0.0f));
  }
}

// ---- launchers ----------------------------------------------------------------------------------

Status cross_entropy_forward_backward(float* losses, bf16* dlogits, float* logits_out,
                                      const float* logits, const int32_t* labels, int rows, int v,
                                      float loss_scale, cudaStream_t stream) {
  if (rows < 0 || v <= 0) {
    return invalid_argument("cross_entropy_forward_backward: bad shape rows=" +
                            std::to_string(rows) + " v=" + std::to_string(v));
  }
  if (rows == 0) return {};
  if (losses == nullptr || logits == nullptr || labels == nullptr) {
    return invalid_argument(
        "cross_entropy_forward_backward: losses, logits and labels are required");
  }
  cross_entropy_forward_backward_kernel<<<rows, kThreads, 0, stream>>>(
      losses, dlogits, logits_out, logits, labels, v, loss_scale);
  return CUDA_LAUNCH_CHECK("cross_entropy_forward_backward_kernel");
}

}  // namespace spillway::cuda
