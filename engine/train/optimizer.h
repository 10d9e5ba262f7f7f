// Optimizer: the CPU side of a step after backward — global gradient norm, clipping, and AdamW
// over every block — run on its own thread so that it overlaps the next step's forward.
//
// begin_step() takes the pre-clip global L2 norm of all gradients (as
// torch.nn.utils.clip_grad_norm_, in double) from the per-block sums of squares the engine measured
// on the device (StepResult::grad_sumsq), or computes it over the host gradients when it is not
// given, then updates the blocks in forward order on the optimizer thread. The engine's weight gate
// calls wait_block(b) before streaming block b, so the next forward waits per layer only for that
// layer's update (docs/architecture.md, "The step", 4). wait_all() before anything reads all
// weights or optimizer state (checkpoint, export, eval). Thread-safety: begin_step/wait_all from
// the training thread; wait_block from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/thread-pool.h"
#include "train/adamw.h"
#include "train/model-state.h"
#include "train/optimizer-state.h"

namespace spillway {

class HbmState;

struct StepStats {
  double grad_norm = 0;    // before clipping
  float clip_coef = 1.0f;  // factor applied to the gradients
  // SSD bytes of the previous step's update, which begin_step waited for (0 with the state in
  // DRAM, and on the first step): exact per update, for endurance figures.
  uint64_t prev_update_ssd_read_bytes = 0;
  uint64_t prev_update_ssd_write_bytes = 0;
};

class Optimizer {
 public:
  // `store`: where the master/moments live (null: ModelState's own DRAM buffers).
  Optimizer(ModelState& state, AdamWConfig base, double clip_grad_norm,
            OptimizerStateStore* store = nullptr);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Starts optimizer step state.step + 1 with learning rate `lr`; returns the norm at once, the
  // updates run in the background. Waits for the previous step's updates first. After an update
  // failed (status() not ok) it starts nothing: the state is no longer a consistent step.
  // `grad_sumsq`: Σ g² of each block's gradient, [num_blocks], in block order (the engine's
  // StepResult::grad_sumsq, of the gradients now in the host buffers); empty, or of another size,
  // and begin_step sums the host gradients itself (a pass over all of them: 27 GB for 7B).
  StepStats begin_step(double lr, std::span<const double> grad_sumsq = {});
  // The HBM state tier (hbm-state.h), whose blocks the GPU updates: loads it from the host state
  // (this optimizer's store) at once; from then on begin_step enqueues its update on the device
  // with the same step, learning rate and clip coefficient as the CPU's blocks, and the CPU skips
  // its blocks. Set before the first begin_step, on the training thread; `hbm` outlives the
  // optimizer's use of it. Null: none.
  Status set_hbm_state(HbmState* hbm);
  // wait_all, then the HBM tier's state copied back into the host state: before anything reads
  // the master weights or moments of every block on the host (a checkpoint, an export).
  Status sync_host();
  // Blocks until block b has been updated by the step in flight (no-op when none is).
  void wait_block(size_t b);
  void wait_all();
  // The first error of an update (an SSD read or write); sticky. Check after wait_all.
  Status status() const;
  // Receives an "optimizer" span per block (block index, start and end in seconds of `clock`), and
  // with the state on the SSD its "ssd_read"/"ssd_write" spans, called from the optimizer thread.
  // Set before the first begin_step.
  void set_span_sink(SpanSink sink, std::function<double()> clock) {
    store_->set_span_sink(sink, clock);
    span_sink_ = std::move(sink);
    clock_ = std::move(clock);
  }

 private:
  void run();
  ModelState& state_;
  HbmState* hbm_ = nullptr;  // the blocks before hbm_->blocks() are updated on the device
  bool host_stale_ = false;  // an update of hbm_ since the last sync_host
  std::unique_ptr<OptimizerStateStore> own_store_;
  OptimizerStateStore* store_;
  // With the state on the SSD the update lasts as long as the SSD transfer and runs alongside the
  // next forward: a small pool of its own (AdamW outpaces the SSD several times over per core)
  // keeps it from serialising with the engine's kernels on the global pool. Null: the global pool.
  // Only the SSD's blocks use it: a mix's DRAM blocks (tiers_) update at DRAM's pace, on the
  // global pool, as with every block in DRAM.
  std::unique_ptr<ThreadPool> pool_;
  BlockTiers tiers_;
  Status error_;
  AdamWConfig base_;
  double clip_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool pending_ = false;    // a step was posted and not yet finished
  size_t done_blocks_ = 0;  // blocks of the step in flight already updated
  AdamWConfig step_cfg_;
  float step_coef_ = 1.0f;
  int64_t step_number_ = 0;
  uint64_t pass_read_start_ = 0,
           pass_write_start_ = 0;  // store counters when the last step was posted
  bool posted_ = false;
  SpanSink span_sink_;
  std::function<double()> clock_;
  std::thread thread_;  // last: it starts after every member it uses is constructed
};

}  // namespace spillway
