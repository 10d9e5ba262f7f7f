// Vector loads and stores for the memory-bound kernels (internal to cuda/): W elements at a time
// as fp32 registers, one 16-byte global access per 8 bf16 (two for 8 floats) when W == 8, plain
// element accesses when W == 1. A kernel is instantiated for W = 8 when every pointer it touches
// is 16-byte aligned and its row length (if any) is a multiple of 8, else for W = 1; the launcher
// decides with aligned16.
#pragma once

#include <cstdint>

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

inline constexpr int kVecWidth = 8;  // bf16 per 16-byte access

// True when every pointer is 16-byte aligned (null pointers count as aligned).
template <class... T>
inline bool aligned16(const T*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

template <int W>
__device__ __forceinline__ void load_vec(float (&v)[W], const bf16* p) {
  static_assert(W == 1 || W == kVecWidth);
  if constexpr (W == kVecWidth) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < W / 2; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      v[2 * k] = f.x;
      v[2 * k + 1] = f.y;
    }
  } else {
    v[0] = __bfloat162float(*p);
  }
}

template <int W>
__device__ __forceinline__ void load_vec(float (&v)[W], const float* p) {
  static_assert(W == 1 || W == kVecWidth);
  if constexpr (W == kVecWidth) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    v[0] = *p;
  }
}

// Rounds to nearest even, as torch's .to(torch.bfloat16).
template <int W>
__device__ __forceinline__ void store_vec(bf16* p, const float (&v)[W]) {
  static_assert(W == 1 || W == kVecWidth);
  if constexpr (W == kVecWidth) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < W / 2; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    *reinterpret_cast<uint4*>(p) = u;
  } else {
    *p = __float2bfloat16_rn(v[0]);
  }
}

template <int W>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[W]) {
  static_assert(W == 1 || W == kVecWidth);
  if constexpr (W == kVecWidth) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    *p = v[0];
  }
}

// Rounds each element to bf16 and back: the value a bf16 tensor would hold.
template <int W>
__device__ __forceinline__ void round_bf16(float (&v)[W]) {
#pragma unroll
  for (int k = 0; k < W; ++k) v[k] = __bfloat162float(__float2bfloat16_rn(v[k]));
}

// The sum over the 32 lanes, in the same butterfly order on every call (deterministic); every
// lane gets it.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

}  // namespace spillway::cuda
