// Backend: the compute interface the layer-streaming trainer runs on (DESIGN.md, "compute/").
//
// A backend owns device memory, streams and events, and runs the transformer ops, forward and
// backward. The CPU backend (compute/cpu) runs everything in float32 on host memory with OpenBLAS
// and the thread pool; a stream there executes synchronously, so events are always complete. The
// CUDA backend (compute/cuda) keeps the same contract: ops are enqueued on a stream, copies on
// their own copy streams, and ordering between streams is expressed only with events.
//
// Tensors are raw pointers to device memory of `act_dtype()` (activations) — float32 on the CPU —
// with their shapes in comments and arguments. Weight pointers point into a layer's block in the
// device arena. Every op returns a Status: kInvalidArgument for bad shapes, kInternal for a
// failed launch. Methods are not thread-safe: one trainer thread drives a backend.
//
// Conventions (match Hugging Face transformers' Llama / Mistral / Qwen2):
//   - linear:   y[n, out] = x[n, in] · W[out, in]ᵀ + b[out]   (torch.nn.Linear)
//   - rmsnorm:  y = x / sqrt(mean(x²) + eps) · w               (LlamaRMSNorm, fp32 statistics)
//   - rope:     rotate-half, q' = q·cos + rotate_half(q)·sin with inv_freq from rope_theta and
//               optional Llama-3 scaling (transformers' _compute_llama3_parameters)
//   - attention: causal, GQA (query head h uses kv head h / (n_heads / n_kv_heads)), scale 1/sqrt(d)
//   - swiglu:   y = silu(gate) · up
//   - loss:     mean cross-entropy over targets != -100; labels are already shifted
// "Accumulate" outputs (`d*` of weights) add into the existing contents so gradients from several
// micro-batches sum without extra buffers; other outputs overwrite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace spillway::compute {

// Opaque stream and event handles; 0 is the default compute stream.
using StreamId = int;
using EventId = int;

// Llama-3 rope scaling ("rope_type": "llama3"); factor 0 means none.
struct RopeScaling {
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual DType act_dtype() const = 0;   // F32 on the CPU, BF16 on CUDA

  // --- memory -----------------------------------------------------------------------------
  // Device memory: `bytes` aligned to 256. kOutOfMemory when the device cannot hold it.
  virtual Result<void*> device_alloc(size_t bytes) = 0;
  virtual void device_free(void* ptr) = 0;
  // Page-locked host memory for async copies (plain aligned memory on the CPU backend).
  virtual Result<void*> host_alloc_pinned(size_t bytes) = 0;
  virtual void host_free_pinned(void* ptr) = 0;
  // Bytes of device memory free and in total (the CPU backend reports its configured capacity).
  virtual Status device_memory_info(size_t* free_bytes, size_t* total_bytes) = 0;

  // --- streams, events, copies --------------------------------------------------------------
  virtual Result<StreamId> create_stream() = 0;
  virtual Result<EventId> create_event() = 0;
  virtual Status record_event(EventId event, StreamId stream) = 0;
  // Work enqueued on `stream` after this call waits for `event`.
  virtual Status stream_wait_event(StreamId stream, EventId event) = 0;
  virtual Status synchronize_event(EventId event) = 0;
  virtual Status synchronize_stream(StreamId stream) = 0;
  // Asynchronous copies of `bytes` bytes on `stream`.
  virtual Status copy_h2d(void* dst_device, const void* src_host, size_t bytes, StreamId stream) = 0;
  virtual Status copy_d2h(void* dst_host, const void* src_device, size_t bytes, StreamId stream) = 0;
  virtual Status copy_d2d(void* dst, const void* src, size_t bytes, StreamId stream) = 0;
  // Host fp32 → device act_dtype (the streamed compute copy of weights) and back (fp32 gradients).
  virtual Status upload_f32(void* dst_device, const float* src_host, size_t count, StreamId stream) = 0;
  virtual Status download_f32(float* dst_host, const void* src_device, size_t count, StreamId stream) = 0;
  virtual Status fill_zero(void* dst_device, size_t bytes, StreamId stream) = 0;

  // --- ops (on the compute stream 0) ---------------------------------------------------------
  // out[n, d] = table[ids[n], :]; ids are host int32 in [0, vocab). kInvalidArgument on a bad id.
  virtual Status embedding_forward(void* out, const int32_t* ids, const void* table, int n, int d) = 0;
  // dtable[ids[n], :] += dout[n, :]   (dtable fp32, accumulate)
  virtual Status embedding_backward(float* dtable, const int32_t* ids, const void* dout, int n, int d) = 0;

  // out[n, d] = x / sqrt(mean(x²) + eps) · w;  rstd[n] (fp32) saved for backward.
  virtual Status rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n, int d,
                                 float eps) = 0;
  // dx[n, d] (overwrite, or add when accumulate_dx), dw[d] += (fp32)
  virtual Status rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x, const void* w,
                                  const float* rstd, int n, int d, bool accumulate_dx) = 0;

  // y[n, out] = x[n, in] · W[out, in]ᵀ (+ b[out] when b != nullptr)
  virtual Status linear_forward(void* y, const void* x, const void* w, const void* b, int n, int in,
                                int out) = 0;
  // dx[n, in] = dy · W (overwrite, or add when accumulate_dx; skipped when dx == nullptr),
  // dw[out, in] += dyᵀ · x (fp32), db[out] += Σ_n dy (fp32, skipped when db == nullptr)
  virtual Status linear_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                                 const void* w, int n, int in, int out, bool accumulate_dx) = 0;

  // In place on x[b, t, heads, head_dim] for positions 0..t-1 of each sequence.
  virtual Status rope_forward(void* x, int batch, int seq, int heads, int head_dim, float theta,
                              const RopeScaling& scaling) = 0;
  // In place on dx: the transpose of rope_forward (rotation by -angle).
  virtual Status rope_backward(void* dx, int batch, int seq, int heads, int head_dim, float theta,
                               const RopeScaling& scaling) = 0;

  // Causal GQA attention. q[b, t, hq, d], k/v[b, t, hkv, d] → out[b, t, hq, d];
  // lse[b, hq, t] (fp32 log-sum-exp of the scaled scores) saved for backward.
  virtual Status attention_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                                   int batch, int seq, int hq, int hkv, int head_dim) = 0;
  // dq[b, t, hq, d], dk/dv[b, t, hkv, d] (overwrite) from dout and the forward's inputs/outputs.
  virtual Status attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q,
                                    const void* k, const void* v, const void* out, const float* lse,
                                    int batch, int seq, int hq, int hkv, int head_dim) = 0;

  // db[hkv, d] += ∂loss/∂b_k, the gradient of the key projection's bias (fp32, accumulated), from
  // the attention's dout and its inputs q, k after RoPE and v, RoPE parameters as for rope_forward.
  // Apart from dk because its exact value is a near-total cancellation that float32 sums of dk
  // leave as noise (formula and source: cpu/attention-key-bias.h); the caller then passes no bias
  // gradient to the key projection's linear_backward.
  virtual Status attention_key_bias_backward(float* db, const void* dout, const void* q, const void* k,
                                             const void* v, int batch, int seq, int hq, int hkv, int head_dim,
                                             float theta, const RopeScaling& scaling) = 0;

  // out[n, f] = silu(gate) · up
  virtual Status swiglu_forward(void* out, const void* gate, const void* up, int n, int f) = 0;
  // dgate[n, f], dup[n, f] (overwrite)
  virtual Status swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                 const void* up, int n, int f) = 0;

  // y[i] += x[i] for i < count (residual connections)
  virtual Status add_inplace(void* y, const void* x, size_t count) = 0;

  // Fused, chunked LM head + cross-entropy, forward and backward in one call; logits for at most
  // `chunk` tokens exist at a time. x[n, d] is the final-normed hidden state, w[v, d] the head,
  // labels[n] host int32 (-100 ignored). Adds Σ CE over non-ignored tokens to *loss_sum (fp64,
  // host), and with `loss_scale` != 0 (the caller passes 1 / total targets of the whole step)
  // writes dx[n, d] = ∂(loss_scale·Σ CE)/∂x and adds dw[v, d] += ∂/∂w (fp32). With
  // loss_scale == 0 only the loss is computed (eval). When logits_out != nullptr the logits
  // [n, v] (fp32, host) are also written (tests, generation).
  virtual Status lm_head_loss(double* loss_sum, void* dx, float* dw, const void* x, const void* w,
                              const int32_t* labels, int n, int d, int v, float loss_scale,
                              float* logits_out, int chunk) = 0;
};

// The CPU backend: float32, OpenBLAS GEMMs, the global thread pool. `device_capacity_bytes`
// bounds device_alloc (the "device" arena that makes layers stream in tests); 0 = unbounded.
std::unique_ptr<Backend> make_cpu_backend(size_t device_capacity_bytes = 0);

}  // namespace spillway::compute
