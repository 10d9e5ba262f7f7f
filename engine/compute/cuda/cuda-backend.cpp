// CudaBackend: device setup, memory, streams and events, the workspace, and dispatch to the
// launchers of engine/compute/cuda/*.cuh.
#include "compute/cuda/cuda-backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>

#include "compute/cuda/adamw.cuh"
#include "compute/cuda/attention.cuh"
#include "compute/cuda/cross-entropy.cuh"
#include "compute/cuda/cudnn-attention.h"
#include "compute/cuda/device-check.cuh"
#include "compute/cuda/elementwise.cuh"
#include "compute/cuda/embedding.cuh"
#include "compute/cuda/gemm.cuh"
#include "compute/cuda/nccl-communicator.h"
#include "compute/cuda/reduce.cuh"
#include "compute/cuda/rmsnorm.cuh"
#include "compute/cuda/rope.cuh"
#include "core/fail-point.h"
#include "core/log.h"

namespace spillway::compute {

namespace {

using cuda::bf16;

constexpr size_t kAlign = kDeviceAlignment;

size_t align_up(size_t bytes) {
  return align_to_device(bytes);
}

// "1.00 MiB", "26.31 GiB": sizes in the unit a person compares them in (a 1 MiB slab refused
// read "0.00 GiB").
std::string size_text(size_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  else
    std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1ull << 20));
  return buf;
}

// 13000 -> "13.0" (cudaDriverGetVersion / cudaRuntimeGetVersion encoding: 1000·major + 10·minor).
std::string cuda_version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

// Errors after which the CUDA context is unusable (sticky faults inside kernels, hardware errors,
// a lost device): every later call fails with the same error, so the run must stop.
bool is_device_fault(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorDevicesUnavailable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorExternalDevice:
    case cudaErrorContained:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

// Makes `device` the calling thread's current CUDA device (cudaSetDevice is per thread), calling
// cudaSetDevice only when the thread's current device is another one: a thread that drives one GPU
// pays a cudaGetDevice (a read of the runtime's thread state) per call instead. The runtime is
// asked rather than a cache of ours, so code that switches the device behind our back is seen.
cudaError_t make_current(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return cudaSuccess;
  return cudaSetDevice(device);
}

Status device_fault(cudaError_t e, const char* what) {
  return internal_error("the GPU reported " + error_text(e) + " (seen by " + what +
                        "); the run cannot continue on this device (its checkpoints on disk, "
                        "if it has saved one, are left as they are)");
}

// A failed runtime call: a device fault as above, else the error named with the call.
Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok_status();
  if (is_device_fault(e)) return device_fault(e, what);
  if (e == cudaErrorMemoryAllocation)
    return out_of_memory(std::string(what) + ": " + error_text(e));
  return internal_error(std::string(what) + ": CUDA error " + error_text(e));
}

// A launcher's status: when it failed because the context already holds a sticky fault (from an
// earlier kernel), say so instead of blaming this launch.
Status dispatched(Status s, cudaStream_t stream, const char* what) {
  if (s.ok() || s.code() != ErrorCode::kInternal) return s;
  if (cudaError_t e = cudaStreamQuery(stream); is_device_fault(e)) return device_fault(e, what);
  return s;
}

struct Dim {
  const char* name;
  int64_t value;
};

std::string dims_text(std::initializer_list<Dim> counts, std::initializer_list<Dim> sizes) {
  std::string s;
  for (auto list : {counts, sizes}) {
    for (const Dim& d : list) {
      if (!s.empty()) s += ' ';
      s.append(d.name).append("=").append(std::to_string(d.value));
    }
  }
  return s;
}

// kInvalidArgument naming the op and every size unless the counts (tokens, batch, seq: 0 is an
// empty call) are >= 0 and the feature sizes are > 0.
Status check_shape(const char* op, std::initializer_list<Dim> counts,
                   std::initializer_list<Dim> sizes) {
  bool ok = true;
  for (const Dim& d : counts) ok = ok && d.value >= 0;
  for (const Dim& d : sizes) ok = ok && d.value > 0;
  if (ok) return Status::ok_status();
  return invalid_argument(std::string(op) + ": bad shape " + dims_text(counts, sizes) +
                          " (counts must be >= 0, sizes > 0)");
}

struct Ptr {
  const char* name;
  const void* value;
};

Status check_pointers(const char* op, std::initializer_list<Ptr> ptrs) {
  for (const Ptr& p : ptrs) {
    if (p.value == nullptr) return invalid_argument(std::string(op) + ": " + p.name + " is null");
  }
  return Status::ok_status();
}

bf16* B(void* p) {
  return static_cast<bf16*>(p);
}
const bf16* B(const void* p) {
  return static_cast<const bf16*>(p);
}

// What the attention kernels take: the resolved scale, the window, and packed rows' positions
// ([batch, seq] in device memory, or null).
compute::AttentionParams attention_params(float scale, int window, const int32_t* positions,
                                          int batch, int seq) {
  compute::AttentionParams p;
  p.scale = scale;
  p.sliding_window = window;
  p.positions = compute::positions_of(positions, batch, seq);
  return p;
}

}  // namespace

// --- creation ------------------------------------------------------------------------------------

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(int device) {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0))
    return not_found("no CUDA GPU found");
  if (e == cudaErrorInsufficientDriver) {
    if (driver == 0) {
      return unsupported(
          "no NVIDIA driver found (libcuda.so.1): install the NVIDIA driver for CUDA " +
          cuda_version(runtime) + " or use backend cpu");
    }
    return unsupported("the NVIDIA driver is too old for CUDA " + cuda_version(runtime) +
                       " (it supports CUDA " + cuda_version(driver) + "): update the driver");
  }
  if (e == cudaErrorStubLibrary) {
    return unsupported(
        "libcuda.so is the CUDA toolkit's stub, not the driver: install the NVIDIA driver or "
        "take the toolkit's stubs folder off LD_LIBRARY_PATH");
  }
  if (e == cudaErrorSystemDriverMismatch) {
    return unsupported(
        "the NVIDIA kernel module and libcuda.so are of different versions: reboot, or reinstall "
        "the driver");
  }
  if (e != cudaSuccess) return unsupported("CUDA could not start: " + error_text(e));
  if (device < 0 || device >= count) {
    return not_found("no CUDA device " + std::to_string(device) + " (this machine has " +
                     std::to_string(count) + ", numbered from 0)");
  }

  cudaDeviceProp p{};
  if (cudaError_t pe = cudaGetDeviceProperties(&p, device); pe != cudaSuccess) {
    return unsupported("CUDA device " + std::to_string(device) + ": " + error_text(pe));
  }
  const int sm = p.major * 10 + p.minor;
  const std::string gpu = std::string(p.name) + " (sm_" + std::to_string(sm) + ")";
  if (sm < 80) {
    return unsupported(
        gpu +
        " is too old: the CUDA backend needs sm_80 or newer (A100, RTX 30 series, H100 or "
        "later); use backend cpu");
  }
  if (cudaError_t se = cudaSetDevice(device); se != cudaSuccess) {
    if (se == cudaErrorDevicesUnavailable) {
      return unsupported(gpu + " is busy: another process holds it in exclusive compute mode");
    }
    return unsupported(gpu + ": " + error_text(se));
  }
  if (cudaError_t ke = cuda::kernel_image_status(); ke != cudaSuccess) {
    if (ke == cudaErrorNoKernelImageForDevice || ke == cudaErrorInvalidDeviceFunction ||
        ke == cudaErrorUnsupportedPtxVersion) {
      return unsupported(gpu +
                         " has no kernels in libspillway-cuda.so (built for CUDA architectures " +
                         cuda::built_architectures() +
                         "): rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(sm));
    }
    return unsupported(gpu + ": " + error_text(ke));
  }

  DeviceInfo info;
  info.name = p.name;
  info.total_bytes = p.totalGlobalMem;
  info.compute_capability = sm;
  info.multiprocessors = p.multiProcessorCount;
  info.driver = "CUDA driver " + cuda_version(driver) + ", runtime " + cuda_version(runtime);
  char bus_id[32] = {};  // "0000:01:00.0" is 12 characters; 13 with the terminator
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) == cudaSuccess)
    info.pci_bus_id = bus_id;
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device, std::move(info)));
  SPW_RETURN_IF_ERROR(backend->init());
  return backend;
}

CudaBackend::CudaBackend(int device, DeviceInfo info) : device_(device), info_(std::move(info)) {}

Status CudaBackend::init() {
  cudaStream_t compute = nullptr;
  SPW_RETURN_IF_ERROR(
      check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate"));
  streams_.push_back(compute);
  SPW_ASSIGN_OR_RETURN(gemm_, cuda::Gemm::create());
#if SPILLWAY_HAVE_CUDNN
  if (auto cudnn = cuda::CudnnAttention::create(); cudnn.ok()) {
    cudnn_ = std::move(*cudnn);
    info_.attention = cudnn_->describe();
  } else {
    info_.attention = "own kernels (" + cudnn.status().message() + ")";
  }
#else
  info_.attention = "own kernels (built without cudnn_graph.h)";
#endif
  log_info("GPU " + std::to_string(device_) + ": attention on " + info_.attention);
  return Status::ok_status();
}

CudaBackend::~CudaBackend() {
  make_current(device_);
  // Work still queued may use memory freed below: let it finish (errors are moot here).
  for (cudaStream_t s : streams_) {
    if (s) cudaStreamSynchronize(s);
  }
  gemm_.reset();
  cudnn_.reset();
  for (const EventSlot& e : events_) {
    if (e.event) cudaEventDestroy(e.event);
  }
  for (cudaStream_t s : streams_) {
    if (s) cudaStreamDestroy(s);
  }
  for (void* p : device_allocs_) cudaFree(p);
  for (void* p : pinned_allocs_) cudaFreeHost(p);
  for (void* p : registered_) cudaHostUnregister(p);
}

// --- memory --------------------------------------------------------------------------------------

Status CudaBackend::use_device(const char* what) const {
  return check(make_current(device_), what);
}

Result<void*> CudaBackend::device_alloc(size_t bytes) {
  SPW_RETURN_IF_ERROR(use_device("device_alloc"));
  void* p = nullptr;
  // At least one byte, so that every allocation is a distinct pointer (cudaMalloc returns
  // 256-aligned).
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so the next launch check does not see it
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    return out_of_memory("GPU out of memory: asked for " + size_text(bytes) + " (" +
                         std::to_string(bytes) + " bytes), " + size_text(free_bytes) + " free of " +
                         size_text(total_bytes) + " on " + info_.name +
                         ": lower micro_batch_size or seq_len");
  }
  SPW_RETURN_IF_ERROR(check(e, "cudaMalloc"));
  device_allocs_.insert(p);
  return p;
}

void CudaBackend::device_free(void* ptr) {
  // Pointers this backend did not hand out are ignored: freeing them would corrupt someone else's.
  if (ptr == nullptr || device_allocs_.erase(ptr) == 0) return;
  make_current(device_);
  cudaFree(ptr);  // a fault it reports is sticky and surfaces at the next synchronize
}

Result<void*> CudaBackend::host_alloc_pinned(size_t bytes) {
  SPW_RETURN_IF_ERROR(use_device("host_alloc_pinned"));
  void* p = nullptr;
  const cudaError_t e = fail_point("host.alloc")
                            ? cudaErrorMemoryAllocation
                            : cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return out_of_memory(
        "could not allocate " + size_text(bytes) +
        " of pinned host memory: free host memory, or lower micro_batch_size or seq_len");
  }
  SPW_RETURN_IF_ERROR(check(e, "cudaHostAlloc"));
  pinned_allocs_.insert(p);
  return p;
}

void CudaBackend::host_free_pinned(void* ptr) {
  if (ptr == nullptr || pinned_allocs_.erase(ptr) == 0) return;
  cudaFreeHost(ptr);
}

Status CudaBackend::host_register(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return invalid_argument("host_register: empty range (ptr " + std::string(ptr ? "set" : "null") +
                            ", " + std::to_string(bytes) + " bytes)");
  }
  SPW_RETURN_IF_ERROR(
      use_device("host_register"));  // this may be another thread than the trainer's
  const cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    cudaGetLastError();
    return invalid_argument("host_register: memory at this address is already registered");
  }
  if (e == cudaErrorMemoryAllocation || e == cudaErrorInvalidValue) {
    cudaGetLastError();
    return out_of_memory("could not pin " + size_text(bytes) + " of host memory (" + error_text(e) +
                         "): raise the locked-memory limit (ulimit -l) or free host memory");
  }
  SPW_RETURN_IF_ERROR(check(e, "cudaHostRegister"));
  std::lock_guard<std::mutex> lock(registered_mu_);
  registered_.insert(ptr);
  return Status::ok_status();
}

void CudaBackend::host_unregister(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(registered_mu_);
    if (ptr == nullptr || registered_.erase(ptr) == 0) return;
  }
  make_current(device_);
  cudaHostUnregister(ptr);
}

Status CudaBackend::device_memory_info(size_t* free_bytes, size_t* total_bytes) {
  SPW_RETURN_IF_ERROR(use_device("device_memory_info"));
  size_t f = 0, t = 0;
  SPW_RETURN_IF_ERROR(check(cudaMemGetInfo(&f, &t), "cudaMemGetInfo"));
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return Status::ok_status();
}

// --- streams, events -----------------------------------------------------------------------------

Result<std::vector<std::unique_ptr<Communicator>>> CudaBackend::create_communicators(
    std::span<Backend* const> group, ProcessExchange* processes) {
  std::vector<CudaBackend*> gpus;
  for (Backend* b : group) {
    auto* g = dynamic_cast<CudaBackend*>(b);
    if (!g) return unsupported("a group of GPUs holds a " + b->name() + " backend");
    gpus.push_back(g);
  }
  return make_nccl_communicators(gpus, processes);
}

Result<cudaStream_t> CudaBackend::stream_of(StreamId stream, const char* what) const {
  if (stream < 0 || static_cast<size_t>(stream) >= streams_.size() || streams_[stream] == nullptr) {
    return invalid_argument(std::string(what) + ": unknown stream " + std::to_string(stream));
  }
  SPW_RETURN_IF_ERROR(use_device(what));
  return streams_[stream];
}

Result<cudaEvent_t> CudaBackend::event_of(EventId event, const char* what) const {
  if (event < 0 || static_cast<size_t>(event) >= events_.size() ||
      events_[event].event == nullptr) {
    return invalid_argument(std::string(what) + ": unknown event " + std::to_string(event));
  }
  return events_[event].event;
}

Result<Stream> CudaBackend::create_stream() {
  SPW_RETURN_IF_ERROR(use_device("create_stream"));
  cudaStream_t s = nullptr;
  SPW_RETURN_IF_ERROR(
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
  StreamId id;
  if (!free_streams_.empty()) {
    id = free_streams_.back();
    free_streams_.pop_back();
    streams_[id] = s;
  } else {
    id = static_cast<StreamId>(streams_.size());
    streams_.push_back(s);
  }
  return Stream(this, id);
}

void CudaBackend::destroy_stream(StreamId stream) {
  // Stream 0 belongs to the backend; a handle never owns it.
  if (stream <= 0 || static_cast<size_t>(stream) >= streams_.size() || streams_[stream] == nullptr)
    return;
  make_current(device_);
  cudaStreamDestroy(streams_[stream]);  // returns at once; the stream goes when its work is done
  streams_[stream] = nullptr;
  free_streams_.push_back(stream);
}

Result<Event> CudaBackend::create_event(bool timing) {
  SPW_RETURN_IF_ERROR(use_device("create_event"));
  cudaEvent_t e = nullptr;
  // Events without timing are lighter to record and to wait on.
  SPW_RETURN_IF_ERROR(
      check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
            "cudaEventCreate"));
  EventId id;
  if (!free_events_.empty()) {
    id = free_events_.back();
    free_events_.pop_back();
  } else {
    id = static_cast<EventId>(events_.size());
    events_.emplace_back();
  }
  events_[id] = EventSlot{e, timing};
  return Event(this, id);
}

void CudaBackend::destroy_event(EventId event) {
  if (event < 0 || static_cast<size_t>(event) >= events_.size() || events_[event].event == nullptr)
    return;
  make_current(device_);
  cudaEventDestroy(events_[event].event);
  events_[event] = EventSlot{};
  free_events_.push_back(event);
}

Status CudaBackend::record_event(EventId event, StreamId stream) {
  SPW_ASSIGN_OR_RETURN(cudaEvent_t e, event_of(event, "record_event"));
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, "record_event"));
  return check(cudaEventRecord(e, s), "cudaEventRecord");
}

Status CudaBackend::stream_wait_event(StreamId stream, EventId event) {
  SPW_ASSIGN_OR_RETURN(cudaEvent_t e, event_of(event, "stream_wait_event"));
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, "stream_wait_event"));
  return check(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
}

Status CudaBackend::synchronize_event(EventId event) {
  SPW_ASSIGN_OR_RETURN(cudaEvent_t e, event_of(event, "synchronize_event"));
  SPW_RETURN_IF_ERROR(use_device("synchronize_event"));
  return check(cudaEventSynchronize(e), "synchronize_event");
}

Status CudaBackend::synchronize_stream(StreamId stream) {
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, "synchronize_stream"));
  return check(cudaStreamSynchronize(s), "synchronize_stream");
}

Result<double> CudaBackend::elapsed_s(EventId start, EventId end) {
  SPW_ASSIGN_OR_RETURN(cudaEvent_t a, event_of(start, "elapsed_s"));
  SPW_ASSIGN_OR_RETURN(cudaEvent_t b, event_of(end, "elapsed_s"));
  if (!events_[start].timing || !events_[end].timing) {
    return invalid_argument("elapsed_s: events " + std::to_string(start) + " and " +
                            std::to_string(end) + " must both be created with timing = true");
  }
  SPW_RETURN_IF_ERROR(use_device("elapsed_s"));
  SPW_RETURN_IF_ERROR(check(cudaEventSynchronize(b), "elapsed_s"));
  float ms = 0.0f;
  const cudaError_t e = cudaEventElapsedTime(&ms, a, b);
  if (e == cudaErrorInvalidResourceHandle) {
    cudaGetLastError();
    return invalid_argument("elapsed_s: events " + std::to_string(start) + " and " +
                            std::to_string(end) + " must both be recorded");
  }
  SPW_RETURN_IF_ERROR(check(e, "cudaEventElapsedTime"));
  return static_cast<double>(ms) * 1e-3;
}

// --- copies and conversions ----------------------------------------------------------------------

Status CudaBackend::copy_h2d(void* dst_device, const void* src_host, size_t bytes,
                             StreamId stream) {
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, "copy_h2d"));
  if (bytes == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers("copy_h2d", {{"dst", dst_device}, {"src", src_host}}));
  return check(cudaMemcpyAsync(dst_device, src_host, bytes, cudaMemcpyHostToDevice, s), "copy_h2d");
}

Status CudaBackend::copy_d2h(void* dst_host, const void* src_device, size_t bytes,
                             StreamId stream) {
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, "copy_d2h"));
  if (bytes == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers("copy_d2h", {{"dst", dst_host}, {"src", src_device}}));
  return check(cudaMemcpyAsync(dst_host, src_device, bytes, cudaMemcpyDeviceToHost, s), "copy_d2h");
}

Status CudaBackend::copy_d2d(void* dst, const void* src, size_t bytes, StreamId stream) {
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, "copy_d2d"));
  if (bytes == 0 || dst == src) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers("copy_d2d", {{"dst", dst}, {"src", src}}));
  return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "copy_d2d");
}

Status CudaBackend::convert(void* dst, DType dst_type, const void* src, DType src_type,
                            size_t count, StreamId stream) {
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, "convert"));
  if (count == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers("convert", {{"dst", dst}, {"src", src}}));
  if (dst_type == src_type) return copy_d2d(dst, src, count * dtype_size(src_type), stream);
  if (src_type == DType::kF32 && dst_type == DType::kBF16) {
    return dispatched(cuda::convert_f32_to_bf16(B(dst), static_cast<const float*>(src), count, s),
                      s, "convert");
  }
  if (src_type == DType::kBF16 && dst_type == DType::kF32) {
    return dispatched(cuda::convert_bf16_to_f32(static_cast<float*>(dst), B(src), count, s), s,
                      "convert");
  }
  return invalid_argument(std::string("convert: ") + dtype_name(src_type) + " to " +
                          dtype_name(dst_type) + " is not supported (F32 and BF16 only)");
}

Status CudaBackend::fill_zero(void* dst_device, size_t bytes, StreamId stream) {
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, "fill_zero"));
  if (bytes == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers("fill_zero", {{"dst", dst_device}}));
  return check(cudaMemsetAsync(dst_device, 0, bytes, s), "fill_zero");
}

// --- workspace -----------------------------------------------------------------------------------

Status CudaBackend::set_workspace(void* ptr, size_t bytes, const OpShapes& shapes) {
  const size_t need = workspace_bytes(shapes);  // Backend's: with this backend's attention
  if (ptr == nullptr || bytes < need) {
    return invalid_argument("set_workspace: " + std::to_string(bytes) + " bytes at " +
                            (ptr ? "ptr" : "null") + ", the shapes need " + std::to_string(need) +
                            " (workspace_bytes)");
  }
  if (reinterpret_cast<uintptr_t>(ptr) % kAlign != 0) {
    return invalid_argument("set_workspace: the pointer must be 256-byte aligned");
  }
  ws_gemm_ = ptr;
  const size_t gemm_bytes = align_up(cuda::Gemm::kWorkspaceBytes);
  ws_scratch_.ptr = reinterpret_cast<float*>(static_cast<char*>(ptr) + gemm_bytes);
  ws_scratch_.floats = (bytes - gemm_bytes) / sizeof(float);
  return Status::ok_status();
}

Result<void*> CudaBackend::gemm_workspace(const char* what) const {
  if (ws_gemm_ == nullptr) {
    return invalid_argument(
        std::string(what) +
        ": no workspace (call set_workspace with workspace_bytes(shapes) first)");
  }
  return ws_gemm_;
}

Result<CudaBackend::Scratch> CudaBackend::scratch(size_t floats, const char* what) const {
  if (ws_gemm_ == nullptr) {
    return invalid_argument(
        std::string(what) +
        ": no workspace (call set_workspace with workspace_bytes(shapes) first)");
  }
  if (floats > ws_scratch_.floats) {
    return invalid_argument(std::string(what) + " needs " + std::to_string(floats * sizeof(float)) +
                            " bytes of workspace scratch, the workspace has " +
                            std::to_string(ws_scratch_.floats * sizeof(float)) +
                            " (call with shapes beyond the OpShapes given to set_workspace)");
  }
  return ws_scratch_;
}

// --- ops -----------------------------------------------------------------------------------------

Status CudaBackend::do_embedding_forward(void* out, const int32_t* ids, const void* table, int n,
                                         int d, float scale, StreamId stream) {
  constexpr const char* op = "embedding_forward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"d", d}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"out", out}, {"ids", ids}, {"table", table}}));
  return dispatched(cuda::embedding_forward(B(out), ids, B(table), n, d, scale, s), s, op);
}

Status CudaBackend::do_embedding_backward(float* dtable, const int32_t* ids, const void* dout,
                                          int n, int d, float scale, StreamId stream) {
  constexpr const char* op = "embedding_backward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"d", d}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"dtable", dtable}, {"ids", ids}, {"dout", dout}}));
  return dispatched(cuda::embedding_backward(dtable, ids, B(dout), n, d, scale, s), s, op);
}

Status CudaBackend::do_rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n,
                                       int d, float eps, float weight_offset, StreamId stream) {
  constexpr const char* op = "rmsnorm_forward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"d", d}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"out", out}, {"rstd", rstd}, {"x", x}, {"w", w}}));
  return dispatched(cuda::rmsnorm_forward(B(out), rstd, B(x), B(w), n, d, eps, weight_offset, s), s,
                    op);
}

Status CudaBackend::do_residual_rmsnorm_forward(void* sum, void* out, float* rstd, const void* x,
                                                const void* r, const void* w, int n, int d,
                                                float eps, float weight_offset, StreamId stream) {
  constexpr const char* op = "residual_rmsnorm_forward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"d", d}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(
      op, {{"sum", sum}, {"out", out}, {"rstd", rstd}, {"x", x}, {"r", r}, {"w", w}}));
  return dispatched(cuda::residual_rmsnorm_forward(B(sum), B(out), rstd, B(x), B(r), B(w), n, d,
                                                   eps, weight_offset, s),
                    s, op);
}

Status CudaBackend::do_rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x,
                                        const void* w, const float* rstd, int n, int d,
                                        bool accumulate_dx, float weight_offset, StreamId stream) {
  constexpr const char* op = "rmsnorm_backward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"d", d}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(
      op, {{"dx", dx}, {"dw", dw}, {"dout", dout}, {"x", x}, {"w", w}, {"rstd", rstd}}));
  SPW_ASSIGN_OR_RETURN(Scratch sc, scratch(cuda::rmsnorm_backward_scratch_floats(n, d), op));
  return dispatched(cuda::rmsnorm_backward(B(dx), dw, B(dout), B(x), B(w), rstd, n, d,
                                           accumulate_dx, weight_offset, sc.ptr, sc.floats, s),
                    s, op);
}

Status CudaBackend::do_linear_forward(void* y, const void* x, const void* w, const void* b, int n,
                                      int in, int out, StreamId stream) {
  constexpr const char* op = "linear_forward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"in", in}, {"out", out}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"y", y}, {"x", x}, {"w", w}}));
  SPW_ASSIGN_OR_RETURN(void* ws, gemm_workspace(op));
  return dispatched(gemm_->linear_forward(B(y), B(x), B(w), B(b), n, in, out, ws, s), s, op);
}

Status CudaBackend::do_linear_backward(void* dx, float* dw, float* db, const void* dy,
                                       const void* x, const void* w, int n, int in, int out,
                                       bool accumulate_dx, StreamId stream) {
  constexpr const char* op = "linear_backward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"in", in}, {"out", out}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"dw", dw}, {"dy", dy}, {"x", x}, {"w", w}}));
  SPW_ASSIGN_OR_RETURN(void* ws, gemm_workspace(op));
  if (dx) {
    SPW_RETURN_IF_ERROR(dispatched(
        gemm_->linear_backward_input(B(dx), B(dy), B(w), n, in, out, accumulate_dx, ws, s), s, op));
  }
  SPW_RETURN_IF_ERROR(
      dispatched(gemm_->linear_backward_weight(dw, B(dy), B(x), n, in, out, ws, s), s, op));
  if (db) {
    SPW_ASSIGN_OR_RETURN(Scratch sc, scratch(cuda::bias_backward_scratch_floats(n, out), op));
    SPW_RETURN_IF_ERROR(
        dispatched(cuda::bias_backward(db, B(dy), n, out, sc.ptr, sc.floats, s), s, op));
  }
  return Status::ok_status();
}

Status CudaBackend::do_rope_forward(void* x, int batch, int seq, int heads, int head_dim,
                                    float theta, const RopeScaling& scaling,
                                    const int32_t* positions, StreamId stream) {
  constexpr const char* op = "rope_forward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"batch", batch}, {"seq", seq}},
                                  {{"heads", heads}, {"head_dim", head_dim}}));
  if (batch == 0 || seq == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"x", x}}));
  return dispatched(
      cuda::rope_forward(B(x), batch, seq, heads, head_dim, theta, scaling, positions, s), s, op);
}

Status CudaBackend::do_rope_backward(void* dx, int batch, int seq, int heads, int head_dim,
                                     float theta, const RopeScaling& scaling,
                                     const int32_t* positions, StreamId stream) {
  constexpr const char* op = "rope_backward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"batch", batch}, {"seq", seq}},
                                  {{"heads", heads}, {"head_dim", head_dim}}));
  if (batch == 0 || seq == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"dx", dx}}));
  return dispatched(
      cuda::rope_backward(B(dx), batch, seq, heads, head_dim, theta, scaling, positions, s), s, op);
}

Status CudaBackend::do_attention_forward(void* out, float* lse, const void* q, const void* k,
                                         const void* v, int batch, int seq, int hq, int hkv,
                                         int head_dim, float scale, int window,
                                         const int32_t* positions,
                                         [[maybe_unused]] PackedBounds packed, StreamId stream) {
  constexpr const char* op = "attention_forward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"batch", batch}, {"seq", seq}},
                                  {{"hq", hq}, {"hkv", hkv}, {"head_dim", head_dim}}));
  if (batch == 0 || seq == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(
      check_pointers(op, {{"out", out}, {"lse", lse}, {"q", q}, {"k", k}, {"v", v}}));
#if SPILLWAY_HAVE_CUDNN
  if (cudnn_) {
    const cuda::AttentionShape shape{batch, seq, hq, hkv, head_dim, window};
    const float sc = compute::AttentionParams{.scale = scale}.scale_for(head_dim);
    const size_t ws_bytes = ws_scratch_.floats * sizeof(float);
    SPW_ASSIGN_OR_RETURN(
        bool ran, positions == nullptr
                      ? cudnn_->forward(B(out), lse, B(q), B(k), B(v), shape, sc, ws_scratch_.ptr,
                                        ws_bytes, s)
                      : cudnn_->forward_packed(B(out), lse, B(q), B(k), B(v), shape, positions,
                                               packed, sc, ws_scratch_.ptr, ws_bytes, s));
    if (ran) return Status::ok_status();
  }
#endif
  return dispatched(
      cuda::attention_forward(B(out), lse, B(q), B(k), B(v), batch, seq, hq, hkv, head_dim,
                              attention_params(scale, window, positions, batch, seq), s),
      s, op);
}

Status CudaBackend::do_attention_backward(void* dq, void* dk, void* dv, const void* dout,
                                          const void* q, const void* k, const void* v,
                                          const void* out, const float* lse, int batch, int seq,
                                          int hq, int hkv, int head_dim, float scale, int window,
                                          const int32_t* positions,
                                          [[maybe_unused]] PackedBounds packed, StreamId stream) {
  constexpr const char* op = "attention_backward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"batch", batch}, {"seq", seq}},
                                  {{"hq", hq}, {"hkv", hkv}, {"head_dim", head_dim}}));
  if (batch == 0 || seq == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"dq", dq},
                                          {"dk", dk},
                                          {"dv", dv},
                                          {"dout", dout},
                                          {"q", q},
                                          {"k", k},
                                          {"v", v},
                                          {"out", out},
                                          {"lse", lse}}));
  SPW_ASSIGN_OR_RETURN(
      Scratch sc,
      scratch(cuda::attention_backward_scratch_floats(batch, seq, hq, hkv, head_dim, false), op));
#if SPILLWAY_HAVE_CUDNN
  if (cudnn_) {
    const cuda::AttentionShape shape{batch, seq, hq, hkv, head_dim, window};
    const float scl = compute::AttentionParams{.scale = scale}.scale_for(head_dim);
    const size_t ws_bytes = sc.floats * sizeof(float);
    SPW_ASSIGN_OR_RETURN(
        bool ran,
        positions == nullptr
            ? cudnn_->backward(B(dq), B(dk), B(dv), B(dout), B(q), B(k), B(v), B(out), lse, shape,
                               scl, sc.ptr, ws_bytes, s)
            : cudnn_->backward_packed(B(dq), B(dk), B(dv), B(dout), B(q), B(k), B(v), B(out), lse,
                                      shape, positions, packed, scl, sc.ptr, ws_bytes, s));
    if (ran) return Status::ok_status();
  }
#endif
  return dispatched(cuda::attention_backward(B(dq), B(dk), B(dv), B(dout), B(q), B(k), B(v), B(out),
                                             lse, batch, seq, hq, hkv, head_dim,
                                             attention_params(scale, window, positions, batch, seq),
                                             sc.ptr, sc.floats, s),
                    s, op);
}

Status CudaBackend::do_attention_key_bias_backward(float* db, const void* dout, const void* q,
                                                   const void* k, const void* v, int batch, int seq,
                                                   int hq, int hkv, int head_dim, float theta,
                                                   const RopeScaling& scaling,
                                                   const int32_t* positions, StreamId stream) {
  constexpr const char* op = "attention_key_bias_backward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"batch", batch}, {"seq", seq}},
                                  {{"hq", hq}, {"hkv", hkv}, {"head_dim", head_dim}}));
  if (batch == 0 || seq == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(
      check_pointers(op, {{"db", db}, {"dout", dout}, {"q", q}, {"k", k}, {"v", v}}));
  SPW_ASSIGN_OR_RETURN(
      Scratch sc,
      scratch(cuda::attention_key_bias_scratch_floats(batch, seq, hq, hkv, head_dim), op));
  return dispatched(
      cuda::attention_key_bias_backward(db, B(dout), B(q), B(k), B(v), batch, seq, hq, hkv,
                                        head_dim, theta, scaling, positions, sc.ptr, sc.floats, s),
      s, op);
}

Status CudaBackend::do_swiglu_forward(void* out, const void* gate, const void* up, int n, int f,
                                      StreamId stream) {
  constexpr const char* op = "swiglu_forward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"f", f}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"out", out}, {"gate", gate}, {"up", up}}));
  return dispatched(cuda::swiglu_forward(B(out), B(gate), B(up), n, f, s), s, op);
}

Status CudaBackend::do_swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                       const void* up, int n, int f, StreamId stream) {
  constexpr const char* op = "swiglu_backward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"f", f}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(
      op, {{"dgate", dgate}, {"dup", dup}, {"dout", dout}, {"gate", gate}, {"up", up}}));
  return dispatched(cuda::swiglu_backward(B(dgate), B(dup), B(dout), B(gate), B(up), n, f, s), s,
                    op);
}

Status CudaBackend::do_geglu_forward(void* out, const void* gate, const void* up, int n, int f,
                                     StreamId stream) {
  constexpr const char* op = "geglu_forward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"f", f}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"out", out}, {"gate", gate}, {"up", up}}));
  return dispatched(cuda::geglu_forward(B(out), B(gate), B(up), n, f, s), s, op);
}

Status CudaBackend::do_geglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                      const void* up, int n, int f, StreamId stream) {
  constexpr const char* op = "geglu_backward";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"f", f}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(
      op, {{"dgate", dgate}, {"dup", dup}, {"dout", dout}, {"gate", gate}, {"up", up}}));
  return dispatched(cuda::geglu_backward(B(dgate), B(dup), B(dout), B(gate), B(up), n, f, s), s,
                    op);
}

Status CudaBackend::do_add_inplace(void* y, const void* x, size_t count, StreamId stream) {
  constexpr const char* op = "add_inplace";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  if (count == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"y", y}, {"x", x}}));
  return dispatched(cuda::add_inplace(B(y), B(x), count, s), s, op);
}

Status CudaBackend::do_sum_squares(double* out, const float* x, size_t count, StreamId stream) {
  constexpr const char* op = "sum_squares";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"out", out}}));
  if (count > 0) SPW_RETURN_IF_ERROR(check_pointers(op, {{"x", x}}));
  const size_t doubles = cuda::sum_squares_scratch_doubles();
  SPW_ASSIGN_OR_RETURN(Scratch sc, scratch(doubles * sizeof(double) / sizeof(float), op));
  return dispatched(cuda::sum_squares(out, x, count, reinterpret_cast<double*>(sc.ptr), doubles, s),
                    s, op);
}

Status CudaBackend::do_adamw(float* param, float* m, float* v, const float* grad, size_t count,
                             const AdamWCoeffs& k, float grad_scale, StreamId stream) {
  constexpr const char* op = "adamw";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  if (count == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(check_pointers(op, {{"param", param}, {"m", m}, {"v", v}, {"grad", grad}}));
  return dispatched(cuda::adamw(param, m, v, grad, count, grad_scale, k, s), s, op);
}

// Per chunk of rows: logits = x·Wᵀ in fp32 (cuBLASLt), the cross-entropy kernel turns them into
// losses and bf16 dlogits, then dx = dlogits·W and dW += dlogitsᵀ·x (cuBLASLt, beta 1). The logits
// go straight to logits_out when the caller wants them, else to the workspace.
Status CudaBackend::do_lm_head_loss(float* losses, void* dx, float* dw, const void* x,
                                    const void* w, const int32_t* labels, int n, int d, int v,
                                    float loss_scale, float* logits_out, int chunk,
                                    StreamId stream) {
  constexpr const char* op = "lm_head_loss";
  SPW_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(stream, op));
  SPW_RETURN_IF_ERROR(check_shape(op, {{"n", n}}, {{"d", d}, {"v", v}, {"chunk", chunk}}));
  if (n == 0) return Status::ok_status();
  SPW_RETURN_IF_ERROR(
      check_pointers(op, {{"losses", losses}, {"x", x}, {"w", w}, {"labels", labels}}));
  const bool backward = loss_scale != 0.0f;
  if (backward) SPW_RETURN_IF_ERROR(check_pointers(op, {{"dx", dx}, {"dw", dw}}));
  SPW_ASSIGN_OR_RETURN(void* ws, gemm_workspace(op));
  // Fewer rows per chunk than asked when the workspace was sized for a smaller chunk: the contract
  // is "at most `chunk` tokens", and the result of each row does not depend on it.
  size_t rows = static_cast<size_t>(std::min(chunk, n));
  const size_t avail = ws_scratch_.floats * sizeof(float);
  if (cuda::lm_head_scratch_bytes(rows, v) > avail) {
    // Each of the two regions rounds up by less than kAlign.
    rows = std::min(rows, avail > 2 * kAlign
                              ? (avail - 2 * kAlign) / (size_t(v) * (sizeof(float) + sizeof(bf16)))
                              : 0);
    if (rows == 0) {
      return invalid_argument(
          "lm_head_loss: the workspace holds no chunk of v=" + std::to_string(v) +
          " logits (call set_workspace with OpShapes.vocab and lm_head_chunk)");
    }
  }
  float* logits_ws = ws_scratch_.ptr;
  bf16* dlogits = reinterpret_cast<bf16*>(reinterpret_cast<char*>(logits_ws) +
                                          align_up(rows * v * sizeof(float)));
  for (size_t r0 = 0; r0 < size_t(n); r0 += rows) {
    const int m = static_cast<int>(std::min(rows, size_t(n) - r0));
    const bf16* xc = B(x) + r0 * d;
    float* logits = logits_out ? logits_out + r0 * v : logits_ws;
    SPW_RETURN_IF_ERROR(
        dispatched(gemm_->linear_forward_f32(logits, xc, B(w), m, d, v, ws, s), s, op));
    SPW_RETURN_IF_ERROR(dispatched(
        cuda::cross_entropy_forward_backward(losses + r0, backward ? dlogits : nullptr, nullptr,
                                             logits, labels + r0, m, v, loss_scale, s),
        s, op));
    if (!backward) continue;
    SPW_RETURN_IF_ERROR(dispatched(
        gemm_->linear_backward_input(B(dx) + r0 * d, dlogits, B(w), m, d, v, false, ws, s), s, op));
    SPW_RETURN_IF_ERROR(
        dispatched(gemm_->linear_backward_weight(dw, dlogits, xc, m, d, v, ws, s), s, op));
  }
  return Status::ok_status();
}

}  // namespace spillway::compute
