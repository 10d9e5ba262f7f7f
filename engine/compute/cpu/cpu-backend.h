// CpuBackend: the float32 host implementation of compute::Backend (DESIGN.md, "compute/").
//
// "Device" memory is aligned host memory counted against a configurable capacity, so the
// layer-streaming trainer meets the same out-of-memory limits in tests that it meets on a GPU.
// Streams and events exist only as validated ids: every op and copy runs synchronously on the
// calling thread (GEMMs through OpenBLAS's own threads, other ops through ThreadPool::global()),
// so an event is complete as soon as it is recorded. The op math lives in one file pair per op
// (cpu/rmsnorm.h, cpu/attention.h, ...); this class checks handles, owns scratch memory and
// dispatches.
//
// Not thread-safe (one trainer thread drives a backend, as for every Backend). The backend owns
// every device and pinned allocation it hands out and frees what is still live on destruction.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "compute/cpu/rope.h"
#include "core/buffer.h"

namespace spillway::compute {

struct CpuBackendOptions {
  // Bound on live device_alloc bytes (each rounded up to 256); 0 = unbounded.
  size_t device_capacity_bytes = 0;
  // OpenBLAS threads for GEMMs; 0 = the size of ThreadPool::global() (one per core).
  int blas_threads = 0;
  // Fill new device allocations with NaN, as cudaMalloc leaves garbage: a trainer that reads
  // memory it never wrote then fails loudly in CPU tests instead of silently reading zeros.
  bool poison_allocations = false;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options = {});
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  std::string name() const override { return "cpu"; }
  DType act_dtype() const override { return DType::kF32; }

  Result<void*> device_alloc(size_t bytes) override;
  void device_free(void* ptr) override;
  Result<void*> host_alloc_pinned(size_t bytes) override;
  void host_free_pinned(void* ptr) override;
  Status device_memory_info(size_t* free_bytes, size_t* total_bytes) override;

  Result<StreamId> create_stream() override;
  Result<EventId> create_event() override;
  Status record_event(EventId event, StreamId stream) override;
  Status stream_wait_event(StreamId stream, EventId event) override;
  Status synchronize_event(EventId event) override;
  Status synchronize_stream(StreamId stream) override;
  Status copy_h2d(void* dst_device, const void* src_host, size_t bytes, StreamId stream) override;
  Status copy_d2h(void* dst_host, const void* src_device, size_t bytes, StreamId stream) override;
  Status copy_d2d(void* dst, const void* src, size_t bytes, StreamId stream) override;
  Status upload_f32(void* dst_device, const float* src_host, size_t count, StreamId stream) override;
  Status download_f32(float* dst_host, const void* src_device, size_t count,
                      StreamId stream) override;
  Status fill_zero(void* dst_device, size_t bytes, StreamId stream) override;

  Status embedding_forward(void* out, const int32_t* ids, const void* table, int n, int d) override;
  Status embedding_backward(float* dtable, const int32_t* ids, const void* dout, int n,
                            int d) override;
  Status rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n, int d,
                         float eps) override;
  Status rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x, const void* w,
                          const float* rstd, int n, int d, bool accumulate_dx) override;
  Status linear_forward(void* y, const void* x, const void* w, const void* b, int n, int in,
                        int out) override;
  Status linear_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                         const void* w, int n, int in, int out, bool accumulate_dx) override;
  Status rope_forward(void* x, int batch, int seq, int heads, int head_dim, float theta,
                      const RopeScaling& scaling) override;
  Status rope_backward(void* dx, int batch, int seq, int heads, int head_dim, float theta,
                       const RopeScaling& scaling) override;
  Status attention_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                           int batch, int seq, int hq, int hkv, int head_dim) override;
  Status attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q,
                            const void* k, const void* v, const void* out, const float* lse,
                            int batch, int seq, int hq, int hkv, int head_dim) override;
  Status attention_key_bias_backward(float* db, const void* dout, const void* q, const void* k, const void* v,
                                     int batch, int seq, int hq, int hkv, int head_dim, float theta,
                                     const RopeScaling& scaling) override;
  Status swiglu_forward(void* out, const void* gate, const void* up, int n, int f) override;
  Status swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                         const void* up, int n, int f) override;
  Status add_inplace(void* y, const void* x, size_t count) override;
  Status lm_head_loss(double* loss_sum, void* dx, float* dw, const void* x, const void* w,
                      const int32_t* labels, int n, int d, int v, float loss_scale,
                      float* logits_out, int chunk) override;

  // --- CPU-only helpers ----------------------------------------------------------------------
  // Live device bytes (sum of rounded allocation sizes) and the most ever live at once.
  size_t device_bytes_in_use() const { return device_used_; }
  size_t device_peak_bytes() const { return device_peak_; }
  void reset_device_peak() { device_peak_ = device_used_; }
  // Requested bytes of the device allocation that contains `ptr`, from `ptr` to their end, or 0
  // when `ptr` is not inside a live device allocation (ops also accept plain host pointers on the CPU).
  size_t device_bytes_after(const void* ptr) const;

 private:
  Status check_stream(StreamId stream, const char* what) const;
  Status check_event(EventId event, const char* what) const;
  // Host scratch of at least `floats` floats, reused across calls (lm_head logits).
  Result<float*> scratch(size_t floats);
  // The cos/sin table for (seq, head_dim, theta, scaling), built once and cached.
  Result<const cpu::RopeTable*> rope_table(int seq, int head_dim, float theta,
                                           const RopeScaling& scaling);

  CpuBackendOptions options_;
  size_t device_total_ = 0;  // capacity reported by device_memory_info
  size_t device_used_ = 0, device_peak_ = 0;
  struct DeviceAlloc {
    size_t bytes;    // as requested: bounds embedding ids
    size_t rounded;  // as counted against the capacity
  };
  std::map<const char*, DeviceAlloc> device_allocs_;  // by start address
  std::set<void*> pinned_allocs_;
  int streams_ = 1;               // ids [0, streams_) are valid
  std::vector<bool> event_recorded_;  // indexed by EventId
  AlignedBuffer scratch_;
  std::vector<std::unique_ptr<cpu::RopeTable>> rope_tables_;
};

// make_cpu_backend (declared in compute/backend.h) with every option.
std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options);

}  // namespace spillway::compute
