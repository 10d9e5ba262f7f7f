// Run figures: what a run measured of its own steps, held against what its plan predicted. The
// trainer records them for every run (its "measured" event, History's predicted and measured
// columns) and `spillway-worker plan --measure N` prints them side by side before a long run.
//
// StepFigureRecorder is fed by the training thread once per step and read by the same thread; it
// is a plain value (no locking). The pure functions have no state.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "events/events.h"
#include "events/plan.h"

namespace spillway {

// StepFigures, a run's step figures predicted or measured, and their JSON are events/events.h's.

// The plan's prediction: step.step_s, step.tokens_per_s, the peaks as each tier's needed_bytes +
// runtime_bytes (HBM absent on the CPU backend without a device cap; with several GPUs each
// one's), step.h2d_bytes and step.d2h_bytes times the GPUs (the host's links in all, as the
// engine counts them).
StepFigures predicted_figures(const Plan& plan);

// Collects the measured figures step by step.
//  - Step time: the median over the steps after the process's first, which also picks cuBLASLt's
//    algorithms, faults in the pinned buffers and has no AdamW of a previous step to hide (with a
//    single step, that one); over the last kMedianSteps of them in a longer run, so that its
//    memory does not grow with the run (a 40,000-step soak grew 2.5 MiB when it kept every step).
//  - HBM: the device memory in use (total − free, so the CUDA context and libraries count, as they
//    do for the user) after each step, at its highest; the plan counts the engine's arena only.
//  - DRAM: the process's peak resident set (VmHWM), pinned buffers included; the plan counts the
//    model state, gradients, moments and host checkpoints, not the data or the libraries.
//  - Link bytes: what the engine's copy counters moved during each step (not between steps, where
//    an evaluation may copy too), per step over the same steps as the time.
class StepFigureRecorder {
 public:
  // After each step: its seconds and trained tokens, the device memory in use (0: no device), and
  // the bytes the step moved host → device and device → host.
  void add_step(double step_s, int64_t tokens, uint64_t device_used_bytes, uint64_t h2d_bytes,
                uint64_t d2h_bytes);
  int64_t steps() const { return steps_; }
  // The figures so far (reads VmHWM now); all absent before the first step.
  StepFigures figures() const;

  static constexpr size_t kMedianSteps = 4096;

 private:
  int64_t steps_ = 0;
  double first_step_s_ = 0;
  int64_t first_tokens_ = 0;
  uint64_t first_h2d_ = 0, first_d2h_ = 0;
  // Over the steps after the first: sums, and the last kMedianSteps times (a ring).
  double seconds_ = 0, h2d_ = 0, d2h_ = 0;
  int64_t tokens_ = 0;
  std::vector<double> recent_s_;
  size_t next_ = 0;
  uint64_t peak_device_ = 0;
};

// Each figure predicted against measured: ratio = measured / predicted, absent where either is
// absent or the prediction is 0.
FiguresVersusPlan compare_figures(const StepFigures& predicted, const StepFigures& measured);

}  // namespace spillway
