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

#include <nlohmann/json.hpp>

namespace spillway {

// A run's step figures. Absent: not measured (the CPU backend has no HBM) or not predicted.
struct StepFigures {
  std::optional<double> step_s;             // seconds per optimizer step (median)
  std::optional<double> tokens_per_s;       // trained tokens per second at that step time
  std::optional<uint64_t> peak_hbm_bytes;   // device memory at its highest
  std::optional<uint64_t> peak_dram_bytes;  // host memory at its highest
  std::optional<double> h2d_bytes;          // host → device bytes per step
  std::optional<double> d2h_bytes;          // device → host bytes per step
};

// The plan's prediction (make_plan's JSON): step.step_s, step.tokens_per_s, the peaks as each
// tier's needed_bytes + runtime_bytes (HBM absent on the CPU backend without a device cap),
// step.h2d_bytes and step.d2h_bytes.
StepFigures predicted_figures(const nlohmann::json& plan);

// Collects the measured figures step by step.
//  - Step time: the median over the steps after the process's first, which also picks cuBLASLt's
//    algorithms, faults in the pinned buffers and has no AdamW of a previous step to hide (with a
//    single step, that one).
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
  void add_step(double step_s, int64_t tokens, uint64_t device_used_bytes, uint64_t h2d_bytes, uint64_t d2h_bytes);
  int64_t steps() const { return static_cast<int64_t>(step_s_.size()); }
  // The figures so far (reads VmHWM now); all absent before the first step.
  StepFigures figures() const;

 private:
  std::vector<double> step_s_;
  std::vector<int64_t> tokens_;
  std::vector<uint64_t> h2d_, d2h_;
  uint64_t peak_device_ = 0;
};

// {"step_s": {"predicted", "measured", "ratio"}, "tokens_per_s": ..., "peak_hbm_bytes": ...,
// "peak_dram_bytes": ..., "h2d_bytes": ..., "d2h_bytes": ...}: ratio = measured / predicted, null
// where either is absent or the prediction is 0.
nlohmann::json compare_figures(const StepFigures& predicted, const StepFigures& measured);

// The figures as JSON, absent ones null (RunInfo::predicted_json / measured_json).
nlohmann::json figures_to_json(const StepFigures& f);

}  // namespace spillway
