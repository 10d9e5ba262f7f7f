// A kernel that does nothing, compiled for the same architectures as every other kernel of the
// module: if the device has an image of it, it has images of them all.
#include <cuda_runtime.h>

#include "compute/cuda/device-check.cuh"

namespace spillway::cuda {

namespace {
__global__ void noop_kernel() {}
}  // namespace

cudaError_t kernel_image_status() {
  cudaFuncAttributes attributes;
  const cudaError_t e = cudaFuncGetAttributes(&attributes, noop_kernel);
  cudaGetLastError();  // not sticky; keep it from the next launcher's check
  return e;
}

const char* built_architectures() {
  return SPILLWAY_CUDA_ARCHITECTURES;
}

}  // namespace spillway::cuda
