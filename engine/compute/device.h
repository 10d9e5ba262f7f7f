// Device: what a compute device is: its memory, streams, events, copies and conversions, its
// properties and its memory figures (docs/architecture.md, "The compute backend"). What it computes
// is the Backend's (compute/backend.h): a backend runs its ops on one device, Backend::device().
//
// The split lets a wrapper see every byte a run allocates without knowing the ops: the bench's
// MeteredDevice (app/worker/metered-device.h) wraps a Device, and the streaming engine takes its
// memory, streams and copies from the Device it is given and its ops from the Backend. Adding an
// op touches backend.h and the backends' implementations, never a Device.
//
// Ordering: work on one stream runs in order, work on two streams is ordered only by events
// (record_event on the producer, stream_wait_event on the consumer), and the host sees the results
// of asynchronous work only after synchronize_*. The CPU device's strict mode
// (CpuBackendOptions::strict_streams) holds each stream's work until someone waits on it, so a
// missing stream_wait_event or synchronize fails the CPU tests.
//
// Several devices in one process: a device knows its ordinal (the CUDA device index; 0 for the
// CPU) and makes itself the calling thread's current device before it touches the GPU, only when
// that thread's current device is another one (a thread-local record of the current device, so a
// thread that drives one GPU pays no cudaSetDevice per call).
//
// Errors: every call returns a Status: kInvalidArgument for bad sizes or handles, kOutOfMemory
// from allocations (saying what was asked and what is free), kInternal for a failed launch; an
// asynchronous failure (a fault inside a kernel, a lost device) surfaces at the next
// synchronize_* or elapsed_s, as kInternal with the device's message.
// Thread-safety: not thread-safe: one thread drives a device (host_register/host_unregister may
// be called from any thread). Ownership: the device owns every allocation, stream and event it
// hands out; Stream and Event handles must not outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "compute/backend-facts.h"
#include "core/dtype.h"
#include "core/status.h"

namespace spillway::compute {

// Stream and event ids. Stream 0 is the device's default compute stream and always valid; other
// streams and every event are created by the device and owned by Stream / Event handles.
using StreamId = int;
using EventId = int;

class Device;

// An owned stream: destroyed (after its work completes) when the handle goes. Move-only; must not
// outlive its device. Converts to its StreamId for the op calls.
class Stream {
 public:
  Stream() = default;
  Stream(Device* device, StreamId id) : device_(device), id_(id) {}
  Stream(Stream&& o) noexcept
      : device_(std::exchange(o.device_, nullptr)), id_(std::exchange(o.id_, 0)) {}
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { reset(); }
  void reset();
  StreamId id() const { return id_; }
  operator StreamId() const { return id_; }  // NOLINT: a handle stands for its id

 private:
  Device* device_ = nullptr;
  StreamId id_ = 0;
};

// An owned event, as Stream. An event that was never recorded counts as complete.
class Event {
 public:
  Event() = default;
  Event(Device* device, EventId id) : device_(device), id_(id) {}
  Event(Event&& o) noexcept
      : device_(std::exchange(o.device_, nullptr)), id_(std::exchange(o.id_, -1)) {}
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { reset(); }
  void reset();
  EventId id() const { return id_; }
  operator EventId() const { return id_; }  // NOLINT

 private:
  Device* device_ = nullptr;
  EventId id_ = -1;
};

// What a device is, for logs, the plan and the GUI.
struct DeviceInfo {
  std::string name;            // "NVIDIA H100 80GB HBM3", "CPU (16 threads)"
  uint64_t total_bytes = 0;    // device memory (the CPU backend: its capacity or physical RAM)
  int compute_capability = 0;  // 90 for sm_90; 0 on the CPU
  int multiprocessors = 0;     // SMs; threads on the CPU
  std::string driver;          // "CUDA driver 13.0, runtime 13.0"; empty on the CPU
  std::string pci_bus_id;      // "0000:01:00.0" (domain:bus:device.function); empty on the CPU.
                               // Names the same GPU to NVML whatever CUDA_VISIBLE_DEVICES says
  // What runs attention: "cuDNN 9.19.0" (its fused kernels, the module's for packed rows) or
  // "own kernels (why not cuDNN)"; empty on the CPU.
  std::string attention;
};

class Device {
 public:
  virtual ~Device() = default;

  // --- properties -----------------------------------------------------------------------------
  virtual BackendKind kind() const = 0;
  // What this kind of device is and needs (backend-facts.h): act dtype, alignment, CPU or GPU.
  const BackendFacts& facts() const { return backend_facts(kind()); }
  std::string name() const { return backend_name(kind()); }  // "cpu", "cuda"
  DType act_dtype() const { return facts().act_dtype; }      // F32 on the CPU, BF16 on CUDA
  // The CUDA device index this device drives; 0 on the CPU.
  virtual int ordinal() const = 0;
  virtual DeviceInfo device_info() const = 0;
  // Bytes of device memory free and in total (the CPU reports its configured capacity).
  virtual Status device_memory_info(size_t* free_bytes, size_t* total_bytes) = 0;

  // --- memory ---------------------------------------------------------------------------------
  // Device memory: `bytes` aligned to kDeviceAlignment. kOutOfMemory says what was asked and
  // what is free. Not for the hot loop (cudaMalloc synchronises): callers carve one arena at start.
  virtual Result<void*> device_alloc(size_t bytes) = 0;
  virtual void device_free(void* ptr) = 0;
  // Page-locked host memory for async copies (plain aligned memory on the CPU).
  virtual Result<void*> host_alloc_pinned(size_t bytes) = 0;
  virtual void host_free_pinned(void* ptr) = 0;
  // Pins existing host memory [ptr, ptr + bytes) so copies from/to it run at link speed
  // (cudaHostRegister; a no-op on the CPU). Unregister before the memory is freed.
  virtual Status host_register(void* ptr, size_t bytes) = 0;
  virtual void host_unregister(void* ptr) = 0;

  // --- streams, events ------------------------------------------------------------------------
  virtual Result<Stream> create_stream() = 0;
  // `timing`: the event can be an end of elapsed_s (CUDA events without timing are cheaper).
  virtual Result<Event> create_event(bool timing = false) = 0;
  virtual Status record_event(EventId event, StreamId stream) = 0;
  // Work enqueued on `stream` after this call waits for the work before `event`'s last record.
  virtual Status stream_wait_event(StreamId stream, EventId event) = 0;
  virtual Status synchronize_event(EventId event) = 0;
  virtual Status synchronize_stream(StreamId stream) = 0;
  // Seconds between two recorded, completed timing events (end after start: positive).
  virtual Result<double> elapsed_s(EventId start, EventId end) = 0;

  // --- copies and conversions (asynchronous on `stream`) ---------------------------------------
  virtual Status copy_h2d(void* dst_device, const void* src_host, size_t bytes,
                          StreamId stream) = 0;
  virtual Status copy_d2h(void* dst_host, const void* src_device, size_t bytes,
                          StreamId stream) = 0;
  virtual Status copy_d2d(void* dst, const void* src, size_t bytes, StreamId stream) = 0;
  // dst[i] = (dst_type) src[i] for i < count, both on the device; F32, BF16 (round to nearest
  // even, as torch's .to(torch.bfloat16)) and the identity. kInvalidArgument for other pairs.
  virtual Status convert(void* dst, DType dst_type, const void* src, DType src_type, size_t count,
                         StreamId stream) = 0;
  virtual Status fill_zero(void* dst_device, size_t bytes, StreamId stream) = 0;

 protected:
  friend class Stream;
  friend class Event;
  // Called by the handles' destructors.
  virtual void destroy_stream(StreamId stream) = 0;
  virtual void destroy_event(EventId event) = 0;
};

inline void Stream::reset() {
  if (device_) device_->destroy_stream(id_);
  device_ = nullptr;
  id_ = 0;
}
inline Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, nullptr);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}
inline void Event::reset() {
  if (device_) device_->destroy_event(id_);
  device_ = nullptr;
  id_ = -1;
}
inline Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, nullptr);
    id_ = std::exchange(o.id_, -1);
  }
  return *this;
}

}  // namespace spillway::compute
