// Choosing and creating a compute backend: the CPU backend is linked in; the CUDA backend is a
// module (libspillway-cuda.so) loaded with dlopen at run time, so `spillway` and `spillway-worker`
// start and run on a machine without a GPU, a driver or the CUDA libraries.
//
// The module is looked for, in order: $SPILLWAY_CUDA_BACKEND (a path to the .so), next to the
// running executable (<exe dir>/libspillway-cuda.so), <exe dir>/../<libdir>/spillway/ (the
// installed layout, libdir as configured: lib or lib/x86_64-linux-gnu), and, for executables
// inside the build tree only, the build tree's path compiled in. It exports one C function
// (kCudaBackendEntry) that creates the backend. Thread-safety: make_backend may be called from any
// thread; the module stays loaded for the life of the process (backends it made must not outlive
// it, so it is never unloaded).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "compute/backend.h"

namespace spillway::compute {

struct BackendOptions {
  std::string kind = "auto";       // "auto", "cpu" or "cuda"
  size_t device_memory_bytes = 0;  // CPU: the "device" capacity (0 = unbounded); CUDA: unused
  int cuda_device = 0;             // CUDA device ordinal
};

struct BackendChoice {
  std::unique_ptr<Backend> backend;
  // One line for the log: which backend, on what, and for "auto" why (e.g. "cuda: NVIDIA H100 80GB
  // HBM3, 79.1 GiB, sm_90" or "cpu: no CUDA backend module (libspillway-cuda.so not found)").
  std::string reason;
};

// Creates the backend `options.kind` names. "auto" picks CUDA when the module loads and a usable
// GPU (compute capability 8.0 or newer) is present, else the CPU, and says why in `reason`.
// "cuda" fails with a one-line error a user can act on: kUnsupported when the module or the CUDA
// libraries are missing, when there is no driver or it is too old for the runtime, or when the
// GPU's architecture is older than sm_80; kNotFound when there is no GPU or no device of that
// ordinal.
Result<BackendChoice> make_backend(const BackendOptions& options);

// Whether a usable CUDA device is present, without keeping a backend: for the GUI's New run page.
// On success fills `info`; otherwise `why` says what is missing (same messages as make_backend).
bool probe_cuda(DeviceInfo* info, std::string* why);

// The module's entry point: `extern "C" int spillway_cuda_backend_create_v1(int device,
// spillway::compute::Backend** out, char* error, size_t error_size)`; 0 on success, else an
// ErrorCode value with a message in `error`.
inline constexpr const char* kCudaBackendEntry = "spillway_cuda_backend_create_v1";
using CudaBackendCreateFn = int (*)(int device, Backend** out, char* error, size_t error_size);
// The module's count of CUDA devices (cudaGetDeviceCount; 0 with no device): `extern "C" int
// spillway_cuda_device_count_v1(int* count, char* error, size_t error_size)`.
inline constexpr const char* kCudaDeviceCountEntry = "spillway_cuda_device_count_v1";
using CudaDeviceCountFn = int (*)(int* count, char* error, size_t error_size);

// How many CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies): 0 when there are none;
// kUnsupported, with make_backend's message, when the module or the driver is missing.
Result<int> cuda_device_count();

// A backend for each of `devices` (CUDA ordinals, in rank order): for data parallel. The first
// error is returned, naming the GPU.
Result<std::vector<std::unique_ptr<Backend>>> make_cuda_backends(const std::vector<int>& devices);

}  // namespace spillway::compute
