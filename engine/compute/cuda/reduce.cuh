// Reductions (reduce.cu): the sum of squares behind the global gradient norm.
#pragma once

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// Scratch: sum_squares_scratch_doubles() for any count (cuda-workspace.h; per-chunk partial sums).
// *out (device, one double) = Σ x[i]² for i < count (x fp32, device), squares summed in double in
// an order fixed by `count` alone (reduce.cu), so the same x gives the same bits on any GPU and
// any pointer alignment. Partial sums go to `scratch` (sum_squares_scratch_doubles() doubles);
// count == 0 writes 0. kInvalidArgument for a null pointer or too little scratch.
Status sum_squares(double* out, const float* x, size_t count, double* scratch,
                   size_t scratch_doubles, cudaStream_t stream);

}  // namespace spillway::cuda
