// Rotary position embedding in place on x[tokens, heads, head_dim] (HF rotate-half layout): for
// pair i < half = rotary_dim/2 of a head at position p, with a = p · inv_freq[i] and s the
// attention factor (RopeScaling, 1 but for LongRoPE),
//   x[i] ← s·(x[i]·cos a − x[i + half]·sin a),   x[i + half] ← s·(x[i + half]·cos a + x[i]·sin a);
// dims [rotary_dim, head_dim) pass through; the backward rotates by −a (the transpose).
//
// Angles follow the CPU reference bit for bit (cpu/rope.cpp): inv_freq comes from that file's
// rope_inv_freq on the host (float32 as transformers, Llama-3 scaling included) and reaches the
// kernel as a parameter; a = float(p) · inv_freq[i] in fp32; cos and sin are taken in double and
// rounded to float, so positions in the thousands (angles of thousands of radians) keep the
// reference's phase; the table holds float(cos)·s and float(sin)·s (fp32, as the CPU's). A block
// first fills a shared table of cos/sin for its tokens × pairs (one
// angle per (position, pair), shared by every head), then rotates all heads of those tokens with
// 16-byte accesses (8 pairs per thread) when head_dim % 16 == 0.
#include <string>
#include <vector>

#include "compute/cpu/rope.h"
#include "compute/cuda/rope.cuh"
#include "compute/cuda/vec.cuh"

namespace spillway::cuda {

namespace {

constexpr int kMaxPairs = 512;  // head_dim <= 1024; also the shared table's size
constexpr int kThreads = 256;

// inv_freq by value: a kernel parameter, read through the constant cache.
struct RopeFreqs {
  float inv[kMaxPairs];
};

// ---------------------------------------------------------------------------------------------
// kernels

// Block b rotates tokens [b·tile, b·tile + tile) (tile · half <= kMaxPairs); `sign` is +1 for the
// forward, −1 for the backward; `half` pairs of each head of head_dim rotate, `scale` multiplies
// cos and sin. positions: [tokens] (packed rows), or null for t mod seq.
template <int W>
__global__ void __launch_bounds__(kThreads)
    rope_rotate_kernel(bf16* __restrict__ x, const int32_t* __restrict__ positions, size_t tokens,
                       int seq, int heads, int head_dim, int half, int tile, float sign,
                       float scale, const __grid_constant__ RopeFreqs freqs) {
  __shared__ float cos_t[kMaxPairs], sin_t[kMaxPairs];  // [tile, half]
  const size_t t0 = static_cast<size_t>(blockIdx.x) * tile;
  const int nt = static_cast<int>(min(static_cast<size_t>(tile), tokens - t0));
  for (int j = threadIdx.x; j < nt * half; j += blockDim.x) {
    const int tt = j / half, i = j - tt * half;
    const size_t t = t0 + tt;
    const int pos = positions ? positions[t] : static_cast<int>(t % seq);
    const float angle = static_cast<float>(pos) * freqs.inv[i];
    double s, c;
    sincos(static_cast<double>(angle), &s, &c);
    cos_t[j] = __fmul_rn(static_cast<float>(c), scale);
    sin_t[j] = sign * __fmul_rn(static_cast<float>(s), scale);
  }
  __syncthreads();
  // Item e: pairs [i, i + W) of head h of token tt; consecutive items walk a head's pairs, then
  // heads, then tokens, so a warp's accesses are contiguous.
  const int chunks = half / W;
  const int items = nt * heads * chunks;
  for (int e = threadIdx.x; e < items; e += blockDim.x) {
    const int th = e / chunks;  // tt · heads + h
    const int i = (e - th * chunks) * W;
    const int tt = th / heads;
    bf16* v = x + (t0 * heads + th) * static_cast<size_t>(head_dim) + i;
    float a[W], b[W], ra[W], rb[W];
    load_vec(a, v);
    load_vec(b, v + half);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float c = cos_t[tt * half + i + k], s = sin_t[tt * half + i + k];
      ra[k] = a[k] * c - b[k] * s;
      rb[k] = b[k] * c + a[k] * s;
    }
    store_vec(v, ra);
    store_vec(v + half, rb);
  }
}

// ---------------------------------------------------------------------------------------------
// launchers

Status rope(const char* op, bf16* x, int batch, int seq, int heads, int head_dim, float theta,
            const compute::RopeScaling& scaling, const int32_t* positions, float sign,
            cudaStream_t stream) {
  if (batch < 0 || seq < 0 || heads < 0) {
    return invalid_argument(std::string(op) + ": bad shape batch=" + std::to_string(batch) +
                            " seq=" + std::to_string(seq) + " heads=" + std::to_string(heads));
  }
  if (head_dim > 2 * kMaxPairs) {
    return invalid_argument(std::string(op) + ": head_dim=" + std::to_string(head_dim) +
                            " exceeds " + std::to_string(2 * kMaxPairs));
  }
  // Validates head_dim (positive, even), the rotary dim, theta and the scaling.
  Result<std::vector<float>> inv = compute::cpu::rope_inv_freq(head_dim, theta, scaling);
  if (!inv.ok()) return inv.status().with_context(op);
  const size_t tokens = static_cast<size_t>(batch) * seq;
  if (tokens == 0 || heads == 0) return Status::ok_status();
  const int half = compute::cpu::rope_rotary_dim(head_dim, scaling) / 2;
  const float scale = scaling.attention_factor;
  RopeFreqs freqs{};
  for (int i = 0; i < half; ++i) freqs.inv[i] = (*inv)[i];
  const int tile = kMaxPairs / half;
  const unsigned blocks = ceil_div(tokens, tile);
  if (half % kVecWidth == 0 && head_dim % kVecWidth == 0 && aligned16(x)) {
    rope_rotate_kernel<kVecWidth><<<blocks, kThreads, 0, stream>>>(
        x, positions, tokens, seq, heads, head_dim, half, tile, sign, scale, freqs);
  } else {
    rope_rotate_kernel<1><<<blocks, kThreads, 0, stream>>>(
        x, positions, tokens, seq, heads, head_dim, half, tile, sign, scale, freqs);
  }
  return CUDA_LAUNCH_CHECK("rope_rotate_kernel");
}

}  // namespace

Status rope_forward(bf16* x, int batch, int seq, int heads, int head_dim, float theta,
                    const compute::RopeScaling& scaling, const int32_t* positions,
                    cudaStream_t stream) {
  return rope("rope_forward", x, batch, seq, heads, head_dim, theta, scaling, positions, 1.0f,
              stream);
}

Status rope_backward(bf16* dx, int batch, int seq, int heads, int head_dim, float theta,
                     const compute::RopeScaling& scaling, const int32_t* positions,
                     cudaStream_t stream) {
  return rope("rope_backward", dx, batch, seq, heads, head_dim, theta, scaling, positions, -1.0f,
              stream);
}

}  // namespace spillway::cuda
