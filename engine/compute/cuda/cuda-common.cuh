// Shared by the CUDA kernels and launchers: the bf16 type, CUDA_CHECK / CUBLAS_CHECK that turn a
// failed call into a Status naming the statement, file and line (as ggml's), and the launcher's
// closing check.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "compute/cuda-workspace.h"
#include "core/status.h"

namespace spillway::cuda {

using bf16 = __nv_bfloat16;

inline Status cuda_status(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return {};
  std::string msg = std::string("CUDA error ") + cudaGetErrorName(e) + " (" +
                    cudaGetErrorString(e) + ") in " + what + " at " + file + ":" +
                    std::to_string(line);
  if (e == cudaErrorMemoryAllocation) return out_of_memory(msg);
  return internal_error(msg);
}

// The launcher's last line: reports a launch failure (bad configuration, too much shared memory).
inline Status launch_status(const char* kernel, const char* file, int line) {
  return cuda_status(cudaGetLastError(), kernel, file, line);
}

inline unsigned ceil_div(size_t a, size_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

}  // namespace spillway::cuda

#define CUDA_CHECK(stmt)                                                   \
  do {                                                                     \
    if (cudaError_t e_ = (stmt); e_ != cudaSuccess)                        \
      return ::spillway::cuda::cuda_status(e_, #stmt, __FILE__, __LINE__); \
  } while (0)

#define CUDA_LAUNCH_CHECK(kernel) ::spillway::cuda::launch_status(kernel, __FILE__, __LINE__)
