// DataParallelEngine: one training step over the GPUs of this machine (docs/architecture.md,
// "Data parallel"), each running the layer-major step of its own StreamingEngine on its share of
// the step's micro-batches, with one copy of the host state.
//
// - The step's micro-batches are split in rank order: GPU r takes the r-th of N equal runs of
//   them (N × the job's gradient accumulation in all), and every GPU scales its loss by the
//   targets of the whole step, so the summed gradient is that of the mean loss over the step.
// - Weights go up whole to each GPU over its own host link, from the one pinned master copy.
// - Each block's gradient is summed between the GPUs by a reduce-scatter (communicator.h: NCCL on
//   CUDA) as soon as its backward ends, and each GPU brings down only its 1/N share into the one
//   host gradient buffer: the host link of each GPU carries 1/N of the gradients, the host's
//   DRAM one copy of them.
// - The gradient norm is the sum over GPUs (in rank order) of their shares' sums of squares; the
//   optimizer then updates the one host state as for one GPU, block by block, and every GPU's next
//   forward waits for the same weight gate.
// With one GPU it is a StreamingEngine and nothing else: no thread, no communicator.
//
// Past one machine (docs/architecture.md, "Past one machine"): one DataParallelEngine per
// process, each with this machine's GPUs and the blocks of the host state it holds
// (StreamingConfig::block_owners, block-owners.h; ModelState::holds). The step's batch is the
// whole group's, every process holding all of it; process p's GPU r takes the (p · N + r)-th run
// of its micro-batches. A block's weights go up from the one GPU that carries it and the group
// broadcasts them; its gradient is reduced into that GPU, which brings it down into its
// machine's state, whose optimizer alone updates the block. At the step's end the processes
// exchange their loss, targets, stop requests and each block's gradient sum of squares
// (compute::ProcessExchange); a stop asked on one machine stops all after the step.
//
// Faults: the engines run on one thread each; the first to fail aborts the group, so the others
// end instead of waiting for its collectives, and the step fails with that GPU's error (a stop
// request, kCancelled, wins over the errors it causes). A step that has not finished within its
// time limit, max(kMinStepTimeoutS, 10 × the last step's time), is taken as hung — a lost GPU, or
// NCCL waiting for a peer or a link that failed (NCCL itself never times out; torch.distributed's
// watchdog does the same with its process-group timeout): the group is aborted and the step fails
// naming the GPUs still running. Past one machine the watchdog also asks the process group every
// kGroupCheckS whether a machine left, and aborts the group when one did. After a failed step the
// group cannot train again; on one machine forward() (rank 0 alone) still works, past one machine
// nothing does.
// Thread-safety: one thread drives it, as a StreamingEngine. Ownership: borrows the backends and
// the state, which must outlive it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "compute/backend.h"
#include "train/streaming-engine.h"

namespace spillway {

class DataParallelEngine {
 public:
  // The shortest time limit of a step before it is taken as hung (the watchdog above): 30
  // minutes, torch.distributed's default process-group timeout, long enough for the first step
  // of a 70B model streaming from the SSD.
  static constexpr double kMinStepTimeoutS = 1800;
  // Past one machine, how often a step's watchdog asks the process group whether a machine left
  // (ProcessExchange::check): a GPU waiting in NCCL for a machine that is gone stops within it.
  static constexpr double kGroupCheckS = 1;

  // One engine per backend (rank order), each with `config` (its micro-batches are per GPU), and
  // with more than one backend, or `processes` of more than one process, their communicators
  // (kUnsupported when the backends cannot form a group, e.g. no NCCL; every process must create
  // its engine at the same point, and `processes` outlive it). Errors of StreamingEngine::create,
  // naming the GPU.
  static Result<std::unique_ptr<DataParallelEngine>> create(
      std::span<compute::Backend* const> backends, ModelState& state, const StreamingConfig& config,
      TierCounters* counters = nullptr, compute::ProcessExchange* processes = nullptr);
  // As above, each engine taking its memory, streams and copies from devices[r] (the backend's
  // device or a wrapper of it, such as the bench's MeteredDevice).
  static Result<std::unique_ptr<DataParallelEngine>> create(
      std::span<compute::Device* const> devices, std::span<compute::Backend* const> backends,
      ModelState& state, const StreamingConfig& config, TierCounters* counters = nullptr,
      compute::ProcessExchange* processes = nullptr);
  ~DataParallelEngine();

  // Overrides the watchdog's time limit (seconds; 0: the default rule), for tests.
  void set_step_timeout(double seconds);

  // This machine's GPUs, and the machines of the group (1 unless its processes span several).
  int ranks() const;
  int machines() const;
  // Across machines: whether any process had a stop asked for at the end of the last step (the
  // stop flag of each is read there, not mid-step). Always false on one machine.
  bool stop_asked() const;
  // Across machines, a checkpoint asked for (SIGUSR1) on any machine is written by all at the
  // same step: each takes its `asked` flag (clearing it) at a step's end and checkpoint_asked()
  // then says whether any process had it set. Unused on one machine.
  void set_checkpoint_flag(std::atomic<bool>* asked);
  bool checkpoint_asked() const;
  // GPU r's engine.
  StreamingEngine& rank(int r);

  // A forward pass without gradients (evaluation, generation): rank 0's StreamingEngine::forward,
  // run past one machine by every GPU of every process alike (each block's broadcast needs them
  // all: every process must call it with the same batch), rank 0's result.
  Result<StepResult> forward(const StepBatch& batch, float* logits = nullptr);

  // One step: batch.micro_batches must be a multiple of ranks() × machines(), at most that many ×
  // config.max_micro_batches. The result is the whole step's: loss over every target, each block's
  // gradient sum of squares over the GPUs, rank 0's timeline and, with several GPUs, each one's.
  Result<StepResult> forward_backward(const StepBatch& batch);

  // As StreamingEngine's, for every GPU.
  void set_weight_gate(std::function<void(size_t block)> gate);
  // Every GPU's timeline: each engine's spans reach `sink` tagged with the device that did the
  // work, the GPU's CUDA index (on the CPU backend, whose ranks all have device 0, the rank), or
  // none with one GPU (whose spans then read as before data parallel). With several GPUs the
  // sink is called from every GPU's thread at once, within forward_backward: it must be
  // thread-safe. An empty sink turns the spans off.
  void set_span_sink(DeviceSpanSink sink, std::function<double()> clock);
  void set_stop_flag(const std::atomic<bool>* stop);
  void invalidate_weights();
  // Rank 0's (every GPU's arena is laid out alike); its HBM state tier (none with several GPUs).
  const DeviceMemoryPlan& memory_plan() const;
  HbmState* hbm_state();
  // Bytes moved over the host links, summed over the GPUs.
  uint64_t h2d_bytes() const;
  uint64_t d2h_bytes() const;

 private:
  struct Impl;
  explicit DataParallelEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spillway
