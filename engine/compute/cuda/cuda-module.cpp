// The module's one exported symbol (compute/backend-loader.h): everything else in
// libspillway-cuda.so is hidden, so its statically linked engine code and CUDA runtime never clash
// with the executable's.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <exception>
#include <new>
#include <type_traits>

#include "compute/backend-loader.h"
#include "compute/cuda/cuda-backend.h"

namespace {

int fail(spillway::ErrorCode code, const char* message, char* error, size_t error_size) {
  if (error && error_size) std::snprintf(error, error_size, "%s", message);
  return static_cast<int>(code);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int spillway_cuda_backend_create_v1(
    int device, spillway::compute::Backend** out, char* error, size_t error_size) {
  using spillway::ErrorCode;
  if (out == nullptr)
    return fail(ErrorCode::kInvalidArgument, "no output pointer", error, error_size);
  *out = nullptr;
  // No exception may cross the C boundary.
  try {
    auto backend = spillway::compute::CudaBackend::create(device);
    if (!backend.ok()) {
      return fail(backend.status().code(), backend.status().message().c_str(), error, error_size);
    }
    *out = backend->release();
    return 0;
  } catch (const std::bad_alloc&) {
    return fail(ErrorCode::kOutOfMemory, "out of host memory while creating the CUDA backend",
                error, error_size);
  } catch (const std::exception& e) {
    return fail(ErrorCode::kInternal, e.what(), error, error_size);
  }
}

extern "C" __attribute__((visibility("default"))) int spillway_cuda_device_count_v1(
    int* count, char* error, size_t error_size) {
  using spillway::ErrorCode;
  if (count == nullptr)
    return fail(ErrorCode::kInvalidArgument, "no output pointer", error, error_size);
  *count = 0;
  const cudaError_t e = cudaGetDeviceCount(count);
  if (e == cudaErrorNoDevice) return 0;
  if (e != cudaSuccess) {
    *count = 0;
    return fail(ErrorCode::kUnsupported, cudaGetErrorString(e), error, error_size);
  }
  return 0;
}

static_assert(
    std::is_same_v<decltype(&spillway_cuda_device_count_v1), spillway::compute::CudaDeviceCountFn>,
    "the device count must match backend-loader.h");
static_assert(std::is_same_v<decltype(&spillway_cuda_backend_create_v1),
                             spillway::compute::CudaBackendCreateFn>,
              "the entry point must match backend-loader.h");
