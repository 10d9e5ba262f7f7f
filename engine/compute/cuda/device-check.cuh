// Whether the current device can run this module's kernels (device-check.cu). A module built for
// sm_90 has no code an sm_86 GPU can run, and every launch would fail with "no kernel image";
// CudaBackend::create asks once, up front, so the user gets one clear message instead.
#pragma once

#include <cuda_runtime_api.h>

namespace spillway::cuda {

// cudaSuccess when the current device has a kernel image (SASS for its architecture, or PTX it can
// JIT) in this module; cudaErrorNoKernelImageForDevice otherwise.
cudaError_t kernel_image_status();
// The CUDA architectures the module was compiled for (CMAKE_CUDA_ARCHITECTURES), e.g. "90".
const char* built_architectures();

}  // namespace spillway::cuda
