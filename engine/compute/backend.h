// Backend: what the layer-streaming trainer computes (docs/architecture.md, "The compute backend"):
// the transformer ops, forward and backward, each enqueued on an explicit stream of the backend's
// device.
//
// What a device is (memory, streams, events, copies, conversions, its properties) is a Device
// (compute/device.h); a backend runs its ops on one, device(), which it owns. The CPU backend
// (compute/cpu) runs everything in float32 on host memory with OpenBLAS and the thread pool; the
// CUDA backend (compute/cuda, loaded at run time by compute/backend-loader.h) runs bf16
// activations and weights with fp32 accumulation. Both keep the GPU's ordering contract (device.h).
//
// Memory. Every tensor an op touches is device memory: activations of `act_dtype()` (float32 on
// the CPU, bf16 on CUDA), fp32 gradients, fp32 statistics, and int32 token ids and labels (the
// trainer uploads a step's ids and labels once and reads per-token losses back once). Weights are
// `act_dtype()`; the fp32 master weights become the compute copy through the device's convert().
// Ops that need scratch (the LM head's logits chunk, partial sums for deterministic reductions,
// cuBLASLt's workspace) take it from one workspace that the caller carves from its arena and hands
// over with set_workspace(), sized by workspace_bytes(): no op allocates memory.
//
// Determinism: ops use no atomics whose order changes results; the same inputs give the same bits.
// Errors: every op returns a Status: kInvalidArgument for bad shapes or handles, or when an op
// needs a workspace that is missing or too small, kInternal for a failed launch; an asynchronous
// failure surfaces at the device's next synchronize_* or elapsed_s. Not thread-safe: one trainer
// thread drives a backend.
//
// Conventions (match Hugging Face transformers' Llama / Mistral / Qwen2):
//   - linear:   y[n, out] = x[n, in] · W[out, in]ᵀ + b[out]   (torch.nn.Linear)
//   - rmsnorm:  y = x / sqrt(mean(x²) + eps) · (w + weight_offset)  (LlamaRMSNorm with offset 0,
//               Gemma3RMSNorm's (1 + w) with offset 1; fp32 statistics)
//   - rope:     rotate-half, q' = q·cos + rotate_half(q)·sin with inv_freq from rope_theta and
//               optional Llama-3 or LongRoPE scaling and partial rotation (RopeScaling)
//   - attention: causal, GQA (query head h uses kv head h / (n_heads / n_kv_heads)),
//               scale 1/sqrt(d) unless AttentionParams says otherwise, optionally a sliding window
//   - packed sequences: several examples in one row, each seeing only itself, given by the
//               tokens' positions (rope, attention and the key bias take them; see Positions)
//   - swiglu:   y = silu(gate) · up
//   - geglu:    y = gelu_tanh(gate) · up                       (Gemma's gelu_pytorch_tanh MLP)
//   - loss:     cross-entropy over targets != -100; labels are already shifted
// "Accumulate" outputs (`d*` of weights) add into the existing contents so gradients from several
// micro-batches sum without extra buffers; other outputs overwrite.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/adamw-step.h"
#include "compute/backend-facts.h"
#include "compute/communicator.h"
#include "compute/device.h"
#include "compute/tensor.h"
#include "core/dtype.h"
#include "core/status.h"

namespace spillway::compute {

// How RoPE departs from the plain inv_freq[i] = theta^(−2i/d) of every dim of a head. The
// defaults are plain RoPE; the fields combine as transformers' rope functions do:
//   - Llama-3 scaling ("rope_type": "llama3", _compute_llama3_parameters) when factor != 0;
//   - LongRoPE (Phi-3, _compute_longrope_parameters) when ext_factors is given:
//     inv_freq[i] = 1 / (ext_factors[i] · theta^(2i / rotary_dim)), one factor per rotated pair;
//     the caller picks short_factor or long_factor for the sequence length (ModelConfig::
//     rope_factors: long_factor when the sequence is longer than original_max_position_embeddings);
//   - cos and sin multiplied by attention_factor (LongRoPE's "attention_scaling"), in float32;
//   - partial rotation: only the first rotary_dim dims of a head rotate, as pairs (i, i +
//     rotary_dim / 2), the rest pass through (partial_rotary_factor); 0 = the whole head.
//   - linear scaling ("rope_type": "linear", Gemma 3's global layers, transformers'
//     _compute_linear_scaling_rope_parameters): every ext_factor the same, the factor.
struct RopeScaling {
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
  std::vector<float> ext_factors = {};  // [rotary_dim / 2]; empty: none
  float attention_factor = 1.0f;
  int rotary_dim = 0;

  bool operator==(const RopeScaling&) const = default;
};

// Packed sequences (several examples in one row, each seeing only itself): `positions` I32 [b, t]
// in the backend's memory gives each token's position within its example, 0 at an example's first
// token and one more than the token before it inside the example (positions[b, t] <= t). RoPE
// rotates token t by positions[b, t] instead of t, and attention lets query t see keys
// t − positions[b, t] .. t only: a block-diagonal causal mask, which is what transformers computes
// for packed rows given their position_ids (flash-attn's varlen; LLaMA-Factory's neat_packing).
// The ops trust the convention (the trainer checks it when it builds the batch). Absent: one
// example per row, positions 0..t-1.
using Positions = ConstTensor;
// positions [batch, seq] in the backend's memory as the ops take them; absent when null.
inline Positions positions_of(const int32_t* positions, int batch, int seq) {
  return positions ? i32(positions, {batch, seq}) : Positions();
}

// Bounds on the examples of packed rows, known on the host where the batch is built: at most
// `examples` examples (runs of tokens from a position 0 to the next) in the call's rows, none
// longer than `longest` tokens. The CUDA backend needs them to run packed rows on cuDNN, whose
// plans are built per number and length of sequences: it cannot read the positions in device memory
// without waiting for the GPU. Zero: unknown (the module's own kernels then run packed rows).
struct PackedBounds {
  int examples = 0;
  int longest = 0;

  bool known() const { return examples > 0 && longest > 0; }
  bool operator==(const PackedBounds&) const = default;
};
// The bounds of `positions` [rows, seq] as Positions describes them (a token with position 0, or
// the first of a row, starts an example); {} for no positions or seq <= 0.
PackedBounds packed_bounds(std::span<const int32_t> positions, int seq);

// What an attention op computes beyond causal GQA with scale 1/sqrt(head_dim).
struct AttentionParams {
  // The scores' scale; 0 means 1/sqrt(head_dim). Gemma 3: query_pre_attn_scalar^-0.5.
  float scale = 0.0f;
  // > 0: query i sees key j only when i - j < sliding_window (transformers'
  // sliding_window_overlay: kv_idx > q_idx - sliding_window), besides j <= i. 0: every earlier
  // key. Gemma 3's local layers, Mistral and Phi-3 configs with a sliding_window.
  int sliding_window = 0;
  // Packed sequences: the keys a query sees end at its example's first token (Positions above).
  Positions positions{};
  // With positions: bounds on their examples, for backends that plan per example (PackedBounds).
  PackedBounds packed{};

  // The scale to use for heads of `head_dim`: `scale`, or 1/sqrt(head_dim) when it is 0.
  float scale_for(int head_dim) const {
    return scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // The device the ops run on and take their memory and streams from; owned by the backend.
  virtual Device& device() const = 0;

  // The device's properties, for callers that hold the backend.
  BackendKind kind() const { return device().kind(); }
  const BackendFacts& facts() const { return backend_facts(kind()); }
  std::string name() const { return backend_name(kind()); }  // "cpu", "cuda"
  DType act_dtype() const { return facts().act_dtype; }      // F32 on the CPU, BF16 on CUDA
  DeviceInfo device_info() const { return device().device_info(); }
  Status device_memory_info(size_t* free_bytes, size_t* total_bytes) {
    return device().device_memory_info(free_bytes, total_bytes);
  }

  // --- workspace ----------------------------------------------------------------------------
  // Bytes of scratch the ops need for calls up to `shapes` (a multiple of kDeviceAlignment):
  // compute::workspace_bytes(kind(), shapes) with shapes.fused_attention as this backend runs
  // attention, which the planner asks without a backend.
  size_t workspace_bytes(const OpShapes& shapes) const {
    OpShapes s = shapes;
    s.fused_attention = device().device_info().attention.rfind("cuDNN", 0) == 0;
    return compute::workspace_bytes(kind(), s);
  }
  // Hands the ops `bytes` of device memory at `ptr` (at least workspace_bytes(shapes)); the
  // backend borrows it until the next set_workspace or its destruction. Ops on several streams
  // must not run at once while they share it (the trainer runs every op on one compute stream).
  virtual Status set_workspace(void* ptr, size_t bytes, const OpShapes& shapes) = 0;

  // --- groups of devices (communicator.h) ----------------------------------------------------
  // One communicator per member of `group` (this backend is group[0], every member of its kind),
  // the group spanning `processes` when not null: what make_communicators calls, which checks the
  // group first. Default: kUnsupported.
  virtual Result<std::vector<std::unique_ptr<Communicator>>> create_communicators(
      std::span<Backend* const> group, ProcessExchange* processes);

  // --- ops, each on `stream` -----------------------------------------------------------------
  // Each op takes tensor references (tensor.h) and checks them before it runs: dtypes (`act` is
  // act_dtype(), F32 and I32 as written), ranks and that the dims agree with each other. A
  // mismatch is kInvalidArgument "<op>: <argument> is <dtype> <shape>, expected <dtype> <shape>".
  // The checks run always on the CPU backend and in debug builds (!NDEBUG) on a GPU, where a
  // release build trusts its caller (the engine's shapes are checked by the CPU tests). Counts
  // are read from the inputs (x, q, gate, ids) and the outputs' given shapes, and every other
  // argument must agree. An absent argument is not checked here: an optional one may be absent,
  // and a required one missing is the implementation's kInvalidArgument (a null pointer).

  // out[n, d] = table[ids[n], :] · scale. ids I32 [n] in [0, vocab) (checked by the caller: the
  // trainer validates a batch on the host before it uploads it), table act [vocab, d], out act
  // [n, d]. scale != 1 is Gemma's Gemma3TextScaledWordEmbedding (the caller passes sqrt(hidden)
  // rounded to act_dtype, as transformers casts it to the weights' dtype); the product is rounded
  // once.
  Status embedding_forward(Tensor out, ConstTensor ids, ConstTensor table, StreamId stream,
                           float scale = 1.0f);
  // dtable[ids[n], :] += dout[n, :] · scale: dtable F32 [vocab, d] (accumulate; duplicate ids sum
  // in token order), ids I32 [n], dout act [n, d].
  Status embedding_backward(Tensor dtable, ConstTensor ids, ConstTensor dout, StreamId stream,
                            float scale = 1.0f);

  // out[n, d] = x / sqrt(mean(x²) + eps) · (w + weight_offset): x act [n, d], w act [d], out act
  // [n, d]; rstd F32 [n] saved for backward. weight_offset 0 is LlamaRMSNorm (on a bf16 device
  // the normalised value is rounded to bf16 before the weight multiplies it, as transformers
  // does); weight_offset 1 is Gemma3RMSNorm (1 + w in fp32, the product rounded once).
  Status rmsnorm_forward(Tensor out, Tensor rstd, ConstTensor x, ConstTensor w, float eps,
                         StreamId stream, float weight_offset = 0.0f);
  // Fused residual + norm (the slot for fused kernels): sum[n, d] = x + r, then out = rmsnorm(sum)
  // with rstd as rmsnorm_forward. `sum` may alias x.
  Status residual_rmsnorm_forward(Tensor sum, Tensor out, Tensor rstd, ConstTensor x, ConstTensor r,
                                  ConstTensor w, float eps, StreamId stream,
                                  float weight_offset = 0.0f);
  // dx act [n, d] (overwrite, or add when accumulate_dx), dw F32 [d] += ; dout, x act [n, d],
  // w act [d], rstd F32 [n], weight_offset as the forward's. May use the workspace.
  Status rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dout, ConstTensor x, ConstTensor w,
                          ConstTensor rstd, bool accumulate_dx, StreamId stream,
                          float weight_offset = 0.0f);

  // y[n, out] = x[n, in] · W[out, in]ᵀ (+ b[out] when b is given); all act.
  Status linear_forward(Tensor y, ConstTensor x, ConstTensor w, ConstTensor b, StreamId stream);
  // dx act [n, in] = dy · W (overwrite, or add when accumulate_dx; skipped when absent),
  // dw F32 [out, in] += dyᵀ · x, db F32 [out] += Σ_n dy (skipped when absent); dy act [n, out],
  // x act [n, in], w act [out, in].
  Status linear_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                         ConstTensor w, bool accumulate_dx, StreamId stream);

  // In place on x act [b, t, heads, head_dim] for positions 0..t-1 of each sequence, or those of
  // `positions` I32 [b, t] (packed sequences, see Positions).
  Status rope_forward(Tensor x, float theta, const RopeScaling& scaling, StreamId stream,
                      Positions positions = {});
  // In place on dx act [b, t, heads, head_dim]: the transpose of rope_forward (rotation by -angle).
  Status rope_backward(Tensor dx, float theta, const RopeScaling& scaling, StreamId stream,
                       Positions positions = {});

  // Causal GQA attention. q act [b, t, hq, d], k/v act [b, t, hkv, d] → out act [b, t, hq, d];
  // lse F32 [b, hq, t] (log-sum-exp of the scaled scores) saved for backward; `params` the scale
  // and sliding window (a negative window is kInvalidArgument). May use the workspace.
  Status attention_forward(Tensor out, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                           StreamId stream, const AttentionParams& params = {});
  // dq act [b, t, hq, d], dk/dv act [b, t, hkv, d] (overwrite) from dout [b, t, hq, d] and the
  // forward's inputs/outputs, `params` as the forward's. Uses the workspace.
  Status attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                            ConstTensor k, ConstTensor v, ConstTensor out, ConstTensor lse,
                            StreamId stream, const AttentionParams& params = {});
  // db F32 [hkv, d] += ∂loss/∂b_k, the gradient of the key projection's bias (accumulated), from
  // the attention's dout and its inputs q, k after RoPE and v, RoPE parameters as for rope_forward.
  // Apart from dk because its exact value is a near-total cancellation that sums of dk leave as
  // noise (formula and source: cpu/attention-key-bias.h); the caller then passes no bias gradient
  // to the key projection's linear_backward. Uses the workspace.
  // `positions` as rope_forward's and the attention's (packed sequences).
  Status attention_key_bias_backward(Tensor db, ConstTensor dout, ConstTensor q, ConstTensor k,
                                     ConstTensor v, float theta, const RopeScaling& scaling,
                                     StreamId stream, Positions positions = {});

  // out[n, f] = silu(gate) · up; all act [n, f].
  Status swiglu_forward(Tensor out, ConstTensor gate, ConstTensor up, StreamId stream);
  // dgate[n, f], dup[n, f] (overwrite); all act [n, f].
  Status swiglu_backward(Tensor dgate, Tensor dup, ConstTensor dout, ConstTensor gate,
                         ConstTensor up, StreamId stream);

  // out[n, f] = gelu_tanh(gate) · up; all act [n, f]. gelu_tanh(g) = g/2 · (1 + tanh(√(2/π)·(g +
  // 0.044715·g³))), torch's gelu(approximate="tanh") (transformers' gelu_pytorch_tanh), in fp32.
  Status geglu_forward(Tensor out, ConstTensor gate, ConstTensor up, StreamId stream);
  // dgate[n, f], dup[n, f] (overwrite); all act [n, f].
  Status geglu_backward(Tensor dgate, Tensor dup, ConstTensor dout, ConstTensor gate,
                        ConstTensor up, StreamId stream);

  // y += x elementwise (residual connections); act, the same shape.
  Status add_inplace(Tensor y, ConstTensor x, StreamId stream);

  // *out = Σ x[i]² over x F32 (a block's gradient, any shape), out one double; both device
  // memory. The squares are summed in double (each is exact there), so this is the block's part of
  // the global gradient norm (torch.nn.utils.clip_grad_norm_) without the gradients leaving the
  // device. Deterministic: the split into partial sums depends on the count alone and the partials
  // are combined in a fixed order, so the same x gives the same bits whatever the thread count or
  // grid; the CPU's order (cpu/reduce.h) and CUDA's (cuda/reduce.cuh) differ, so the two backends
  // agree to rounding (about 1e-15 relative), not bit for bit. An empty x writes 0. CUDA takes its
  // partial sums (at most 8 KiB) from the workspace, which workspace_bytes counts for any shapes;
  // the CPU needs none.
  Status sum_squares(double* out, ConstTensor x, StreamId stream);

  // One AdamW step in place on param, m, v, all F32 of grad's shape (any; one block's parameter
  // or a piece of it), from grad F32 times grad_scale (the clip coefficient), with the step's
  // constants `k` (train/adamw.h, adamw_coeffs). Each element gets exactly compute/adamw-step.h's
  // operations in its order, so the bits equal the CPU optimizer's (train/adamw.h) on every
  // backend: the HBM state tier updates its blocks with it (docs/architecture.md, "The HBM state
  // tier"). The four tensors must not overlap.
  Status adamw(Tensor param, Tensor m, Tensor v, ConstTensor grad, const AdamWCoeffs& k,
               float grad_scale, StreamId stream);

  // Fused, chunked LM head + cross-entropy, forward and backward in one call; logits for at most
  // `chunk` tokens exist at a time (in the workspace). x act [n, d] is the final-normed hidden
  // state, w act [v, d] the head, labels I32 [n] (-100 ignored). Writes losses F32 [n]: the CE of
  // each token, 0 where ignored. With `loss_scale` != 0 (the caller passes 1 / total targets of the
  // whole step) also writes dx act [n, d] = ∂(loss_scale·Σ CE)/∂x and adds dw F32 [v, d] += ∂/∂w.
  // With loss_scale == 0 only the losses are computed (eval; dx and dw may be absent). When
  // logits_out is given the logits F32 [n, v] are also written (tests, generation).
  Status lm_head_loss(Tensor losses, Tensor dx, Tensor dw, ConstTensor x, ConstTensor w,
                      ConstTensor labels, float loss_scale, Tensor logits_out, int chunk,
                      StreamId stream);

 protected:
  // Whether the ops check their tensors (above): always on the CPU, in debug builds on a GPU.
  bool checks_ops() const;

  // --- what a backend implements --------------------------------------------------------------
  // The ops above once checked, with the shapes as counts: the same contracts (pointers to device
  // memory, the dtypes above). A backend still checks what the counts cannot say (null
  // pointers, extents inside its allocations, the workspace).
  virtual Status do_embedding_forward(void* out, const int32_t* ids, const void* table, int n,
                                      int d, float scale, StreamId stream) = 0;
  virtual Status do_embedding_backward(float* dtable, const int32_t* ids, const void* dout, int n,
                                       int d, float scale, StreamId stream) = 0;
  virtual Status do_rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n,
                                    int d, float eps, float weight_offset, StreamId stream) = 0;
  virtual Status do_residual_rmsnorm_forward(void* sum, void* out, float* rstd, const void* x,
                                             const void* r, const void* w, int n, int d, float eps,
                                             float weight_offset, StreamId stream) = 0;
  virtual Status do_rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x,
                                     const void* w, const float* rstd, int n, int d,
                                     bool accumulate_dx, float weight_offset, StreamId stream) = 0;
  virtual Status do_linear_forward(void* y, const void* x, const void* w, const void* b, int n,
                                   int in, int out, StreamId stream) = 0;
  virtual Status do_linear_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                                    const void* w, int n, int in, int out, bool accumulate_dx,
                                    StreamId stream) = 0;
  // positions: [batch, seq] in the backend's memory (Positions), or null for 0..seq-1 per row.
  virtual Status do_rope_forward(void* x, int batch, int seq, int heads, int head_dim, float theta,
                                 const RopeScaling& scaling, const int32_t* positions,
                                 StreamId stream) = 0;
  virtual Status do_rope_backward(void* dx, int batch, int seq, int heads, int head_dim,
                                  float theta, const RopeScaling& scaling, const int32_t* positions,
                                  StreamId stream) = 0;
  // scale is resolved (never 0); window is 0 (none) or positive; positions as above, `packed` their
  // bounds (PackedBounds; zero when unknown or without positions).
  virtual Status do_attention_forward(void* out, float* lse, const void* q, const void* k,
                                      const void* v, int batch, int seq, int hq, int hkv,
                                      int head_dim, float scale, int window,
                                      const int32_t* positions, PackedBounds packed,
                                      StreamId stream) = 0;
  virtual Status do_attention_backward(void* dq, void* dk, void* dv, const void* dout,
                                       const void* q, const void* k, const void* v, const void* out,
                                       const float* lse, int batch, int seq, int hq, int hkv,
                                       int head_dim, float scale, int window,
                                       const int32_t* positions, PackedBounds packed,
                                       StreamId stream) = 0;
  virtual Status do_attention_key_bias_backward(float* db, const void* dout, const void* q,
                                                const void* k, const void* v, int batch, int seq,
                                                int hq, int hkv, int head_dim, float theta,
                                                const RopeScaling& scaling,
                                                const int32_t* positions, StreamId stream) = 0;
  virtual Status do_swiglu_forward(void* out, const void* gate, const void* up, int n, int f,
                                   StreamId stream) = 0;
  virtual Status do_swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                    const void* up, int n, int f, StreamId stream) = 0;
  virtual Status do_geglu_forward(void* out, const void* gate, const void* up, int n, int f,
                                  StreamId stream) = 0;
  virtual Status do_geglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                   const void* up, int n, int f, StreamId stream) = 0;
  virtual Status do_add_inplace(void* y, const void* x, size_t count, StreamId stream) = 0;
  virtual Status do_sum_squares(double* out, const float* x, size_t count, StreamId stream) = 0;
  virtual Status do_adamw(float* param, float* m, float* v, const float* grad, size_t count,
                          const AdamWCoeffs& k, float grad_scale, StreamId stream) = 0;
  virtual Status do_lm_head_loss(float* losses, void* dx, float* dw, const void* x, const void* w,
                                 const int32_t* labels, int n, int d, int v, float loss_scale,
                                 float* logits_out, int chunk, StreamId stream) = 0;
};

// The CPU backend: float32, OpenBLAS GEMMs, the global thread pool. `device_capacity_bytes`
// bounds device_alloc (the "device" arena that makes layers stream in tests); 0 = unbounded.
std::unique_ptr<Backend> make_cpu_backend(size_t device_capacity_bytes = 0);

}  // namespace spillway::compute
