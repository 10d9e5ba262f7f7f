// CudaBackend: the bf16 GPU implementation of compute::Device and compute::Backend
// (docs/architecture.md, "The compute backend"): one GPU of ordinal `device`, and its ops as the
// Backend's do_<op> (Backend::<op> checks the tensor references first, in debug builds).
//
// Lives in the module libspillway-cuda.so (cuda-module.cpp is its only exported entry), loaded at
// run time by compute/backend-loader.h, so nothing outside engine/compute/cuda links CUDA. The
// class owns one device: a dedicated non-blocking compute stream (stream 0, never the legacy
// default stream, which would serialise with every other stream), the streams and events it hands
// out (id-indexed tables with free lists, so ids stay small and are reused), and cuBLASLt through
// cuda::Gemm. Ops check their arguments and dispatch to the launchers of engine/compute/cuda/*.cuh
// on the cudaStream_t of their StreamId; scratch comes from the workspace (set_workspace), so no op
// allocates or synchronises.
//
// Attention runs on cuDNN's fused kernels where cuDNN is installed and covers the call (rows
// without packing; cudnn-attention.h), else on attention.cuh's; SPILLWAY_CUDNN=0 at create() keeps
// it on the module's own.
//
// Workspace layout: [cuBLASLt: Gemm::kWorkspaceBytes][op scratch: max over ops], each 256-aligned.
// Ops run in order on the one compute stream, so their scratch regions share one area; cuBLASLt's
// part is separate because lm_head_loss uses both at once.
//
// Errors: argument errors are kInvalidArgument naming the op and the values; cudaMalloc failures
// kOutOfMemory with what was asked and what is free; an asynchronous fault (illegal address, ECC,
// lost device) surfaces at the next synchronize_*/elapsed_s (or the next call that sees the sticky
// error) as kInternal "the GPU reported X; the run cannot continue on this device".
// Not thread-safe, as every Backend, except host_register/host_unregister (any thread). The
// backend owns every device and pinned allocation it hands out and frees what is still live on
// destruction.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "compute/backend.h"

namespace spillway::cuda {
class CudnnAttention;
class Gemm;
}  // namespace spillway::cuda

namespace spillway::compute {

// One GPU is both the device (memory, streams, events: Device) and what computes on it (the ops:
// Backend); device() is the object itself.
class CudaBackend final : public Backend, public Device {
 public:
  // Selects `device` and creates the compute stream and cuBLASLt. Errors a user can act on:
  // kNotFound "no CUDA GPU found" / no device of that ordinal; kUnsupported for a missing or too
  // old driver, a GPU older than sm_80, or one this module has no kernels for.
  static Result<std::unique_ptr<CudaBackend>> create(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device& device() const override { return const_cast<CudaBackend&>(*this); }
  BackendKind kind() const override { return BackendKind::kCuda; }
  int ordinal() const override { return device_; }
  using Device::act_dtype;
  using Device::facts;
  using Device::name;
  DeviceInfo device_info() const override { return info_; }

  Result<void*> device_alloc(size_t bytes) override;
  void device_free(void* ptr) override;
  Result<void*> host_alloc_pinned(size_t bytes) override;
  void host_free_pinned(void* ptr) override;
  Status host_register(void* ptr, size_t bytes) override;
  void host_unregister(void* ptr) override;
  Status device_memory_info(size_t* free_bytes, size_t* total_bytes) override;

  Result<Stream> create_stream() override;
  Result<Event> create_event(bool timing = false) override;
  Status record_event(EventId event, StreamId stream) override;
  Status stream_wait_event(StreamId stream, EventId event) override;
  Status synchronize_event(EventId event) override;
  Status synchronize_stream(StreamId stream) override;
  Result<double> elapsed_s(EventId start, EventId end) override;

  Status copy_h2d(void* dst_device, const void* src_host, size_t bytes, StreamId stream) override;
  Status copy_d2h(void* dst_host, const void* src_device, size_t bytes, StreamId stream) override;
  Status copy_d2d(void* dst, const void* src, size_t bytes, StreamId stream) override;
  Status convert(void* dst, DType dst_type, const void* src, DType src_type, size_t count,
                 StreamId stream) override;
  Status fill_zero(void* dst_device, size_t bytes, StreamId stream) override;

  Status set_workspace(void* ptr, size_t bytes, const OpShapes& shapes) override;

  // A group of GPUs through NCCL (nccl-communicator.h): every member must be a CudaBackend.
  Result<std::vector<std::unique_ptr<Communicator>>> create_communicators(
      std::span<Backend* const> group, ProcessExchange* processes) override;
  // The CUDA stream behind `stream`, with this device made current on the calling thread: for
  // the group's collectives. kInvalidArgument for an unknown id.
  Result<cudaStream_t> cuda_stream(StreamId stream, const char* what) const {
    return stream_of(stream, what);
  }

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

 protected:
  void destroy_stream(StreamId stream) override;
  void destroy_event(EventId event) override;

 private:
  struct EventSlot {
    cudaEvent_t event = nullptr;  // null: free
    bool timing = false;
  };
  // The op scratch part of the workspace: `floats` floats at `ptr`.
  struct Scratch {
    float* ptr = nullptr;
    size_t floats = 0;
  };

  CudaBackend(int device, DeviceInfo info);
  Status init();

  // Makes this backend's device current on the calling thread when it is not already
  // (make_current in cuda-backend.cpp: no cudaSetDevice for a thread that stays on one GPU).
  Status use_device(const char* what) const;
  // The CUDA stream of `stream`, with the device made current; kInvalidArgument for an unknown id.
  Result<cudaStream_t> stream_of(StreamId stream, const char* what) const;
  Result<cudaEvent_t> event_of(EventId event, const char* what) const;
  // cuBLASLt's part of the workspace, or kInvalidArgument when set_workspace was not called.
  Result<void*> gemm_workspace(const char* what) const;
  // The op scratch, checked to hold `floats` floats.
  Result<Scratch> scratch(size_t floats, const char* what) const;

  int device_;
  DeviceInfo info_;
  std::unique_ptr<cuda::Gemm> gemm_;
  // cuDNN's fused attention (cudnn-attention.h), null when cuDNN is missing or turned off: the
  // module's own kernels then run every attention call, as they run packed rows always.
  std::unique_ptr<cuda::CudnnAttention> cudnn_;
  std::vector<cudaStream_t> streams_;  // by StreamId; [0] the compute stream; null: free
  std::vector<StreamId> free_streams_;
  std::vector<EventSlot> events_;  // by EventId
  std::vector<EventId> free_events_;
  void* ws_gemm_ = nullptr;  // Gemm::kWorkspaceBytes, null until set_workspace
  Scratch ws_scratch_;
  std::unordered_set<void*> device_allocs_, pinned_allocs_;
  std::mutex registered_mu_;  // host_register may run on any thread
  std::unordered_set<void*> registered_;
};

}  // namespace spillway::compute
