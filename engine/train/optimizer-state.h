// OptimizerStateStore: where AdamW's per-block state lives — in DRAM (ModelState's buffers) or on
// the SSD tier (engine/tiers/ssd-store), with the fp32 master weights optionally there too.
//
// for_each_block() hands the optimizer every block's state in forward order as DRAM buffers. The
// SSD store pipelines it three deep (DESIGN.md "Tiers", ZeRO-Infinity): block b+1 is read
// SSD → DRAM staging while block b is updated and block b-1 is written back, so SSD time overlaps
// CPU work. With the master weights on the SSD, ModelState's master buffer is the compute copy the
// engine streams (fp32 on the CPU backend, bf16 on CUDA): the store refreshes it from the updated
// master before the block is released. One optimizer thread uses a store at a time.
#pragma once

#include <functional>
#include <memory>

#include "tiers/ssd-store.h"
#include "train/model-state.h"

namespace spillway {

class OptimizerStateStore {
 public:
  virtual ~OptimizerStateStore() = default;
  // update(b, master, m, v) for every block in order; `released(b)` once block b's compute copy
  // is final (the next forward may stream it). Stops at the first I/O error, releasing the rest.
  virtual Status for_each_block(const std::function<void(size_t, float*, float*, float*)>& update,
                                const std::function<void(size_t)>& released) = 0;
  // One block's state, for checkpoints and resume (`master` may be null: ModelState holds it).
  virtual Status read_block(size_t b, float* master, float* m, float* v) = 0;
  virtual Status write_block(size_t b, const float* master, const float* m, const float* v) = 0;
  virtual bool on_ssd() const = 0;
  virtual bool master_on_ssd() const = 0;
  // Bytes read and written on the SSD so far (for per-step endurance figures).
  virtual uint64_t ssd_read_bytes() const { return 0; }
  virtual uint64_t ssd_write_bytes() const { return 0; }
};

// The DRAM store: ModelState's own master, exp_avg and exp_avg_sq (created with the optimizer).
std::unique_ptr<OptimizerStateStore> make_dram_state(ModelState& model);

// The SSD store under `config.folder`: one group per block ([master |] m | v, fp32), initialised
// from ModelState's master and zero moments. ModelState needs no moments of its own. kNoSpace
// names the folder and the bytes needed when the disk cannot hold them.
Result<std::unique_ptr<OptimizerStateStore>> make_ssd_state(ModelState& model, const SsdConfig& config,
                                                            bool master_on_ssd, TierCounters* counters = nullptr,
                                                            StorageEnv* env = StorageEnv::posix());

}  // namespace spillway
