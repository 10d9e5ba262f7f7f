#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "train/checkpoint-parts.h"
#include "train/checkpointer.h"
#include "train/evaluator.h"
#include "train/export.h"
#include "train/lr-schedule.h"
#include "train/run-assembly.h"
#include "train/run-reporter.h"

namespace spillway {
namespace {

// The step's micro-batches: the job's accumulation on every GPU of every machine.
StepBatch step_batch(const TrainJob& job, const Batch& b, const RunAssembly& run) {
  StepBatch s;
  s.micro_batches = run.step_micro_batches(job.grad_accum);
  s.micro_batch_size = job.micro_batch_size;
  s.seq_len = b.seq_len;
  s.input_ids = b.input_ids;
  s.labels = b.labels;
  s.positions = b.positions;
  return s;
}

int64_t tokens_of(const Batch& b) {
  int64_t n = 0;
  for (int32_t len : b.lengths) n += len;
  return n;
}

// A step whose loss or gradients are not finite has diverged: the run stops before the optimizer
// spreads NaN through the weights (a learning rate of 1e300 trained on and exported a NaN model).
// The weights in memory are the previous step's; the last checkpoint stays as it was.
Status check_finite(const StepResult& r, int64_t step, double lr) {
  double sumsq = 0;
  for (double s : r.grad_sumsq) sumsq += s;
  if (std::isfinite(r.loss()) && std::isfinite(sumsq)) return {};
  auto number = [](double v) {  // "nan", never "-nan"
    char b[32];
    std::snprintf(b, sizeof(b), "%g", std::isnan(v) ? std::fabs(v) : v);
    return std::string(b);
  };
  char lr_text[32];
  std::snprintf(lr_text, sizeof(lr_text), "%g", lr);
  return invalid_argument("step " + std::to_string(step) + " diverged: loss " + number(r.loss()) +
                          ", gradient norm " + number(std::sqrt(sumsq)) + "; lower train.lr (" +
                          lr_text +
                          ") or raise train.warmup_steps, and resume from the last checkpoint");
}

}  // namespace

// One run's parts, declared once, in the order of their lifetimes: each member is destroyed
// before those above it. The reporter outlives the assembly because the optimizer's thread writes
// timeline spans into it; the sampler inside the reporter reads the assembly's counters and
// backend only between start_telemetry and stop_telemetry, which run() and measure() bracket.
struct Trainer::Impl {
  const TrainJob job;
  const TrainerHooks hooks;
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  const std::atomic<bool>& stop;        // request_stop()
  std::atomic<bool>& checkpoint_asked;  // request_checkpoint()
  bool measuring = false;  // measure(): a throwaway run, so a stop writes no checkpoint
  TrainerState progress;   // the last finished step

  std::unique_ptr<RunReporter> report;  // events.jsonl, runs.db, telemetry, the log
  RunAssembly run;                      // backend, model state, data, engine, optimizer
  std::unique_ptr<Checkpointer> checkpointer;
  std::unique_ptr<Evaluator> evaluator;

  Impl(const TrainJob& j, TrainerHooks h, const std::atomic<bool>& stop_flag,
       std::atomic<bool>& checkpoint_flag)
      : job(j), hooks(std::move(h)), stop(stop_flag), checkpoint_asked(checkpoint_flag) {}

  FinalFigures final_figures() const {
    FinalFigures f;
    f.final_loss = progress.last_loss;
    f.final_step = progress.step;
    f.tokens = progress.tokens;
    return f;
  }

  // The run's failure, recorded with its figures so far (the last loss left out: the failed
  // step's).
  Status fail(const Status& st) {
    FinalFigures f = final_figures();
    f.final_loss.reset();
    return report->fail(st, f);
  }

  // A stop request that interrupted a step or an evaluation: checkpoint the last finished step
  // (after its optimizer update), then stop as the loop's own check does. A measuring run is
  // thrown away: it stops at once (a 7B checkpoint would take minutes to write and be deleted).
  Status stop_at_step() {
    if (!measuring) SPW_RETURN_IF_ERROR(checkpointer->save(progress));
    return cancelled("stopped on request at step " + std::to_string(progress.step));
  }

  // An evaluation, and when a stop request cuts it short, stop_at_step.
  Status evaluate() {
    Status st = evaluator->evaluate(progress.step);
    return st.code() == ErrorCode::kCancelled ? stop_at_step() : st;
  }

  // After a step: the evaluation and the checkpoint the job schedules, the checkpoint asked for
  // (SIGUSR1), and the stop asked for (SIGTERM, with a checkpoint unless one was just written).
  Status after_step() {
    if (job.eval_every > 0 && progress.step % job.eval_every == 0) SPW_RETURN_IF_ERROR(evaluate());
    // Past one machine every process checkpoints together, on what they agreed at the step's end.
    const bool asked =
        run.machines() > 1 ? run.engine->checkpoint_asked() : checkpoint_asked.exchange(false);
    if (asked || (job.checkpoint_every > 0 && progress.step % job.checkpoint_every == 0))
      SPW_RETURN_IF_ERROR(checkpointer->save(progress, asked));
    // Past one machine the processes stop together, on what they agreed at the step's end: a
    // SIGTERM that came after that is carried into the next step's.
    if (!(run.machines() > 1 ? run.engine->stop_asked() : stop.load())) return {};
    if (!asked && !measuring) SPW_RETURN_IF_ERROR(checkpointer->save(progress));
    return cancelled("stopped on request at step " + std::to_string(progress.step));
  }

  Status train_loop() {
    SPW_RETURN_IF_ERROR(report->training(progress.step));
    if (progress.step == 0 && job.eval_every > 0)
      SPW_RETURN_IF_ERROR(evaluator->evaluate(0));  // the baseline
    LrScheduleConfig sched = job.schedule;
    sched.total_steps = run.total_steps;
    DataParallelEngine& engine = *run.engine;
    Optimizer& optimizer = *run.optimizer;
    BatchIterator& batches = *run.iter;
    // The overlap: AdamW updates the blocks of step s on the optimizer's thread, in forward order,
    // while step s+1 runs; step s+1's forward streams block b to the device only once block b's
    // update is done, and waits for nothing else.
    engine.set_weight_gate([&optimizer](size_t block) { optimizer.wait_block(block); });
    while (progress.step < run.total_steps) {
      // --- the step ---------------------------------------------------------------------------
      StepMark mark = report->begin_step();
      const DataCursor before = batches.cursor();
      const Batch batch = batches.next();
      // Forward and backward; block b's forward first waits for block b's last update.
      auto stepped = engine.forward_backward(step_batch(job, batch, run));
      if (stepped.status().code() == ErrorCode::kCancelled) {
        // SIGTERM inside a long step (the engine checks between micro-batches and layers): the
        // step is dropped unapplied, its batch read again on resume, and the run stops at the
        // last finished step.
        SPW_RETURN_IF_ERROR(batches.seek(before));
        return stop_at_step();
      }
      SPW_ASSIGN_OR_RETURN(const StepResult r, std::move(stepped));
      SPW_RETURN_IF_ERROR(check_finite(r, progress.step + 1, job.schedule.lr));
      report->computed(mark);
      const double lr = lr_at(sched, progress.step + 1);
      // Waits for the last update, then starts this one on the optimizer's thread, with the
      // gradient norm from the engine's device sums; the next forward waits for it block by block.
      const StepStats stats = optimizer.begin_step(lr, r.grad_sumsq);
      SPW_RETURN_IF_ERROR(optimizer.status());  // an SSD failure in the previous step's update
      const int64_t step_tokens = tokens_of(batch);
      ++progress.step;
      progress.tokens += step_tokens;
      progress.last_loss = r.loss();
      report->end_step(mark, {progress.step, run.total_steps, r.loss(), lr, stats, step_tokens,
                              progress.tokens});
      // --- end of the step ----------------------------------------------------------------------
      SPW_RETURN_IF_ERROR(after_step());
    }
    return {};
  }

  // After the last step: the last update, a final evaluation and checkpoint unless the schedule
  // just made them, and the export.
  Status finish() {
    // The last update, and the state of the HBM tier's blocks copied to the host for the export.
    SPW_RETURN_IF_ERROR(run.optimizer->sync_host());
    if (job.eval_every <= 0 || progress.step % job.eval_every != 0) SPW_RETURN_IF_ERROR(evaluate());
    if (job.checkpoint_every <= 0 || progress.step % job.checkpoint_every != 0)
      SPW_RETURN_IF_ERROR(checkpointer->save(progress));
    if (run.process() > 0) return {};  // process 0 exports
    const std::string out = (std::filesystem::path(report->run_dir()) / "export").string();
    // Past one machine from the last checkpoint (this step's), which holds every machine's
    // blocks: the one just written, or the one the run resumed from at its last step.
    const std::string& last =
        checkpointer->last_saved().empty() ? run.resumed_from : checkpointer->last_saved();
    SPW_RETURN_IF_ERROR(run.machines() > 1 ? export_checkpoint(last, run.tokenizer_source, out)
                                           : export_model(*run.state, run.tokenizer_source, out));
    report->exported(out, !run.tokenizer_source.empty());
    return {};
  }
};

Trainer::Trainer() = default;
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::create(const TrainJob& job,
                                                 const std::string& resume_from,
                                                 TrainerHooks hooks) {
  std::unique_ptr<Trainer> trainer(new Trainer());
  TrainJob own = job;
  // Past one machine the other processes record their part of the run beside process 0's, in a
  // folder of its run folder when the job names one (a shared file system), else in their own.
  if (hooks.processes && hooks.processes->process() > 0 && !own.run_dir.empty())
    own.run_dir = (std::filesystem::path(own.run_dir) /
                   ("process-" + std::to_string(hooks.processes->process())))
                      .string();
  trainer->impl_ =
      std::make_unique<Impl>(own, std::move(hooks), trainer->stop_, trainer->checkpoint_);
  Impl& t = *trainer->impl_;
  t.run.processes = t.hooks.processes;
  SPW_RETURN_IF_ERROR(assemble_run(t.job, resume_from, &t.run));
  t.progress = t.run.start;
  SPW_ASSIGN_OR_RETURN(t.report, RunReporter::create(t.job, t.run, t.hooks));
  t.checkpointer =
      std::make_unique<Checkpointer>(t.run, *t.report, t.job.keep_checkpoints, t.started);
  t.evaluator = std::make_unique<Evaluator>(t.job, t.run, *t.report);
  t.run.engine->set_stop_flag(
      &trainer->stop_);  // a SIGTERM stops a long step between layers, not after it
  t.run.engine->set_checkpoint_flag(&trainer->checkpoint_);
  // Past one machine every checkpoint is written by all into process 0's run folder: a machine
  // that cannot see it is said now, not at the first checkpoint hours later.
  if (t.run.machines() > 1)
    SPW_RETURN_IF_ERROR(check_shared_folder(t.report->run_dir(), *t.run.processes));
  t.report->log(LogLevel::kInfo, "backend " + t.run.backend_reason);
  if (!t.run.probe_note.empty()) t.report->log(LogLevel::kWarn, t.run.probe_note);
  if (!t.run.resume_note.empty()) t.report->log(LogLevel::kWarn, t.run.resume_note);
  if (!resume_from.empty())
    t.report->log(LogLevel::kInfo,
                  "resumed from " + resume_from + " at step " + std::to_string(t.progress.step));
  return trainer;
}

Status Trainer::run() {
  Impl& t = *impl_;
  t.report->start_telemetry();
  Status st = t.train_loop();
  if (st.ok()) st = t.finish();
  t.run.optimizer->wait_all();  // no update in flight once the run's end is recorded
  t.report->stop_telemetry();
  t.report->report_figures();
  t.report->last_sample();  // the last sample, after the run's final writes
  if (st.code() == ErrorCode::kCancelled) {
    t.report->log(LogLevel::kInfo, st.message());
    return t.report->finish(RunStatus::kStopped, t.final_figures(),
                            StateEvent::at_step("", t.progress.step));
  }
  if (!st.ok()) return t.fail(st);
  StateEvent end = StateEvent::at_step("", t.progress.step);
  end.eval_loss = t.evaluator->last_loss();
  return t.report->finish(RunStatus::kCompleted, t.final_figures(), end);
}

Result<StepFigures> Trainer::measure() {
  Impl& t = *impl_;
  t.measuring = true;
  t.report->start_telemetry();
  Status st = t.train_loop();
  t.run.optimizer->wait_all();
  if (st.ok()) st = t.run.optimizer->status();
  t.report->stop_telemetry();
  const StepFigures measured = t.report->report_figures();
  if (st.code() == ErrorCode::kCancelled) {
    SPW_RETURN_IF_ERROR(t.report->finish(RunStatus::kStopped, t.final_figures(),
                                         StateEvent::at_step("", t.progress.step)));
    return st;
  }
  if (!st.ok()) return t.fail(st);
  SPW_RETURN_IF_ERROR(t.report->finish(RunStatus::kCompleted, t.final_figures()));
  return measured;
}

const Plan& Trainer::plan() const {
  return impl_->report->plan();
}
const std::string& Trainer::run_id() const {
  return impl_->report->run_id();
}
const std::string& Trainer::run_dir() const {
  return impl_->report->run_dir();
}
int64_t Trainer::total_steps() const {
  return impl_->run.total_steps;
}
int64_t Trainer::batches_per_epoch() const {
  return impl_->run.iter ? impl_->run.iter->batches_per_epoch() : 0;
}
int64_t Trainer::step() const {
  return impl_->progress.step;
}
double Trainer::last_eval_loss() const {
  return impl_->evaluator->last_loss();
}

}  // namespace spillway
