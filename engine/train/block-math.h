// BlockMath: the maths of the model's blocks on a compute Backend — the token embedding, one
// transformer layer forward and backward, and the head (final norm, LM head and cross-entropy) —
// for one micro-batch at a time, every op on one stream.
//
// A layer is the Llama / Mistral / Qwen2 / Qwen3 / Phi-3 decoder layer of transformers:
//   n1  = rmsnorm(x)
//   x2  = x + o_proj(attention(rope(qn(q_proj(n1))), rope(kn(k_proj(n1))), v_proj(n1)))
//   n2  = rmsnorm(x2)
//   out = x2 + down_proj(silu(gate_proj(n2)) · up_proj(n2))
// (the residual add and the second norm are one fused residual_rmsnorm_forward). qn and kn are the
// per-head norms of ModelConfig::qk_norm (Qwen3: rmsnorm over each head's head_dim values, rows
// [n · heads, head_dim]), the identity without; Phi-3's fused qkv_proj and gate_up_proj are their
// row ranges (LayerOffsets). RoPE takes its parameters from the config per call: LongRoPE's factor
// set follows the call's sequence length (ModelConfig::rope_factors). Gemma 3's layer
// (ModelConfig::sandwich_norms) norms the outputs of attention and MLP too:
//   n1  = rmsnorm(x)
//   x2  = x + post_attn_norm(o_proj(attention(rope(qn(q_proj(n1))), rope(kn(k_proj(n1))),
//                                             v_proj(n1))))
//   n2  = pre_ff_norm(x2)
//   out = x2 + post_ff_norm(down_proj(gelu_tanh(gate_proj(n2)) · up_proj(n2)))
// with every norm's weight (1 + w), the attention scale query_pre_attn_scalar^-0.5, the sliding
// window on the layers the config marks and their own RoPE base (ModelConfig), and the embeddings
// times sqrt(hidden). The backward
// recomputes the forward from the layer's input (activation checkpointing), then backpropagates;
// weight gradients accumulate in fp32 in the block's layout. The activations of one micro-batch of
// one layer live in a scratch area carved from the device arena once, unless the caller gives the
// layer a saved area (SavedArea, saved_bytes): the forward then leaves there everything the
// backward reads, and the backward given the same area skips the recompute, or, for an area without
// the MLP's intermediates, recomputes only the MLP's gate and up projections and activation from
// the saved normed input of the MLP (selective activation checkpointing: the same ops on the same
// inputs, so the same bits). The block weights (act_dtype) and gradients
// (fp32) are wherever the caller keeps them, in the ParameterLayout's block layout.
//
// Not thread-safe (one stream, one thread). Ownership: borrows the backend and the layout, which
// must outlive it; the scratch belongs to the arena.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/backend.h"
#include "model/parameter-layout.h"
#include "tiers/device-arena.h"

namespace spillway {

// A layer's saved activations (BlockMath::saved_bytes): `area` on the device, or null for none;
// `mlp`: whether it holds the MLP's gate, up and activation too.
struct SavedArea {
  void* area = nullptr;
  bool mlp = true;
};

class BlockMath {
 public:
  // The largest op shapes for micro-batches of `batch` sequences of `seq` tokens: what the
  // backend's workspace is sized for (Backend::workspace_bytes).
  static compute::OpShapes op_shapes(const ModelConfig& config, int batch, int seq,
                                     int lm_head_chunk);
  // Device bytes of the scratch for micro-batches of up to `tokens` tokens, as create() reserves
  // it.
  static uint64_t scratch_bytes(const ModelConfig& config, int tokens, DType act);
  // Device bytes of one layer's saved activations for a micro-batch of up to `tokens` tokens:
  // what the backward reads of the forward's results (the normed inputs, q, k, v, the attention's
  // output and log-sum-exp, the norms' rstd, with `mlp` the MLP's gate, up and activation; Gemma's
  // o and MLP output): [tokens, 3·hidden + 2·q_dim + 2·kv_dim (+ 3·intermediate)] act_dtype and
  // [tokens, 2 + heads] fp32 for a Llama layer, each view 256-aligned. llama2-7b: 123.5 KB a token
  // with the MLP's, 57.4 KB without.
  static uint64_t saved_bytes(const ModelConfig& config, int tokens, DType act, bool mlp = true);

  // Reserves the scratch for up to `max_tokens` tokens a micro-batch (Category::kWorkspace).
  static Result<BlockMath> create(compute::Backend& backend, const ParameterLayout& layout,
                                  int max_tokens, int lm_head_chunk, DeviceArena& arena);

  // out[n, hidden] = table[ids[n], :]   (ids device int32, table the embedding block's weights)
  Status embedding_forward(void* out, const int32_t* ids, const char* table, int n,
                           compute::StreamId s);
  // dtable[ids[n], :] += dy[n, :]   (dtable fp32, the embedding block's gradient), but for the
  // row of ModelConfig::pad_token_id, which keeps what it held (torch's nn.Embedding with
  // padding_idx: that row gets no gradient from the lookup; a tied LM head's part stays).
  Status embedding_backward(float* dtable, const int32_t* ids, const void* dy, int n,
                            compute::StreamId s);

  // out[n, hidden] = layer `layer`(x[n, hidden]) for `batch` sequences of `seq` tokens (n = batch ·
  // seq), with `w` the layer block's weights and `positions` [batch, seq] (device int32) the
  // tokens' positions in packed rows (compute::Positions), or null. Leaves in the scratch what the
  // backward needs, in `saved`'s area when given (the MLP's intermediates there too with
  // saved.mlp), else in the scratch; with out == nullptr computes only that (the recompute skips
  // the down projection and the last add).
  Status layer_forward(int layer, const char* w, const void* x, void* out, int batch, int seq,
                       const int32_t* positions, compute::StreamId s, SavedArea saved = {});
  // Given dy[n, hidden] = ∂loss/∂out, overwrites dy with ∂loss/∂x and adds ∂loss/∂w to dw (fp32,
  // the layer block's layout). With `saved`, the area this layer's forward of the same micro-batch
  // filled (and nothing has written since): backpropagates from it, which consumes it, after
  // recomputing the MLP's gate, up and activation into the scratch when the area lacks them;
  // without, first recomputes the forward from the layer's input x into the scratch.
  Status layer_backward(int layer, const char* w, float* dw, const void* x, void* dy, int batch,
                        int seq, const int32_t* positions, compute::StreamId s,
                        SavedArea saved = {});
  // Bounds on the examples of every packed micro-batch the next layer calls pass
  // (compute::PackedBounds: the most examples and the longest), which lets the CUDA backend run
  // packed rows on cuDNN; {} (the default) when unknown or the rows are not packed.
  void set_packed_bounds(compute::PackedBounds bounds) { packed_ = bounds; }

  // The head on x[n, hidden]: losses[n] (fp32, device) = cross-entropy of each token against
  // labels[n] (device int32, -100 ignored: 0). `w_head` is the head block's weights, `w_lm` the LM
  // head [vocab, hidden] (the embedding table when tied). With dx != nullptr (training) also
  // dx[n, hidden] = ∂(loss_scale · Σ CE)/∂x, dw_head (fp32, the head block's layout) += the final
  // norm's gradient and dw_lm[vocab, hidden] += the LM head's. With logits != nullptr, the logits
  // [n, vocab] (fp32, device) too.
  Status head(const char* w_head, const char* w_lm, const void* x, const int32_t* labels,
              float* losses, float loss_scale, void* dx, float* dw_head, float* dw_lm,
              float* logits, int n, compute::StreamId s);

 private:
  BlockMath(compute::Backend& backend, const ParameterLayout& layout, int lm_head_chunk);
  // The attention part of both layer shapes: xn → q, k, v (per-head norms), RoPE, attention, o.
  Status attention_block_forward(int layer, const char* w, int batch, int seq,
                                 const compute::Positions& pos, compute::StreamId s);
  // Gemma 3's layer (sandwich norms): as layer_forward, and layer_backward's part after the
  // activations are in place (saved or recomputed).
  Status sandwich_layer_forward(int layer, const char* w, const void* x, void* out, int batch,
                                int seq, const int32_t* positions, compute::StreamId s);
  Status sandwich_layer_backward(int layer, const char* w, float* dw, const void* x, void* dy,
                                 int batch, int seq, const int32_t* positions, compute::StreamId s);
  // The embeddings' scale: sqrt(hidden) rounded to act_dtype for Gemma, else 1.
  float embedding_scale() const;
  // The MLP's activation (ModelConfig::mlp_activation) forward and backward.
  Status mlp_activation_forward(int n, compute::StreamId s);
  Status mlp_activation_backward(void* dg, int n, compute::StreamId s);
  // The MLP's backward of both layer shapes, from its output's gradient to its normed input's.
  Status mlp_block_backward(const char* w, float* dw, const void* dout, void* dxn2, int n,
                            compute::StreamId s);
  // RoPE's base and scaling for layer `layer` on sequences of `seq` tokens (a sliding layer's own
  // base, unscaled, where the config gives one).
  float rope_theta(int layer) const;
  const compute::RopeScaling& layer_rope(int layer, int seq) const;
  compute::AttentionParams attention_params(int layer, const compute::Positions& pos) const {
    return {mc_->attention_scale(), mc_->layer_window(layer), pos,
            pos.absent() ? compute::PackedBounds{} : packed_};
  }
  const void* wp(const char* w, size_t offset) const {
    return offset == kNoParam ? nullptr : w + offset * act_;
  }
  static float* gp(float* g, size_t offset) { return offset == kNoParam ? nullptr : g + offset; }
  // Tensor references of act_dtype: W to write, R to read.
  compute::Tensor W(void* p, compute::Shape s) const { return compute::Tensor(p, act_dtype_, s); }
  compute::ConstTensor R(const void* p, compute::Shape s) const {
    return compute::ConstTensor(p, act_dtype_, s);
  }

  compute::Backend* be_;
  DType act_dtype_;
  const ParameterLayout* layout_;
  const ModelConfig* mc_;
  size_t act_;  // bytes per act_dtype element
  // RoPE's parameters for sequences of `seq` tokens (LongRoPE's short or long factors).
  const compute::RopeScaling& rope(int seq) const {
    return mc_->longrope() && seq > mc_->rope_original_max_position ? rope_long_ : rope_short_;
  }

  compute::RopeScaling rope_short_, rope_long_;
  bool qk_norm_;                     // the per-head q/k norms (ModelConfig::qk_norm)
  compute::RopeScaling rope_local_;  // Gemma's sliding layers' own: none
  float norm_offset_;                // every norm's weight offset (ModelConfig::norm_weight_offset)
  int lm_head_chunk_;
  compute::PackedBounds packed_{};  // set_packed_bounds
  // The views of the activations the backward reads of the forward (o only with sandwich norms,
  // mo and rstd3/4 only with them, the q/k norms' only with those: else null, or o the scratch's).
  struct Activations {
    void *xn, *x2, *xn2, *o, *q, *att, *k, *v, *g, *u, *a, *q_pre, *k_pre, *mo;
    float *rstd1, *rstd2, *lse, *rstd_q, *rstd_k, *rstd3, *rstd4;
  };
  // Points the activation views below at `saved`'s area (for max_tokens_, carved as saved_bytes
  // counts it; g, u and a the scratch's without saved.mlp) or, when null, at the scratch's own:
  // every entry point that uses them calls it first.
  void use_activations(SavedArea saved);
  // The views of a saved area for max_tokens_ (ScratchShape::saved_views, block-math.cpp): g, u
  // and a only with `mlp`, o and mo only with sandwich norms, the q/k norms' only with those.
  Activations carve_activations(void* area, bool mlp) const;
  // g = gate(xn2), u = up(xn2), a = act(g, u): the MLP's part of the forward before the down
  // projection, n tokens.
  Status mlp_up_forward(const char* w, int n, compute::StreamId s);

  int max_tokens_ = 0;
  Activations scratch_activations_{};
  // The scratch, for n tokens (act_dtype unless noted). The views of Activations are a saved
  // area's while a layer is given one (use_activations).
  void *xn, *x2, *xn2, *o, *dxn;  // [n, hidden]
  void *q, *att, *dq, *datt;      // [n, q_dim]
  void *k, *v, *dk, *dv;          // [n, kv_dim]
  void *g, *u, *a, *da, *du;      // [n, intermediate]
  float *rstd1, *rstd2;           // [n] fp32
  float* lse;                     // [heads, n] fp32 ([batch, heads, seq])
  int pad_row_;                   // pad_token_id when it names a row of the vocabulary, else -1
  float* pad_saved;  // [hidden] fp32: the pad row of dtable across the embedding's backward
  // With qk_norm only (else null): q and k before their norms, and the norms' rstd.
  void *q_pre, *k_pre;     // [n, q_dim], [n, kv_dim]
  float *rstd_q, *rstd_k;  // [n · heads], [n · kv_heads] fp32
  // With sandwich_norms only (else null): the MLP's output before its norm, and the rstd of the
  // norms of the attention's and the MLP's outputs.
  void* mo;              // [n, hidden]
  float *rstd3, *rstd4;  // [n] fp32
};

}  // namespace spillway
