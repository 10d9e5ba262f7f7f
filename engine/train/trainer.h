// Trainer: runs a TrainJob end to end — model, data, backend, streaming engine, optimizer,
// learning-rate schedule, evaluation, checkpoints, export — and reports through events.jsonl and
// the run store. One trainer is one run; it owns everything it creates. Its parts, each with one
// job (docs/architecture.md, "The trainer"): RunAssembly (run-assembly.h) builds what the run
// computes with from the job, RunReporter (run-reporter.h) records and reports, Checkpointer and
// Evaluator save and evaluate, and trainer.cpp holds the step loop that drives them.
//
// Control: request_stop() (SIGTERM) stops the current step or evaluation at its next micro-batch
// or layer (the step is dropped unapplied and its batch kept for the resume), checkpoints the last
// finished step and stops; request_checkpoint() (SIGUSR1) checkpoints after the current step. Both
// only set atomics, so they are safe from a signal handler. run() is called once, from one thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "compute/communicator.h"
#include "core/status.h"
#include "train/run-figures.h"
#include "train/train-job.h"

namespace spillway {

struct TrainerHooks {
  // Called once the run id and folder are known (before the first step).
  std::function<void(const std::string& run_id, const std::string& run_dir)> on_started;
  // Every log line, for the terminal.
  std::function<void(const std::string& line)> on_log;
  // A record of the run that could not be written and did not stop it (a step's row in a locked
  // runs.db, ...): once per destination, a sentence for the user (history/run-recorder.h).
  std::function<void(const std::string& warning)> on_warning;
  // The job as its owner resolved it (the worker's job.json: every key, defaults filled in), kept
  // with the run in the run store so that History can show, compare and clone it. Opaque here.
  std::string job_json = "{}";
  // The run's id as its launcher chose it (the GUI names the run folder by it before the worker
  // starts: history/run-folder.h); "" : generated. With a resume, the run to continue.
  std::string run_id;
  // Called once the run folder exists and the run is recorded, before its first event: the worker
  // writes its job.json there. An error fails create().
  std::function<Status(const std::string& run_dir)> on_run_folder;
  // The run's processes when it spans machines (compute/host-group.h: one worker per machine);
  // null: this process alone. Must outlive the trainer.
  compute::ProcessExchange* processes = nullptr;
};

class Trainer {
 public:
  // Resolves the job (loads the model, tokenizer and data, builds the engine) and records the run.
  // `resume_from`: a checkpoint folder to continue from ("" for a fresh run).
  static Result<std::unique_ptr<Trainer>> create(const TrainJob& job,
                                                 const std::string& resume_from,
                                                 TrainerHooks hooks = {});
  ~Trainer();

  // Trains to the last step (or until stopped). Ok when completed or stopped on request.
  Status run();
  // Trains the job's steps like run() but neither evaluates, checkpoints nor exports: the probe of
  // `spillway-worker plan --measure N`. Returns what the steps measured (run-figures.h); plan()
  // holds the prediction. Errors: those of run(), and kCancelled when stopped on request (at the
  // engine's next micro-batch or layer, as run(), but with no checkpoint: the run is thrown away).
  Result<StepFigures> measure();
  void request_stop() { stop_.store(true); }
  void request_checkpoint() { checkpoint_.store(true); }

  // The plan made for this run when its training started (a default Plan before).
  const Plan& plan() const;
  const std::string& run_id() const;
  const std::string& run_dir() const;
  int64_t total_steps() const;
  // Optimizer steps in one pass over the training sequences (the job's micro-batch x accumulation).
  int64_t batches_per_epoch() const;
  // The last finished step (0 before the first; a resumed run counts from its checkpoint's).
  int64_t step() const;
  double last_eval_loss() const;

 private:
  struct Impl;
  Trainer();
  std::atomic<bool> stop_{false}, checkpoint_{false};  // set from signal handlers; read by impl_
  std::unique_ptr<Impl> impl_;
};

}  // namespace spillway
