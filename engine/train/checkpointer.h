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
  // on a full disk, nothing left behind) and the reporter's. Past one machine only process 0
  // writes (every machine holds the same state); the others' save does nothing.
  Status save(TrainerState& progress, bool manual = false);

 private:
  RunAssembly& run_;
  RunReporter& report_;
  const int keep_;
  const std::chrono::steady_clock::time_point started_;
};

}  // namespace spillway
