// HbmState: the HBM state tier (docs/architecture.md, "The HBM state tier") — the fp32 master
// weights, gradients and AdamW moments of the first N blocks in forward order (embedding, layers,
// head) kept in the engine's device arena. The engine accumulates those blocks' gradients in
// place and fills their weight slots from the device master (no upload, no gradient download);
// Backend::adamw updates them on the compute stream with the CPU optimizer's constants, so a block
// gets the same bits in HBM as in DRAM or on the SSD (compute/adamw-step.h). The host keeps the
// blocks' copy (ModelState, or the SSD store for the moments), stale during training:
// store_to_host() refreshes it before a checkpoint or an export reads it, load_from_host() fills
// the tier from it (a fresh run, a resume).
//
// Why a prefix in forward order: the CPU optimizer updates the other blocks while the next step's
// forward runs and the forward waits per block for its update, so the blocks the forward reaches
// first are the ones whose CPU update would hold it longest.
//
// Not thread-safe: the training thread drives it (the engine's, between steps the optimizer's
// begin_step and the checkpointer). Ownership: borrows the device, backend, state and arena, which
// outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "compute/backend.h"
#include "core/status.h"
#include "train/adamw.h"
#include "train/model-state.h"

namespace spillway {

class DeviceArena;
class OptimizerStateStore;

class HbmState {
 public:
  // Device bytes of block b's state in the tier: master, gradient, m and v, [numel] fp32 each,
  // each reservation 256-aligned.
  static uint64_t block_bytes(const ParameterLayout& layout, size_t b);
  // Bytes of the first `blocks` blocks.
  static uint64_t bytes(const ParameterLayout& layout, size_t blocks);

  // Reserves the first `blocks` blocks' state in `arena` (master Category::kMaster, m and v
  // kOptimizer, the gradient kGradients) and creates the update's event. Its contents are
  // undefined until load_from_host(). `stream` is the engine's compute stream, where the update
  // runs. kOutOfMemory from the arena when it cannot hold them.
  static Result<std::unique_ptr<HbmState>> create(compute::Device& device,
                                                  compute::Backend& backend, DeviceArena& arena,
                                                  ModelState& state, size_t blocks,
                                                  compute::StreamId stream);

  size_t blocks() const { return blocks_.size(); }
  bool holds(size_t b) const { return b < blocks_.size(); }
  // Block b's device master and gradient, [numel(b)] fp32 (b < blocks()).
  const float* master(size_t b) const { return blocks_[b].master; }
  float* grad(size_t b) { return blocks_[b].grad; }

  // Enqueues optimizer step `step` (from 1) on every block of the tier: AdamW with `config`
  // (config.lr this step's), weight decay per parameter view as ParameterLayout says, gradients
  // times `grad_scale` (the clip coefficient). updated() is recorded after it.
  Status update(const AdamWConfig& config, int64_t step, float grad_scale);
  // Recorded on the compute stream after the last update: a copy of the device master on another
  // stream waits for it.
  const compute::Event& updated() const { return updated_; }

  // Host → device: every block's master from ModelState and its moments from `store` (null:
  // ModelState's own buffers). Synchronous.
  Status load_from_host(OptimizerStateStore* store);
  // Device → host, the other way: ModelState's master, and the moments into `store` (null:
  // ModelState's). Synchronous; waits for the last update.
  Status store_to_host(OptimizerStateStore* store);

 private:
  struct Block {
    float *master = nullptr, *grad = nullptr, *m = nullptr, *v = nullptr;  // [numel] fp32 each
  };
  HbmState(compute::Device& device, compute::Backend& backend, ModelState& state,
           compute::StreamId stream)
      : dev_(device), be_(backend), state_(state), stream_(stream) {}

  compute::Device& dev_;
  compute::Backend& be_;
  ModelState& state_;
  const compute::StreamId stream_;
  std::vector<Block> blocks_;
  compute::Event updated_;
};

}  // namespace spillway
