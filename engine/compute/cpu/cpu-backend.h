// CpuBackend: the float32 host implementation of compute::Device and compute::Backend
// (docs/architecture.md, "The compute backend"): the host is the device, and its ops are the
// Backend's do_<op> (Backend::<op> checks the tensor references first).
//
// "Device" memory is aligned host memory counted against a configurable capacity, so the
// layer-streaming trainer meets the same out-of-memory limits in tests that it meets on a GPU.
// Ops run on the thread that executes their stream's work (GEMMs through OpenBLAS's own threads,
// other ops through ThreadPool::global()). By default that is the calling thread, at once: every
// result is visible when the call returns and an event completes when it is recorded. With
// `strict_streams` the work is queued on its stream and runs only when someone waits for it
// (cpu/cpu-streams.h), so a trainer that forgets a stream_wait_event or a synchronize reads stale
// data in the CPU tests, as it would on a GPU. Arguments (shapes, handles, tensor extents, the
// workspace) are checked when an op is called in either mode; what depends on device data (token
// ids, labels) is checked when the op runs, and in strict mode that error is returned by the
// synchronize that ran it.
//
// The op math lives in one file pair per op (cpu/rmsnorm.h, cpu/attention.h, ...); this class
// checks arguments, carves the ops' scratch from the workspace and dispatches. Ops that need
// scratch on the CPU: attention_forward, attention_backward, attention_key_bias_backward and
// lm_head_loss; each returns kInvalidArgument, saying how much it needs, when no workspace or too
// small a one is set. A tensor pointer inside a live device allocation must have its whole extent
// inside it (kInvalidArgument otherwise); pointers to other host memory are accepted, as device
// memory is host memory here (the op tests pass std::vector storage).
//
// Not thread-safe (one trainer thread drives a backend, as for every Backend), except
// host_register / host_unregister. The backend owns every device and pinned allocation it hands
// out and frees what is still live on destruction (queued work that was never waited for is
// dropped then).
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "compute/backend.h"
#include "compute/cpu/cpu-streams.h"
#include "compute/cpu/rope.h"

namespace spillway::compute {

struct CpuBackendOptions {
  // Bound on live device_alloc bytes (each rounded up to 256); 0 = unbounded.
  size_t device_capacity_bytes = 0;
  // OpenBLAS threads for GEMMs; 0 = the size of ThreadPool::global() (one per core).
  int blas_threads = 0;
  // Fill new device allocations with NaN, as cudaMalloc leaves garbage: a trainer that reads
  // memory it never wrote then fails loudly in CPU tests instead of silently reading zeros.
  bool poison_allocations = false;
  // Queue every op, copy, conversion, fill and event record on its stream until someone waits
  // for it (cpu/cpu-streams.h): the GPU's ordering rules, enforced.
  bool strict_streams = false;
};

// The CPU is both the device (memory, streams, events: Device) and what computes on it (the ops:
// Backend); device() is the object itself.
class CpuBackend final : public Backend, public Device {
 public:
  explicit CpuBackend(const CpuBackendOptions& options = {});
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  Device& device() const override { return const_cast<CpuBackend&>(*this); }
  BackendKind kind() const override { return BackendKind::kCpu; }
  int ordinal() const override { return 0; }
  using Device::act_dtype;
  using Device::facts;
  using Device::name;
  DeviceInfo device_info() const override;

  // device_free and host_free_pinned first run all queued work (strict mode), as cudaFree and
  // cudaFreeHost synchronise the device.
  Result<void*> device_alloc(size_t bytes) override;
  void device_free(void* ptr) override;
  Result<void*> host_alloc_pinned(size_t bytes) override;
  void host_free_pinned(void* ptr) override;
  // No pinning on the CPU; kInvalidArgument for a null or empty range or one already registered.
  Status host_register(void* ptr, size_t bytes) override;
  void host_unregister(void* ptr) override;
  Status device_memory_info(size_t* free_bytes, size_t* total_bytes) override;

  Result<Stream> create_stream() override;
  Result<Event> create_event(bool timing = false) override;
  Status record_event(EventId event, StreamId stream) override;
  Status stream_wait_event(StreamId stream, EventId event) override;
  Status synchronize_event(EventId event) override;
  Status synchronize_stream(StreamId stream) override;
  // From host clock readings taken when each record ran (strict mode: when its stream was run).
  Result<double> elapsed_s(EventId start, EventId end) override;

  Status copy_h2d(void* dst_device, const void* src_host, size_t bytes, StreamId stream) override;
  Status copy_d2h(void* dst_host, const void* src_device, size_t bytes, StreamId stream) override;
  Status copy_d2d(void* dst, const void* src, size_t bytes, StreamId stream) override;
  Status convert(void* dst, DType dst_type, const void* src, DType src_type, size_t count,
                 StreamId stream) override;
  Status fill_zero(void* dst_device, size_t bytes, StreamId stream) override;

  // kInvalidArgument for a null pointer with bytes > 0, a pointer not aligned to 256 (what
  // device_alloc returns and cuBLASLt needs on the GPU), fewer than workspace_bytes(shapes) bytes,
  // or a range beyond its device allocation. set_workspace(nullptr, 0, {}) takes it back. Queued
  // ops keep using the workspace that was set when they were called.
  Status set_workspace(void* ptr, size_t bytes, const OpShapes& shapes) override;

  // A group of CPU backends (cpu/cpu-communicator.h): every member must be a CpuBackend.
  Result<std::vector<std::unique_ptr<Communicator>>> create_communicators(
      std::span<Backend* const> group, ProcessExchange* processes) override;
  // Runs `work` on `stream` as an op runs (at once, or queued in strict mode): for the group's
  // collectives. kInvalidArgument for an unknown stream.
  Status submit_work(StreamId stream, std::function<Status()> work);

 protected:
  // The ops (Backend::<op> checks the tensors, then calls these).
  Status do_embedding_forward(void* out, const int32_t* ids, const void* table, int n, int d,
                              float scale, StreamId stream) override;
  Status do_embedding_backward(float* dtable, const int32_t* ids, const void* dout, int n, int d,
                               float scale, StreamId stream) override;
  Status do_rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n, int d,
                            float eps, float weight_offset, StreamId stream) override;
  Status do_residual_rmsnorm_forward(void* sum, void* out, float* rstd, const void* x,
                                     const void* r, const void* w, int n, int d, float eps,
                                     float weight_offset, StreamId stream) override;
  Status do_rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x, const void* w,
                             const float* rstd, int n, int d, bool accumulate_dx,
                             float weight_offset, StreamId stream) override;
  Status do_linear_forward(void* y, const void* x, const void* w, const void* b, int n, int in,
                           int out, StreamId stream) override;
  Status do_linear_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                            const void* w, int n, int in, int out, bool accumulate_dx,
                            StreamId stream) override;
  Status do_rope_forward(void* x, int batch, int seq, int heads, int head_dim, float theta,
                         const RopeScaling& scaling, const int32_t* positions,
                         StreamId stream) override;
  Status do_rope_backward(void* dx, int batch, int seq, int heads, int head_dim, float theta,
                          const RopeScaling& scaling, const int32_t* positions,
                          StreamId stream) override;
  Status do_attention_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                              int batch, int seq, int hq, int hkv, int head_dim, float scale,
                              int window, const int32_t* positions, PackedBounds packed,
                              StreamId stream) override;
  Status do_attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q,
                               const void* k, const void* v, const void* out, const float* lse,
                               int batch, int seq, int hq, int hkv, int head_dim, float scale,
                               int window, const int32_t* positions, PackedBounds packed,
                               StreamId stream) override;
  Status do_attention_key_bias_backward(float* db, const void* dout, const void* q, const void* k,
                                        const void* v, int batch, int seq, int hq, int hkv,
                                        int head_dim, float theta, const RopeScaling& scaling,
                                        const int32_t* positions, StreamId stream) override;
  Status do_swiglu_forward(void* out, const void* gate, const void* up, int n, int f,
                           StreamId stream) override;
  Status do_swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                            const void* up, int n, int f, StreamId stream) override;
  Status do_geglu_forward(void* out, const void* gate, const void* up, int n, int f,
                          StreamId stream) override;
  Status do_geglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                           const void* up, int n, int f, StreamId stream) override;
  Status do_add_inplace(void* y, const void* x, size_t count, StreamId stream) override;
  Status do_sum_squares(double* out, const float* x, size_t count, StreamId stream) override;
  Status do_adamw(float* param, float* m, float* v, const float* grad, size_t count,
                  const AdamWCoeffs& k, float grad_scale, StreamId stream) override;
  Status do_lm_head_loss(float* losses, void* dx, float* dw, const void* x, const void* w,
                         const int32_t* labels, int n, int d, int v, float loss_scale,
                         float* logits_out, int chunk, StreamId stream) override;

 public:
  // --- CPU-only helpers ----------------------------------------------------------------------
  // Live device bytes (sum of rounded allocation sizes) and the most ever live at once.
  size_t device_bytes_in_use() const { return device_used_; }
  size_t device_peak_bytes() const { return device_peak_; }
  void reset_device_peak() { device_peak_ = device_used_; }
  // Requested bytes of the device allocation that contains `ptr`, from `ptr` to their end, or 0
  // when `ptr` is not inside a live device allocation (ops also accept plain host pointers on the
  // CPU).
  size_t device_bytes_after(const void* ptr) const;

 protected:
  // Strict mode: the stream's queued work runs first. A failure nobody waited for is logged.
  void destroy_stream(StreamId stream) override;
  void destroy_event(EventId event) override;

 private:
  // One tensor argument of an op: `bytes` from `ptr` must lie inside ptr's device allocation
  // (when it is in one); null is an error unless `optional` (or bytes == 0).
  struct Tensor {
    const char* name;
    const void* ptr;
    size_t bytes;
    bool optional = false;
  };
  Status check_tensors(const char* op, std::initializer_list<Tensor> tensors) const;
  // A gated linear unit's op (swiglu, geglu): the stream, the shape n × f, and each tensor (name,
  // pointer) float32 [n, f] inside its allocation, as check_tensors, in the order given.
  Status check_glu(const char* op, StreamId stream, int n, int f,
                   std::initializer_list<std::pair<const char*, const void*>> tensors);
  // The workspace for an op that needs `bytes` of scratch (null when it needs none), or
  // kInvalidArgument saying what is missing; `shape` describes the call for the message.
  Result<void*> workspace_for(const char* op, size_t bytes, const std::string& shape) const;
  // The cos/sin table for (seq, head_dim, theta, scaling), built once and cached. Kept out of the
  // workspace: it is a constant of the model's shape, built once, not scratch of one call (the
  // CUDA kernels compute their angles in place and need neither). Shared, so queued work keeps a
  // table alive when the cache drops it.
  Result<std::shared_ptr<const cpu::RopeTable>> rope_table(int seq, int head_dim, float theta,
                                                           const RopeScaling& scaling);

  CpuBackendOptions options_;
  cpu::CpuStreams streams_;
  size_t device_total_ = 0;  // capacity reported by device_memory_info
  size_t device_used_ = 0, device_peak_ = 0;
  struct DeviceAlloc {
    size_t bytes;    // as requested: bounds tensor extents and embedding ids
    size_t rounded;  // as counted against the capacity
  };
  std::map<const char*, DeviceAlloc> device_allocs_;  // by start address
  std::set<void*> pinned_allocs_;
  std::mutex registered_mu_;  // host_register may run on any thread
  std::unordered_map<const void*, size_t> registered_;
  void* workspace_ = nullptr;  // borrowed from the caller (set_workspace)
  size_t workspace_size_ = 0;
  std::vector<std::shared_ptr<const cpu::RopeTable>> rope_tables_;
};

// make_cpu_backend (declared in compute/backend.h) with every option.
std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options);

}  // namespace spillway::compute
