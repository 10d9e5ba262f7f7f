// Backend: the compute interface the layer-streaming trainer runs on (DESIGN.md, "compute/").
//
// A backend owns device memory, streams and events, and runs the transformer ops, forward and
// backward, each enqueued on an explicit stream. The CPU backend (compute/cpu) runs everything in
// float32 on host memory with OpenBLAS and the thread pool; the CUDA backend (compute/cuda, loaded
// at run time by compute/backend-loader.h) runs bf16 activations and weights with fp32
// accumulation. Both keep the GPU's contract: work on one stream runs in order, work on two
// streams is ordered only by events (record_event on the producer, stream_wait_event on the
// consumer), and the host sees the results of asynchronous work only after synchronize_*. The CPU
// backend's strict mode (CpuBackendOptions::strict_streams) holds each stream's work until someone
// waits on it, so a missing stream_wait_event or synchronize fails the CPU tests.
//
// Memory. Every tensor an op touches is device memory: activations of `act_dtype()` (float32 on
// the CPU, bf16 on CUDA), fp32 gradients, fp32 statistics, and int32 token ids and labels (the
// trainer uploads a step's ids and labels once and reads per-token losses back once). Weights are
// `act_dtype()`; the fp32 master weights become the compute copy through an explicit convert().
// Ops that need scratch (the LM head's logits chunk, partial sums for deterministic reductions,
// cuBLASLt's workspace) take it from one workspace that the caller carves from its arena and hands
// over with set_workspace(), sized by workspace_bytes(): no op allocates memory.
//
// Determinism: ops use no atomics whose order changes results; the same inputs give the same bits.
// Errors: every call returns a Status: kInvalidArgument for bad shapes or handles, or
// when an op needs a workspace that is missing or too small, kOutOfMemory from allocations, kInternal
// for a failed launch; an asynchronous failure (a fault inside a kernel, a lost device) surfaces at the
// next synchronize_* or elapsed_s, as kInternal with the backend's message. Methods are not
// thread-safe: one trainer thread drives a backend (host_register may be called from any thread).
//
// Conventions (match Hugging Face transformers' Llama / Mistral / Qwen2):
//   - linear:   y[n, out] = x[n, in] · W[out, in]ᵀ + b[out]   (torch.nn.Linear)
//   - rmsnorm:  y = x / sqrt(mean(x²) + eps) · w               (LlamaRMSNorm, fp32 statistics)
//   - rope:     rotate-half, q' = q·cos + rotate_half(q)·sin with inv_freq from rope_theta and
//               optional Llama-3 scaling (transformers' _compute_llama3_parameters)
//   - attention: causal, GQA (query head h uses kv head h / (n_heads / n_kv_heads)), scale 1/sqrt(d)
//   - swiglu:   y = silu(gate) · up
//   - loss:     cross-entropy over targets != -100; labels are already shifted
// "Accumulate" outputs (`d*` of weights) add into the existing contents so gradients from several
// micro-batches sum without extra buffers; other outputs overwrite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "compute/backend-facts.h"
#include "core/dtype.h"
#include "core/status.h"

namespace spillway::compute {

// Stream and event ids. Stream 0 is the backend's default compute stream and always valid; other
// streams and every event are created by the backend and owned by Stream / Event handles.
using StreamId = int;
using EventId = int;

class Backend;

// An owned stream: destroyed (after its work completes) when the handle goes. Move-only; must not
// outlive its backend. Converts to its StreamId for the op calls.
class Stream {
 public:
  Stream() = default;
  Stream(Backend* backend, StreamId id) : backend_(backend), id_(id) {}
  Stream(Stream&& o) noexcept : backend_(std::exchange(o.backend_, nullptr)), id_(std::exchange(o.id_, 0)) {}
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { reset(); }
  void reset();
  StreamId id() const { return id_; }
  operator StreamId() const { return id_; }  // NOLINT: a handle stands for its id

 private:
  Backend* backend_ = nullptr;
  StreamId id_ = 0;
};

// An owned event, as Stream. An event that was never recorded counts as complete.
class Event {
 public:
  Event() = default;
  Event(Backend* backend, EventId id) : backend_(backend), id_(id) {}
  Event(Event&& o) noexcept : backend_(std::exchange(o.backend_, nullptr)), id_(std::exchange(o.id_, -1)) {}
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { reset(); }
  void reset();
  EventId id() const { return id_; }
  operator EventId() const { return id_; }  // NOLINT

 private:
  Backend* backend_ = nullptr;
  EventId id_ = -1;
};

// Llama-3 rope scaling ("rope_type": "llama3"); factor 0 means none.
struct RopeScaling {
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

// What the backend runs on, for logs, the plan and the GUI.
struct DeviceInfo {
  std::string name;               // "NVIDIA H100 80GB HBM3", "CPU (16 threads)"
  uint64_t total_bytes = 0;       // device memory (the CPU backend: its capacity or physical RAM)
  int compute_capability = 0;     // 90 for sm_90; 0 on the CPU
  int multiprocessors = 0;        // SMs; threads on the CPU
  std::string driver;             // "CUDA driver 13.0, runtime 13.0"; empty on the CPU
  std::string pci_bus_id;         // "0000:01:00.0" (domain:bus:device.function); empty on the CPU.
                                  // Names the same GPU to NVML whatever CUDA_VISIBLE_DEVICES says
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  // What this kind of backend is and needs (backend-facts.h): act dtype, alignment, CPU or GPU.
  const BackendFacts& facts() const { return backend_facts(kind()); }
  std::string name() const { return backend_name(kind()); }  // "cpu", "cuda"
  DType act_dtype() const { return facts().act_dtype; }      // F32 on the CPU, BF16 on CUDA
  virtual DeviceInfo device_info() const = 0;

  // --- memory -----------------------------------------------------------------------------
  // Device memory: `bytes` aligned to kDeviceAlignment (256). kOutOfMemory says what was asked and what is free.
  // Not for the hot loop (cudaMalloc synchronises): callers carve one arena at start.
  virtual Result<void*> device_alloc(size_t bytes) = 0;
  virtual void device_free(void* ptr) = 0;
  // Page-locked host memory for async copies (plain aligned memory on the CPU backend).
  virtual Result<void*> host_alloc_pinned(size_t bytes) = 0;
  virtual void host_free_pinned(void* ptr) = 0;
  // Pins existing host memory [ptr, ptr + bytes) so copies from/to it run at link speed
  // (cudaHostRegister; a no-op on the CPU). Unregister before the memory is freed.
  virtual Status host_register(void* ptr, size_t bytes) = 0;
  virtual void host_unregister(void* ptr) = 0;
  // Bytes of device memory free and in total (the CPU backend reports its configured capacity).
  virtual Status device_memory_info(size_t* free_bytes, size_t* total_bytes) = 0;

  // --- streams, events ----------------------------------------------------------------------
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

  // --- copies and conversions (asynchronous on `stream`) -------------------------------------
  virtual Status copy_h2d(void* dst_device, const void* src_host, size_t bytes, StreamId stream) = 0;
  virtual Status copy_d2h(void* dst_host, const void* src_device, size_t bytes, StreamId stream) = 0;
  virtual Status copy_d2d(void* dst, const void* src, size_t bytes, StreamId stream) = 0;
  // dst[i] = (dst_type) src[i] for i < count, both on the device; F32, BF16 (round to nearest
  // even, as torch's .to(torch.bfloat16)) and the identity. kInvalidArgument for other pairs.
  virtual Status convert(void* dst, DType dst_type, const void* src, DType src_type, size_t count,
                         StreamId stream) = 0;
  virtual Status fill_zero(void* dst_device, size_t bytes, StreamId stream) = 0;

  // --- workspace ----------------------------------------------------------------------------
  // Bytes of scratch the ops need for calls up to `shapes` (a multiple of kDeviceAlignment):
  // compute::workspace_bytes(kind(), shapes), which the planner asks without a backend.
  size_t workspace_bytes(const OpShapes& shapes) const { return compute::workspace_bytes(kind(), shapes); }
  // Hands the ops `bytes` of device memory at `ptr` (at least workspace_bytes(shapes)); the
  // backend borrows it until the next set_workspace or its destruction. Ops on several streams
  // must not run at once while they share it (the trainer runs every op on one compute stream).
  virtual Status set_workspace(void* ptr, size_t bytes, const OpShapes& shapes) = 0;

  // --- ops, each on `stream` -----------------------------------------------------------------
  // out[n, d] = table[ids[n], :]; ids device int32 in [0, vocab) (checked by the caller: the
  // trainer validates a batch on the host before it uploads it).
  virtual Status embedding_forward(void* out, const int32_t* ids, const void* table, int n, int d,
                                   StreamId stream) = 0;
  // dtable[ids[n], :] += dout[n, :]   (dtable fp32, accumulate; duplicate ids sum in token order)
  virtual Status embedding_backward(float* dtable, const int32_t* ids, const void* dout, int n, int d,
                                    StreamId stream) = 0;

  // out[n, d] = x / sqrt(mean(x²) + eps) · w;  rstd[n] (fp32) saved for backward.
  virtual Status rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n, int d,
                                 float eps, StreamId stream) = 0;
  // Fused residual + norm (the slot for fused kernels): sum[n, d] = x + r, then
  // out = rmsnorm(sum) with rstd as rmsnorm_forward. `sum` may alias x.
  virtual Status residual_rmsnorm_forward(void* sum, void* out, float* rstd, const void* x, const void* r,
                                          const void* w, int n, int d, float eps, StreamId stream) = 0;
  // dx[n, d] (overwrite, or add when accumulate_dx), dw[d] += (fp32). May use the workspace.
  virtual Status rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x, const void* w,
                                  const float* rstd, int n, int d, bool accumulate_dx, StreamId stream) = 0;

  // y[n, out] = x[n, in] · W[out, in]ᵀ (+ b[out] when b != nullptr)
  virtual Status linear_forward(void* y, const void* x, const void* w, const void* b, int n, int in, int out,
                                StreamId stream) = 0;
  // dx[n, in] = dy · W (overwrite, or add when accumulate_dx; skipped when dx == nullptr),
  // dw[out, in] += dyᵀ · x (fp32), db[out] += Σ_n dy (fp32, skipped when db == nullptr).
  virtual Status linear_backward(void* dx, float* dw, float* db, const void* dy, const void* x, const void* w,
                                 int n, int in, int out, bool accumulate_dx, StreamId stream) = 0;

  // In place on x[b, t, heads, head_dim] for positions 0..t-1 of each sequence.
  virtual Status rope_forward(void* x, int batch, int seq, int heads, int head_dim, float theta,
                              const RopeScaling& scaling, StreamId stream) = 0;
  // In place on dx: the transpose of rope_forward (rotation by -angle).
  virtual Status rope_backward(void* dx, int batch, int seq, int heads, int head_dim, float theta,
                               const RopeScaling& scaling, StreamId stream) = 0;

  // Causal GQA attention. q[b, t, hq, d], k/v[b, t, hkv, d] → out[b, t, hq, d];
  // lse[b, hq, t] (fp32 log-sum-exp of the scaled scores) saved for backward. May use the workspace.
  virtual Status attention_forward(void* out, float* lse, const void* q, const void* k, const void* v, int batch,
                                   int seq, int hq, int hkv, int head_dim, StreamId stream) = 0;
  // dq[b, t, hq, d], dk/dv[b, t, hkv, d] (overwrite) from dout and the forward's inputs/outputs.
  // Uses the workspace.
  virtual Status attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k,
                                    const void* v, const void* out, const float* lse, int batch, int seq, int hq,
                                    int hkv, int head_dim, StreamId stream) = 0;
  // db[hkv, d] += ∂loss/∂b_k, the gradient of the key projection's bias (fp32, accumulated), from
  // the attention's dout and its inputs q, k after RoPE and v, RoPE parameters as for rope_forward.
  // Apart from dk because its exact value is a near-total cancellation that sums of dk leave as
  // noise (formula and source: cpu/attention-key-bias.h); the caller then passes no bias gradient
  // to the key projection's linear_backward. Uses the workspace.
  virtual Status attention_key_bias_backward(float* db, const void* dout, const void* q, const void* k,
                                             const void* v, int batch, int seq, int hq, int hkv, int head_dim,
                                             float theta, const RopeScaling& scaling, StreamId stream) = 0;

  // out[n, f] = silu(gate) · up
  virtual Status swiglu_forward(void* out, const void* gate, const void* up, int n, int f, StreamId stream) = 0;
  // dgate[n, f], dup[n, f] (overwrite)
  virtual Status swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate, const void* up, int n,
                                 int f, StreamId stream) = 0;

  // y[i] += x[i] for i < count (residual connections)
  virtual Status add_inplace(void* y, const void* x, size_t count, StreamId stream) = 0;

  // *out = Σ x[i]² for i < count: x fp32 (a block's gradient, [count]), out one double; both
  // device memory. The squares are summed in double (each is exact there), so this is the block's
  // part of the global gradient norm (torch.nn.utils.clip_grad_norm_) without the gradients
  // leaving the device. Deterministic: the split into partial sums depends on `count` alone and
  // the partials are combined in a fixed order, so the same x gives the same bits whatever the
  // thread count or grid; the CPU's order (cpu/reduce.h) and CUDA's (cuda/reduce.cuh) differ, so
  // the two backends agree to rounding (about 1e-15 relative), not bit for bit. count == 0
  // writes 0. CUDA takes its partial sums (at most 8 KiB) from the workspace, which
  // workspace_bytes counts for any shapes; the CPU needs none.
  virtual Status sum_squares(double* out, const float* x, size_t count, StreamId stream) = 0;

  // Fused, chunked LM head + cross-entropy, forward and backward in one call; logits for at most
  // `chunk` tokens exist at a time (in the workspace). x[n, d] is the final-normed hidden state,
  // w[v, d] the head, labels[n] device int32 (-100 ignored). Writes losses[n] (fp32, device): the
  // CE of each token, 0 where ignored. With `loss_scale` != 0 (the caller passes 1 / total targets
  // of the whole step) also writes dx[n, d] = ∂(loss_scale·Σ CE)/∂x and adds dw[v, d] += ∂/∂w
  // (fp32). With loss_scale == 0 only the losses are computed (eval; dx and dw may be null). When
  // logits_out != nullptr the logits [n, v] (fp32, device) are also written (tests, generation).
  virtual Status lm_head_loss(float* losses, void* dx, float* dw, const void* x, const void* w,
                              const int32_t* labels, int n, int d, int v, float loss_scale, float* logits_out,
                              int chunk, StreamId stream) = 0;

 protected:
  friend class Stream;
  friend class Event;
  // Called by the handles' destructors.
  virtual void destroy_stream(StreamId stream) = 0;
  virtual void destroy_event(EventId event) = 0;
};

inline void Stream::reset() {
  if (backend_) backend_->destroy_stream(id_);
  backend_ = nullptr;
  id_ = 0;
}
inline Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    reset();
    backend_ = std::exchange(o.backend_, nullptr);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}
inline void Event::reset() {
  if (backend_) backend_->destroy_event(id_);
  backend_ = nullptr;
  id_ = -1;
}
inline Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    reset();
    backend_ = std::exchange(o.backend_, nullptr);
    id_ = std::exchange(o.id_, -1);
  }
  return *this;
}

// The CPU backend: float32, OpenBLAS GEMMs, the global thread pool. `device_capacity_bytes`
// bounds device_alloc (the "device" arena that makes layers stream in tests); 0 = unbounded.
std::unique_ptr<Backend> make_cpu_backend(size_t device_capacity_bytes = 0);

}  // namespace spillway::compute
