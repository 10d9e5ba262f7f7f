// RunAssembly: everything a training run computes with, put together from a TrainJob
// (docs/architecture.md, "The trainer"): the backend, the model state in its tiers, the tokenizer
// and the datasets with their batch iterator, the machine's figures for the plan, the streaming
// engine and the optimizer. It records nothing and reports nothing: the run's reporter
// (run-reporter.h) does, and the step loop (trainer.cpp) drives the parts.
//
// Ownership and lifetimes: the parts are members declared in the order they are built on, so the
// implicit destruction, in reverse, takes each down before what it uses — the optimizer (whose
// thread reads the model and optimizer state) first, then the engine, the SSD tier's state, its
// scratch folder, the model state, the backend and last the tier counters the engine and the SSD
// store write to. Not copyable or movable (the engine and the SSD store hold pointers to
// `counters`). Not thread-safe: the trainer's thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "data/batch-iterator.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "telemetry/counters.h"
#include "telemetry/sampler.h"
#include "train/block-owners.h"
#include "train/checkpoint.h"
#include "train/data-parallel-engine.h"
#include "train/machine-probe.h"
#include "train/model-state.h"
#include "train/optimizer-state.h"
#include "train/optimizer.h"
#include "train/planner.h"
#include "train/scratch-folder.h"
#include "train/streaming-engine.h"
#include "train/train-job.h"

namespace spillway {

struct RunAssembly {
  RunAssembly() = default;
  RunAssembly(const RunAssembly&) = delete;
  RunAssembly& operator=(const RunAssembly&) = delete;

  TierCounters counters;  // bytes per tier and category, for telemetry
  std::unique_ptr<compute::Backend>
      backend;                 // placement.backend as chosen (auto: the GPU if usable): rank 0
  std::string backend_reason;  // which backend and why, for the log
  // Data parallel (placement.devices): the other GPUs' backends, ranks 1..N-1, and every rank's
  // CUDA device index (0 for each CPU rank).
  std::vector<std::unique_ptr<compute::Backend>> peers;
  std::vector<int> devices;
  int ranks() const { return static_cast<int>(devices.size()); }
  // The run's processes, one per machine (compute/host-group.h), set by the launcher before
  // assemble_run; null: this process alone. Each machine holds the host state of its blocks
  // (block_owners, block-owners.h), writes them into each checkpoint (checkpoint-parts.h) and
  // updates them (data-parallel-engine.h); process 0 exports.
  compute::ProcessExchange* processes = nullptr;
  std::vector<BlockOwner> block_owners;  // past one machine: [block] who holds it; else empty
  int machines() const { return processes ? processes->processes() : 1; }
  int process() const { return processes ? processes->process() : 0; }
  // The step's micro-batches: the job's accumulation on every GPU of every machine.
  int step_micro_batches(int grad_accum) const { return grad_accum * ranks() * machines(); }
  MemInfo mem_at_start;     // DRAM before the run allocated its own state
  TierPlacement placement;  // where the master weights and AdamW moments live
  uint64_t parameters = 0;
  // The HBM state tier's blocks, the fit check's plan's (its trade with the checkpoints, below),
  // decided before the state is allocated (they need no host gradient) and given to the engine
  // as an explicit count.
  size_t hbm_state_blocks = 0;
  // The layers whose checkpoints stay on the device (StreamingConfig::device_checkpoint_layers):
  // the plan's split when it keeps them there, else -1 (as many as fit).
  int device_checkpoint_layers = -1;
  // The last layers that keep their activations (StreamingConfig::saved_activation_layers), as the
  // plan chose.
  int saved_activation_layers = 0;
  int mlp_recompute_layers = 0;       // StreamingConfig::mlp_recompute_layers, as the plan chose
  std::unique_ptr<ModelState> state;  // weights, gradients and (in DRAM) AdamW moments
  std::unique_ptr<ScratchFolder> scratch;  // the SSD tier's folder, removed when the run ends
  std::string ssd_folder;                  // its path ("" with no SSD tier)
  std::unique_ptr<OptimizerStateStore> opt_state;  // where AdamW reads and writes its state
  std::unique_ptr<Tokenizer> tokenizer;  // null: the model has none, the data is pre-tokenized
  std::string tokenizer_source;          // what export copies the tokenizer from; "" for none
  Dataset train_ds, eval_ds;
  std::optional<BatchIterator> iter;  // the training batches, at the resumed cursor
  int64_t total_steps = 0;
  TrainerState start;        // where training starts: step 0, or the resumed checkpoint's state
  std::string resumed_from;  // the checkpoint folder it resumed from ("" for a fresh run)
  std::string resume_note;   // what the resume could not check ("" when it checked everything)
  MachineProbe machine;      // this machine's figures, for the run's plan
  std::string probe_note;    // why the plan uses estimated figures ("" when probed)
  std::unique_ptr<DataParallelEngine> engine;
  std::unique_ptr<Optimizer> optimizer;  // its thread reads state and opt_state: declared last
};

// Builds every part of `run` for `job`, in order: the backend; the machine's figures for the plan
// (the GPU probed before the fit check, whose plan places the state by predicted step time, and
// before the engine takes its arena); the model (refused before anything large is allocated when
// it does not fit: the plan's reason), its tiers and optimizer state; the tokenizer and the
// datasets; the resume from `resume_from` (a checkpoint folder, "" for a fresh run) into the state
// and the batch cursor; the engine and the optimizer. Errors: the first part's that
// fails, with the job key or file it concerns (kInvalidArgument for the job or the data, kNotFound
// and kCorrupt for files, kOutOfMemory for a job that does not fit); parts built before stay in
// `run`, which its destructor takes down.
Status assemble_run(const TrainJob& job, const std::string& resume_from, RunAssembly* run);

}  // namespace spillway
