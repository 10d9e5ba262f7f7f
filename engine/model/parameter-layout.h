// ParameterLayout: where every parameter of a model lives, as contiguous blocks that stream.
//
// A model is L + 2 blocks: the embedding (block 0), one block per transformer layer (1..L) and
// the head (final norm, plus lm_head when untied). Each block is one float32 allocation carved
// into parameter views (llm.c's ParameterTensors), so a layer moves between SSD, DRAM and the
// device as one contiguous copy. Offsets are in elements, each parameter aligned to
// kParamAlignment elements so that device copies and SIMD loops start aligned.
// A layout is an immutable value computed from a ModelConfig.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model-config.h"
#include "model/safetensors.h"

namespace spillway {

constexpr size_t kParamAlignment = 64;  // elements (256 bytes of fp32)
constexpr size_t kNoParam = static_cast<size_t>(-1);

struct ParamView {
  std::string name;            // Hugging Face name: "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // as in the checkpoint: [out, in] for linear weights
  size_t offset = 0;           // elements from the start of the block
  size_t numel = 0;
  bool decay = false;  // AdamW weight decay applies (ndim >= 2), as in the golden semantics
};

enum class BlockKind { kEmbedding, kLayer, kHead };

struct BlockLayout {
  BlockKind kind = BlockKind::kLayer;
  int layer = -1;    // transformer layer index for kLayer
  std::string name;  // "embed", "layer.3", "head"
  std::vector<ParamView> params;
  size_t numel = 0;  // total elements including alignment padding

  const ParamView* find(const std::string& name) const;
};

// Element offsets of a transformer layer's parameters inside its block (kNoParam when absent).
// The maths sees q/k/v and gate/up as separate matrices: with fused projections (Phi-3's
// qkv_proj [q_dim + 2 kv_dim, hidden] and gate_up_proj [2 intermediate, hidden]) they are the row
// ranges of the one tensor on disk, wk = wq + q_dim · hidden and so on, contiguous as the maths
// needs. bo is o_proj's bias (ModelConfig::o_proj_bias). q_norm and k_norm are the per-head norms'
// weights [head_dim] (ModelConfig::qk_norm). attn_norm is the norm before attention and mlp_norm
// the one before the MLP (Llama's post_attention_layernorm, Gemma's pre_feedforward_layernorm);
// post_attn_norm and post_mlp_norm are Gemma's norms of the attention's and the MLP's outputs (its
// post_attention_layernorm and post_feedforward_layernorm, ModelConfig::sandwich_norms).
struct LayerOffsets {
  size_t attn_norm, wq, bq, wk, bk, wv, bv, q_norm, k_norm, wo, bo, mlp_norm, w_gate, w_up, w_down,
      post_attn_norm, post_mlp_norm;
};

class ParameterLayout {
 public:
  static ParameterLayout build(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const std::vector<BlockLayout>& blocks() const { return blocks_; }
  size_t num_blocks() const { return blocks_.size(); }
  const BlockLayout& embedding() const { return blocks_.front(); }
  const BlockLayout& layer(int i) const { return blocks_[1 + i]; }
  const BlockLayout& head() const { return blocks_.back(); }
  // Offsets shared by every layer block (all layers have the same shape).
  const LayerOffsets& layer_offsets() const { return layer_offsets_; }
  // Offsets inside the head block: final norm and, when untied, the LM head.
  size_t head_norm_offset() const { return head_norm_; }
  size_t head_lm_offset() const { return head_lm_; }  // kNoParam when tied to the embedding

  size_t max_block_numel() const;
  // Elements of all blocks together, alignment padding included: what every per-block buffer
  // (master, gradients, moments) holds in total.
  size_t total_numel() const;
  size_t layer_block_numel() const { return blocks_[1].numel; }
  // Number of real parameters (no padding), as transformers counts them.
  uint64_t parameter_count() const;

  // Checks that `store` holds exactly this model's tensors with the right shapes: kCorrupt names
  // each missing tensor, unexpected tensor, or shape mismatch (up to a few, then a count).
  Status check(const TensorStore& store) const;
  // Reads block `b` from `store` into `dst` (float32, block.numel elements, padding zeroed).
  Status load_block(const TensorStore& store, size_t b, float* dst) const;

 private:
  ModelConfig config_;
  std::vector<BlockLayout> blocks_;
  LayerOffsets layer_offsets_{};
  size_t head_norm_ = 0, head_lm_ = kNoParam;
};

// The model summary of the worker and the GUI: parameters per block and in total, bytes on disk
// per dtype, as a JSON-ready text table.
struct ModelSummary {
  std::string architecture;
  uint64_t parameters = 0;
  uint64_t embedding_parameters = 0;
  uint64_t layer_parameters = 0;  // one layer
  uint64_t head_parameters = 0;
  std::vector<std::pair<std::string, uint64_t>> bytes_per_dtype;  // from the checkpoint
  uint64_t bytes_on_disk = 0;
  std::string dtype;  // the dominant dtype on disk ("F32", "BF16")
  std::string to_string(const ModelConfig& c) const;
};
ModelSummary summarize(const ParameterLayout& layout, const TensorStore* store);

}  // namespace spillway
