// OptimizerStateStore: where AdamW's per-block state lives — in DRAM (ModelState's buffers) or on
// the SSD tier (engine/tiers/ssd-store), with the fp32 master weights optionally there too, per
// block (BlockTiers: the first blocks in DRAM, the next with their moments on the SSD, the last
// with master and moments there).
//
// for_each_block() hands the optimizer every block's state in forward order as DRAM buffers. The
// SSD store pipelines it three deep (docs/architecture.md, "Memory tiers"; ZeRO-Infinity): piece
// i+1 is read SSD → DRAM staging while piece i is updated and piece i-1 is written back, so SSD
// time overlaps CPU work. A piece is a block, or a chunk of a big one (16 MiB per kind by default),
// so that the staging stays small whatever the block size (a 7B layer is 800 MB per kind) and the
// first read that nothing overlaps is short; chunks start at multiples of the store's block size,
// so no write straddles a checksum block. On the SSD each block has one group per kind —
// "m.<block>", "v.<block>" and, with the master there, "master.<block>" (block names from
// ParameterLayout: "embed", "layer.3", "head") — so the tier counters see optimizer and master
// bytes under their own categories. With the master weights on the SSD, ModelState's master buffer
// is the fp32 copy the engine streams (the CUDA backend converts it to bf16 on the device): the
// store refreshes it from the updated master before the block is released.
//
// The SSD store is working state, not a checkpoint: it is never reopened (resume reads the
// checkpoint folder), so it is not fsynced; checkpoints copy the state out through read_block().
//
// Thread-safety: one thread at a time uses a store (the optimizer thread during for_each_block, the
// training thread for read_block/write_block while no step is in flight); the byte counters may be
// read from any thread. Ownership: the store borrows ModelState (and counters, env), which must
// outlive it; the SSD store owns its SsdStore and staging buffers.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "telemetry/span.h"
#include "tiers/ssd-store.h"
#include "train/model-state.h"

namespace spillway {

// Where each block's host state lives, as counts in block order (docs/architecture.md, "Memory
// tiers"): blocks [0, dram) keep master and moments in DRAM, the next `ssd_moments` blocks the
// master in DRAM and the moments on the SSD, the last `ssd` blocks master and moments on the SSD.
// Counts, not a list: the planner fills DRAM in block order (planner.h, place_tiers). The HBM
// state tier's blocks (hbm-state.h) keep their host copy where these counts put it.
struct BlockTiers {
  enum Tier { kDram, kSsdMoments, kSsd };
  size_t dram = 0, ssd_moments = 0, ssd = 0;

  // Every one of `blocks` blocks in `tier`.
  static BlockTiers all(size_t blocks, Tier tier);
  size_t blocks() const { return dram + ssd_moments + ssd; }
  Tier of(size_t b) const { return b < dram ? kDram : b < dram + ssd_moments ? kSsdMoments : kSsd; }
  bool any_on_ssd() const { return ssd_moments + ssd > 0; }
  bool operator==(const BlockTiers&) const = default;
};

class OptimizerStateStore {
 public:
  // update(b, offset, count, master, m, v) over the held blocks (ModelState::holds) of
  // [first, num_blocks) in order (those before `first` are the HBM state tier's: hbm-state.h;
  // another machine's are only released), in pieces: elements
  // [offset, offset + count) of block b, each pointer a [count] fp32 array in DRAM; offsets are
  // multiples of kParamAlignment, so AdamW's tiles fall as in one pass over the block (the result
  // is bit-identical). `released(b)` once block b's compute copy is final (the next forward may
  // stream it). Stops at the first I/O error (kIo, kNoSpace, kCorrupt from the SSD store),
  // releasing the rest unupdated.
  using UpdateFn = std::function<void(size_t, size_t, size_t, float*, float*, float*)>;
  virtual ~OptimizerStateStore() = default;
  virtual Status for_each_block(size_t first, const UpdateFn& update,
                                const std::function<void(size_t)>& released) = 0;
  // One held block's state, for checkpoints and resume; each pointer [numel(b)] fp32. `master` may
  // be null: read_block then skips it, write_block takes ModelState's master (which it also updates
  // from a non-null `master`, as the compute copy). read_block also skips a null `m` or `v` (a
  // checkpoint streams one kind at a time).
  virtual Status read_block(size_t b, float* master, float* m, float* v) = 0;
  virtual Status write_block(size_t b, const float* master, const float* m, const float* v) = 0;
  // Where each block lives.
  virtual BlockTiers tiers() const = 0;
  bool on_ssd() const { return tiers().any_on_ssd(); }
  // Bytes the update pipeline read from and wrote to the SSD so far (per-step endurance figures;
  // checkpoint and resume traffic is not included). Safe from any thread.
  virtual uint64_t ssd_read_bytes() const { return 0; }
  virtual uint64_t ssd_write_bytes() const { return 0; }
  // Receives "ssd_read" and "ssd_write" spans per block from for_each_block (start: submission of
  // its first piece, end: when the pipeline saw its last piece complete). Set while no step is in
  // flight.
  virtual void set_span_sink(SpanSink sink, std::function<double()> clock) {
    (void)sink;
    (void)clock;
  }
};

// The DRAM store: ModelState's own master, exp_avg and exp_avg_sq (created with the optimizer).
std::unique_ptr<OptimizerStateStore> make_dram_state(ModelState& model);

struct SsdStateConfig {
  SsdConfig store;  // folder, I/O block size, queue depth
  // Which blocks the SSD holds (tiers.blocks() == the model's blocks, at least one on the SSD);
  // blocks [0, tiers.dram) stay in ModelState's buffers.
  BlockTiers tiers;
  size_t chunk_bytes = 16 << 20;  // pipeline piece per kind; rounded up to store.block_bytes
};

// The SSD store under `config.store.folder`, for a mix of tiers: per block on the SSD the groups
// above, the moments reading as zeros and the master (for the blocks of BlockTiers::kSsd) written
// from ModelState; the blocks of BlockTiers::kDram are ModelState's, which holds moments for them
// and only them (ModelState::create's moment_blocks). for_each_block updates those DRAM blocks
// while the SSD's first piece is read. Counts its groups on Tier::kSsd (kOptimizer, kMaster) and
// its DRAM staging (three pieces of each kind) on Tier::kDram kOptimizer in `counters` (may be
// null). kInvalidArgument when the tiers do not cover the model's blocks or put none on the SSD;
// kNoSpace names the folder and the bytes needed when the disk cannot hold them; kIo when the
// folder cannot be made.
Result<std::unique_ptr<OptimizerStateStore>> make_ssd_state(ModelState& model,
                                                            const SsdStateConfig& config,
                                                            TierCounters* counters = nullptr,
                                                            StorageEnv* env = StorageEnv::posix());
// The same with the default chunk size, every block on the SSD: the moments, and with
// `master_on_ssd` the master too.
Result<std::unique_ptr<OptimizerStateStore>> make_ssd_state(ModelState& model,
                                                            const SsdConfig& config,
                                                            bool master_on_ssd,
                                                            TierCounters* counters = nullptr,
                                                            StorageEnv* env = StorageEnv::posix());

}  // namespace spillway
