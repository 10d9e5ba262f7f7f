// MeteredDevice: a compute Device that forwards every call to another and counts the memory that
// goes through it: device bytes allocated and host bytes page-locked (host_alloc_pinned and
// host_register), now and at their peak. The benchmark hands the engine one wrapped around the
// backend's device (StreamingEngine::create(device, backend, ...)), so that peak HBM and pinned
// DRAM are exact whatever the engine allocates, without the engine keeping those figures itself.
// It wraps the device only: the ops run on the backend, whatever ops it has. For `bench --ops` it
// also times the device's own work on the step's streams, the conversions of the weights and the
// zeroing of the gradient buffers, through an OpTimes (set_op_times).
//
// Streams and events it creates belong to the wrapped device (their handles call it back).
// Thread-safety: as Device; the counters may be read from any thread. Ownership: wraps, does not
// own; the wrapped device must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "compute/device.h"
#include "worker/op-times.h"

namespace spillway::worker {

class MeteredDevice final : public compute::Device {
 public:
  explicit MeteredDevice(compute::Device& inner) : in_(inner) {}

  uint64_t device_bytes() const { return device_.now; }
  uint64_t peak_device_bytes() const { return device_.peak; }
  uint64_t pinned_bytes() const { return pinned_.now; }
  uint64_t peak_pinned_bytes() const { return pinned_.peak; }
  // Starts new peaks from what is held now (between measurements).
  void reset_peaks() {
    device_.reset_peak();
    pinned_.reset_peak();
  }
  // Times convert and fill_zero through `times` (null: not timed); it must outlive their calls.
  void set_op_times(OpTimes* times) { times_ = times; }

  compute::BackendKind kind() const override { return in_.kind(); }
  int ordinal() const override { return in_.ordinal(); }
  compute::DeviceInfo device_info() const override { return in_.device_info(); }
  Status device_memory_info(size_t* free_bytes, size_t* total_bytes) override {
    return in_.device_memory_info(free_bytes, total_bytes);
  }

  Result<void*> device_alloc(size_t bytes) override;
  void device_free(void* ptr) override;
  Result<void*> host_alloc_pinned(size_t bytes) override;
  void host_free_pinned(void* ptr) override;
  Status host_register(void* ptr, size_t bytes) override;
  void host_unregister(void* ptr) override;

  Result<compute::Stream> create_stream() override { return in_.create_stream(); }
  Result<compute::Event> create_event(bool timing = false) override {
    return in_.create_event(timing);
  }
  Status record_event(compute::EventId e, compute::StreamId s) override {
    return in_.record_event(e, s);
  }
  Status stream_wait_event(compute::StreamId s, compute::EventId e) override {
    return in_.stream_wait_event(s, e);
  }
  Status synchronize_event(compute::EventId e) override { return in_.synchronize_event(e); }
  Status synchronize_stream(compute::StreamId s) override { return in_.synchronize_stream(s); }
  Result<double> elapsed_s(compute::EventId start, compute::EventId end) override {
    return in_.elapsed_s(start, end);
  }

  Status copy_h2d(void* dst, const void* src, size_t bytes, compute::StreamId s) override {
    return in_.copy_h2d(dst, src, bytes, s);
  }
  Status copy_d2h(void* dst, const void* src, size_t bytes, compute::StreamId s) override {
    return in_.copy_d2h(dst, src, bytes, s);
  }
  Status copy_d2d(void* dst, const void* src, size_t bytes, compute::StreamId s) override {
    return in_.copy_d2d(dst, src, bytes, s);
  }
  Status convert(void* dst, DType dt, const void* src, DType st, size_t count,
                 compute::StreamId s) override;
  Status fill_zero(void* dst, size_t bytes, compute::StreamId s) override;

 protected:
  // Never called: the handles of create_stream/create_event are bound to the wrapped device.
  void destroy_stream(compute::StreamId) override {}
  void destroy_event(compute::EventId) override {}

 private:
  // Bytes held through one kind of call, by pointer, with the running and peak totals.
  struct Meter {
    std::mutex mu;
    std::unordered_map<void*, size_t> held;
    std::atomic<uint64_t> now{0}, peak{0};
    void add(void* ptr, size_t bytes);
    void remove(void* ptr);
    void reset_peak();
  };
  compute::Device& in_;
  Meter device_, pinned_;
  OpTimes* times_ = nullptr;
};

}  // namespace spillway::worker
