// CUBLAS_CHECK for the cuBLASLt calls (gemm.cu): turns a failed call into a Status naming the
// statement, file and line, as CUDA_CHECK does for the runtime. Private to compute/cuda.
#pragma once

#include <cublasLt.h>

#include <string>

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// kOutOfMemory when cuBLASLt could not allocate, kInternal otherwise: with the shapes checked by
// the caller, any other failure is a bug (a bad descriptor, an algorithm that does not fit).
inline Status cublas_status(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  std::string msg = std::string("cuBLAS error ") + cublasLtGetStatusName(s) + " (" +
                    cublasLtGetStatusString(s) + ") in " + what + " at " + file + ":" +
                    std::to_string(line);
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return out_of_memory(msg);
  return internal_error(msg);
}

}  // namespace spillway::cuda

#define CUBLAS_CHECK(stmt)                                                   \
  do {                                                                       \
    if (cublasStatus_t s_ = (stmt); s_ != CUBLAS_STATUS_SUCCESS)             \
      return ::spillway::cuda::cublas_status(s_, #stmt, __FILE__, __LINE__); \
  } while (0)
