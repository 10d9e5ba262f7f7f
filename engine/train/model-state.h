// ModelState: the training state that lives in host memory (DRAM) — per block the fp32 master
// weights, the fp32 gradients of the current step and the AdamW moments m and v (of the blocks
// whose moments the placement keeps in DRAM) — plus the optimizer step count.
//
// Each of the four is one AlignedBuffer per block in ParameterLayout order, so that a block
// streams as one contiguous copy and the CPU AdamW makes one pass per block. The state owns its
// buffers; it is not thread-safe, but distinct blocks may be touched by distinct threads (the
// optimizer updates block b while the engine uploads block b+1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "model/parameter-layout.h"
#include "model/safetensors.h"

namespace spillway {

class ModelState {
 public:
  // Allocates zeroed buffers for `layout` (master always, grad for blocks from `device_grad_blocks`
  // on; m and v when `with_optimizer`, for the first `moment_blocks` blocks). The first
  // `device_grad_blocks` blocks have no host gradient (grad(b) is null): the HBM state tier
  // accumulates and updates theirs on the device (hbm-state.h), so a run saves 4 bytes of DRAM a
  // parameter there. Blocks from `moment_blocks` on have no moments here (exp_avg(b) is null): the
  // SSD store keeps theirs (optimizer-state.h, BlockTiers). With `held` ([block], empty: every
  // block) the state holds only those blocks (past one machine, each machine holds its own:
  // block-owners.h); the others have no buffers at all. kOutOfMemory names the bytes that could
  // not be allocated.
  static Result<std::unique_ptr<ModelState>> create(const ParameterLayout& layout,
                                                    bool with_optimizer,
                                                    size_t device_grad_blocks = 0,
                                                    size_t moment_blocks = SIZE_MAX,
                                                    std::vector<bool> held = {});

  const ParameterLayout& layout() const { return layout_; }
  const ModelConfig& config() const { return layout_.config(); }
  size_t num_blocks() const { return layout_.num_blocks(); }
  float* master(size_t b) { return blocks_[b].master.as<float>(); }
  const float* master(size_t b) const { return blocks_[b].master.as<float>(); }
  float* grad(size_t b) { return blocks_[b].grad.as<float>(); }
  float* exp_avg(size_t b) { return blocks_[b].m.as<float>(); }
  float* exp_avg_sq(size_t b) { return blocks_[b].v.as<float>(); }
  // Whether block b's state is here (every block's unless create() was given `held`).
  bool holds(size_t b) const { return held_.empty() || held_[b]; }
  // Whether the state holds every block.
  bool holds_all() const { return held_.empty(); }
  // Whether every held block's moments are here (else the SSD store holds those of the blocks
  // whose exp_avg(b) is null).
  bool has_optimizer() const;
  int64_t step = 0;  // optimizer steps taken

  // Loads every held block from `store` after checking that its tensors match the layout.
  Status load_weights(const TensorStore& store);
  // transformers' _init_weights for Llama: linear and embedding weights ~ N(0, std²), biases 0,
  // norm weights 1. Deterministic for a seed (mt19937_64 + Box-Muller, independent of threads);
  // each block draws from its own generator, so a held block gets the bits it gets in a state
  // that holds every block.
  void init_random(uint64_t seed, float std = 0.02f);
  // The held blocks' master weights as tensors to write, with their Hugging Face names (views of
  // this state's buffers).
  std::vector<TensorToWrite> master_tensors() const;
  // Writes the held blocks' master weights with their Hugging Face names (sharded above
  // `max_shard_bytes`).
  Status save_weights(const std::string& dir, uint64_t max_shard_bytes = 5ull << 30,
                      FileDigests* digests = nullptr) const;
  // Bytes of host memory held, per kind: the fp32 master weights, the gradients, the moments.
  uint64_t master_bytes() const;
  uint64_t gradient_bytes() const;
  uint64_t optimizer_bytes() const;

 private:
  struct Block {
    AlignedBuffer master, grad, m, v;
  };
  explicit ModelState(ParameterLayout layout) : layout_(std::move(layout)) {}
  ParameterLayout layout_;
  std::vector<Block> blocks_;
  std::vector<bool> held_;  // [block]; empty: every block
};

}  // namespace spillway
