// RunReporter: everything a training run tells the outside world, behind one object — its record
// (events.jsonl and runs.db, through history/run-recorder.h), its telemetry sampler (tiers, links
// and the GPU, about 10 Hz), the timeline spans of the engine and the optimizer (for about one
// step a second), the step figures measured against the run's plan, and the log lines for the
// terminal (docs/architecture.md, "The trainer"). The step loop makes one call before a step's
// work, one when its compute is done and one after it; it never formats an event itself.
//
// Thread-safety: the span sinks it hands the engine and the optimizer may be called from their
// threads, every GPU's at once (the recorder's telemetry methods are thread-safe); every other
// method from the trainer's thread. Ownership: owns the recorder and the sampler; borrows the
// RunAssembly it reports on, which must outlive the sampler's thread (start_telemetry ..
// stop_telemetry), while the reporter itself must outlive the assembly's optimizer, whose thread
// writes spans.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/log.h"
#include "core/status.h"
#include "history/run-recorder.h"
#include "telemetry/telemetry-sampler.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/run-assembly.h"
#include "train/run-figures.h"
#include "train/train-job.h"
#include "train/trainer.h"

namespace spillway {

// A step as the reporter took it in at its start (RunReporter::begin_step).
struct StepMark {
  std::chrono::steady_clock::time_point t0;
  uint64_t h2d_bytes = 0, d2h_bytes = 0;  // the engine's copy counters when the step began
  double start_s = 0;                     // on the run's clock (events' `t`)
  double computed_s = 0;                  // when its forward and backward were done
};

// A finished step, as the loop knows it.
struct StepReport {
  int64_t step = 0;  // the step just finished, 1-based
  int64_t total_steps = 0;
  double loss = 0;          // mean cross-entropy over the step's targets
  double lr = 0;            // the learning rate its update uses
  StepStats stats;          // gradient norm, and the SSD bytes of the previous update
  int64_t step_tokens = 0;  // the tokens of its sequences (padding excluded)
  int64_t tokens = 0;       // the run's tokens so far, this step's included
};

class RunReporter {
 public:
  // Records the run (a new row, or the resumed run's: history/run-recorder.h), creates its folder
  // and calls hooks.on_run_folder and hooks.on_started; builds the sampler (with the GPU's own
  // memory and NVML's figures on a GPU backend) and hooks the engine's and the optimizer's
  // timeline spans to the run. Errors: those of RunRecorder::create and of on_run_folder.
  static Result<std::unique_ptr<RunReporter>> create(const TrainJob& job, RunAssembly& run,
                                                     const TrainerHooks& hooks);
  RunReporter(const RunReporter&) = delete;
  RunReporter& operator=(const RunReporter&) = delete;

  const std::string& run_id() const { return rec_->id(); }
  const std::string& run_dir() const { return rec_->dir(); }
  // A log line: into events.jsonl and runs.db, and to hooks.on_log.
  void log(LogLevel level, const std::string& message);

  // The "training" state with the run's placement, then the run's plan (plan()), made now with
  // the machine's figures so that the GUI and History hold predicted against measured figures.
  Status training(int64_t step);
  const Plan& plan() const { return plan_; }

  // A step: begin_step before its batch is read (timeline spans on for this step when the last
  // step with spans began a second or more ago), computed once its forward and backward are done,
  // end_step once its update has begun: the `step` event and metrics row, the figures held
  // against the plan, and every train.log_every steps the terminal's line.
  StepMark begin_step();
  void computed(StepMark& mark) const { mark.computed_s = rec_->now_s(); }
  void end_step(const StepMark& mark, const StepReport& step);

  // An evaluation's `eval` event and row, and its log line.
  void eval(int64_t step, double loss, double eval_s);
  // A checkpoint's states (`checkpointing`, then `training` again) and its record.
  Status checkpointing(int64_t step);
  Status checkpointed(int64_t step, const std::string& dir, uint64_t bytes, double write_s);
  // The `export` event and its log line (a warning when the model has no tokenizer to go with it).
  void exported(const std::string& dir, bool with_tokenizer);

  // Telemetry: the sampler's thread runs from start_telemetry until stop_telemetry.
  void start_telemetry() { sampler_->start(); }
  void stop_telemetry() { sampler_->stop(); }
  // One more sample, after the run's final writes.
  void last_sample() { sampler_->sample_once(); }

  // The figures measured so far against the plan's: the `measured` event and the runs.db row
  // (nothing when no step finished). Returns what was measured.
  StepFigures report_figures();
  // The run's end: its final state and figures (RunRecorder::finish), or its failure.
  Status finish(RunStatus status, const FinalFigures& figures, StateEvent state_extra = {});
  Status fail(const Status& why, const FinalFigures& figures);

 private:
  RunReporter(const TrainJob& job, RunAssembly& run, const TrainerHooks& hooks);
  void attach_spans();

  const TrainJob& job_;
  RunAssembly& run_;
  std::function<void(const std::string&)> on_log_;
  std::unique_ptr<RunRecorder> rec_;
  std::unique_ptr<TelemetrySampler> sampler_;  // reads run_.counters and run_.backend
  StepFigureRecorder figures_;                 // what the steps measured, to hold against the plan
  Plan plan_;                                  // this run's plan, made when training starts
  // Timeline spans for the GUI, for about one step per second (a span per block and phase would
  // flood events.jsonl for small models that take many steps a second). Decided in begin_step,
  // before the step's forward_backward, which hands every GPU's spans to the sink before it
  // returns: a step's spans are written for all of its GPUs or for none.
  std::atomic<bool> spans_on_{false};
  double last_span_step_ = -1e9;
};

}  // namespace spillway
