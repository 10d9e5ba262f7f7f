// Evaluator: a training run's evaluation (docs/architecture.md, "The trainer"): the mean
// cross-entropy of the held-out set (data.eval or data.eval_fraction) over up to
// train.eval_batches batches of the step's shape, reported as an `eval` event and row with its
// perplexity. Not thread-safe: the trainer's thread calls it. Borrows the assembly and the
// reporter, which must outlive it.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/status.h"
#include "train/run-assembly.h"
#include "train/run-reporter.h"
#include "train/train-job.h"

namespace spillway {

class Evaluator {
 public:
  Evaluator(const TrainJob& job, RunAssembly& run, RunReporter& report)
      : job_(job), run_(run), report_(report) {}

  // Evaluates the weights of `step` and reports the loss. Ok without a report when there is no
  // held-out data or it has no targets. Errors: the engine's, kCancelled when a stop request cut
  // the evaluation short (at its next micro-batch or layer).
  Status evaluate(int64_t step);
  // The last evaluation's loss; NaN before the first.
  double last_loss() const { return last_loss_; }

 private:
  const TrainJob& job_;
  RunAssembly& run_;
  RunReporter& report_;
  double last_loss_ = std::nan("");
};

}  // namespace spillway
