#include <algorithm>

#include "compute/cuda/adamw.cuh"
#include "compute/cuda/vec.cuh"

namespace spillway::cuda {
namespace {

constexpr int kThreads = 256;

// compute::adamw_element, operation for operation (compute/adamw-step.h).
__device__ __forceinline__ void update_element(float& p, float& m, float& v, float grad,
                                               float grad_scale, const compute::AdamWCoeffs& k) {
  const float g = __fmul_rn(grad, grad_scale);
  p = __fmul_rn(p, k.decay_mul);
  m = __fadd_rn(m, __fmul_rn(__fsub_rn(g, m), k.one_minus_b1));
  v = __fadd_rn(__fmul_rn(v, k.b2), __fmul_rn(__fmul_rn(k.one_minus_b2, g), g));
  const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), k.inv_bc2_sqrt), k.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(k.step_size, m), denom));
}

// Grid-stride over groups of four elements (float4 loads when all four arrays are 16-byte
// aligned), the tail element by element.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                 const float* __restrict__ g, size_t count, float grad_scale,
                 compute::AdamWCoeffs k) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVec) {
    const size_t groups = count / 4;
    for (; i < groups; i += stride) {
      float4 pp = reinterpret_cast<float4*>(p)[i], mm = reinterpret_cast<float4*>(m)[i],
             vv = reinterpret_cast<float4*>(v)[i];
      const float4 gg = reinterpret_cast<const float4*>(g)[i];
      update_element(pp.x, mm.x, vv.x, gg.x, grad_scale, k);
      update_element(pp.y, mm.y, vv.y, gg.y, grad_scale, k);
      update_element(pp.z, mm.z, vv.z, gg.z, grad_scale, k);
      update_element(pp.w, mm.w, vv.w, gg.w, grad_scale, k);
      reinterpret_cast<float4*>(p)[i] = pp;
      reinterpret_cast<float4*>(m)[i] = mm;
      reinterpret_cast<float4*>(v)[i] = vv;
    }
    i = groups * 4 + static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  }
  for (; i < count; i += stride) update_element(p[i], m[i], v[i], g[i], grad_scale, k);
}

}  // namespace

Status adamw(float* p, float* m, float* v, const float* g, size_t count, float grad_scale,
             const compute::AdamWCoeffs& k, cudaStream_t stream) {
  if (count == 0) return Status::ok_status();
  if (!p || !m || !v || !g) return invalid_argument("adamw: null pointer (param, m, v or grad)");
  const bool vec = aligned16(p, m, v, g);
  // Enough blocks to fill an H100 several times over; the grid stride covers the rest.
  const size_t work = vec ? count / 4 : count;
  const unsigned blocks =
      static_cast<unsigned>(std::clamp<size_t>((work + kThreads - 1) / kThreads, 1, 4096));
  if (vec) {
    adamw_kernel<true><<<blocks, kThreads, 0, stream>>>(p, m, v, g, count, grad_scale, k);
  } else {
    adamw_kernel<false><<<blocks, kThreads, 0, stream>>>(p, m, v, g, count, grad_scale, k);
  }
  return CUDA_LAUNCH_CHECK("adamw_kernel");
}

}  // namespace spillway::cuda
