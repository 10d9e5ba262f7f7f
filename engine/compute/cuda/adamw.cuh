// AdamW (adamw.cu): the HBM state tier's update, bit for bit the CPU optimizer's.
#pragma once

#include "compute/adamw-step.h"
#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// p, m, v [count] fp32 in place from g [count] fp32 · grad_scale, compute/adamw-step.h's operations
// in its order, each an IEEE round-to-nearest intrinsic (__fmul_rn, __fadd_rn, __fsub_rn,
// __fsqrt_rn, __fdiv_rn), which nvcc never contracts into an FMA or approximates (-fmad); the
// module must not be built with --use_fast_math or -ftz=true, which flush subnormals even in the
// _rn intrinsics where the CPU keeps them (tests/gpu: cuda_adamw_ptx reads the PTX to hold this).
// The bits then equal compute::cpu::adamw's. Memory-bound: 16 bytes read and 12 written per
// element. count == 0 does nothing; kInvalidArgument for a null pointer.
Status adamw(float* p, float* m, float* v, const float* g, size_t count, float grad_scale,
             const compute::AdamWCoeffs& k, cudaStream_t stream);

}  // namespace spillway::cuda
