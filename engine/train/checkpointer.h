// Checkpointer: when and how a training run saves itself (docs/architecture.md, "The trainer"):
// waits for the optimizer's update in flight, writes the model, the AdamW state and the trainer's
// progress into checkpoints/step-NNNNNN of the run folder (train/checkpoint.h holds the format),
// keeps the newest output.keep_checkpoints of the scheduled ones, and reports each through the
// run's reporter. Not thread-safe: the trainer's thread calls it. Borrows the assembly and the
// reporter, which must outlive it.
#pragma once

#include <chrono>
#include <string>

#include "core/status.h"
#include "train/checkpoint.h"
#include "train/run-assembly.h"
#include "train/run-reporter.h"

namespace spillway {

class Checkpointer {
 public:
  // `started`: when this process's part of the run began; a checkpoint's elapsed_s is the resumed
  // checkpoint's (run.start.elapsed_s) plus the time since.
  Checkpointer(RunAssembly& run, RunReporter& report, int keep_checkpoints,
               std::chrono::steady_clock::time_point started);

  // Saves the run at `progress` (its step, tokens and loss; the batch cursor and elapsed time are
  // filled in here). `manual`: asked for (SIGUSR1, the app's Save checkpoint), kept by the keep-N
  // rotation. Errors: the optimizer's (an SSD failure in the update), save_checkpoint's (kNoSpace
  // on a full disk, nothing left behind) and the reporter's. Past one machine every process calls
  // it at the same step and writes its blocks into process 0's checkpoint folder
  // (checkpoint-parts.h); process 0 prunes.
  Status save(TrainerState& progress, bool manual = false);
  // The folder of the last checkpoint save() wrote; empty before the first.
  const std::string& last_saved() const { return last_saved_; }

 private:
  RunAssembly& run_;
  RunReporter& report_;
  const int keep_;
  const std::chrono::steady_clock::time_point started_;
  std::string last_saved_;
};

}  // namespace spillway
