// RunRecorder: the records of one training run — its id, its folder, events.jsonl (EventWriter)
// and its rows in runs.db (RunStore) — with one policy for a record that cannot be written:
//  - The records a resume and a restarted GUI trust — a state change, a checkpoint, an error, the
//    end — return the failure, and the trainer stops the run with it (its checkpoints stay). A
//    runs.db write of those is retried once after kRetryDelayS first: another process (the GUI, a
//    second worker, a backup) may hold the write lock past the busy timeout for a moment.
//  - Telemetry (a step's metric row, a sample, a span, a log line, an eval row, the plan and the
//    measured figures) never stops a run: a failed write is counted, and the first failure of each
//    destination (events.jsonl, runs.db) is reported once, through on_warning and as a log event
//    where the file still takes one; finish() reports the count.
// Nothing is dropped without a word, and no caller casts a Status to void.
//
// Thread-safety: the telemetry methods may be called from any thread (the sampler's, the
// optimizer's); create, state, checkpoint, fail and finish from one thread. Ownership: the
// recorder owns its EventWriter and RunStore; not copyable or movable.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/log.h"
#include "core/status.h"
#include "events/events.h"
#include "events/plan.h"
#include "history/run-folder.h"
#include "history/run-store.h"
#include "telemetry/event-writer.h"

namespace spillway {

struct RunRecorderOptions {
  std::string db_path;    // "" : RunStore::default_db_path()
  RunStoreOptions store;  // busy timeout and the rest
  double retry_delay_s = 1.0;
  // Each telemetry destination's first failure, as a sentence for the user (the worker prints it).
  std::function<void(const std::string&)> on_warning;
};

// Where a resumed run takes up: the checkpoint folder it loaded and the step that checkpoint holds.
struct ResumePoint {
  std::string checkpoint_dir;
  std::int64_t step = 0;
  // The run that wrote the checkpoint (its manifest's run_id); "" when unknown (format 1). A
  // checkpoint in the folder of a run of runs.db that is not its writer is refused: it was copied
  // from another run. (A whole run folder moved elsewhere, with no row, resumes as a new run.)
  std::string run_id;
};

class RunRecorder {
 public:
  // Opens runs.db, creates the run folder (kIo naming it when it cannot be written), records the
  // run and opens the folder's events.jsonl (appending: a resumed run's time continues from its
  // last line).
  //  - A new run (no `resume`): its row is inserted with info.id (generated when empty;
  //    kInvalidArgument when taken) in info.run_dir, or when that is empty in
  //    default_run_folder(id) (history/run-folder.h), the one naming of run folders.
  //  - A resume is the same run: the run it continues is info.id when given, else the run whose
  //    folder is info.run_dir, else the one whose folder holds the checkpoint
  //    (run_folder_of_checkpoint). Its row is taken up again (RunStore::resume_run: one row, its
  //    metrics up to resume->step kept, its tags and notes kept) and its folder is the run's.
  //    kInvalidArgument when info.id's run has another folder than a given info.run_dir. When no
  //    such run is in runs.db (another database, a folder made by hand), a new row is inserted in
  //    info.run_dir, else the checkpoint's run folder, else the default folder. A resume into
  //    another folder than the checkpoint's (a branch) is a new run whose parent_id is the run
  //    that wrote the checkpoint.
  static Result<std::unique_ptr<RunRecorder>> create(
      RunInfo info, RunRecorderOptions options,
      const std::optional<ResumePoint>& resume = std::nullopt);
  // Whether create() took up an existing run (a resume) rather than inserting one.
  bool resumed() const { return resumed_; }
  ~RunRecorder();
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  const std::string& id() const { return id_; }
  const std::string& dir() const { return dir_; }
  // The events file's clock (seconds since the run started, continued across resumes).
  double now_s() const { return events_->now_s(); }
  // For the telemetry sampler, which writes its sample lines itself.
  EventWriter* events() { return events_.get(); }

  // Records the run cannot go on without: an error names the file and what to do.
  Status state(const StateEvent& e);
  Status state(std::string_view name) {
    StateEvent e;
    e.state = name;
    return state(e);
  }
  Status checkpoint(int64_t step, const std::string& path, uint64_t bytes, double write_s);
  // The end of a run that completed or stopped: its state line (`state_extra` with the status's
  // name as its state) and its row's final figures.
  Status finish(RunStatus status, const FinalFigures& figures, StateEvent state_extra = {});
  // The end of a run that failed with `why`: an error line, a "failed" state and the row. Returns
  // `why`, with the failure to record it appended when there was one.
  Status fail(const Status& why, FinalFigures figures);

  // Telemetry: counted and reported once when it cannot be written.
  void step(const StepEvent& e, const MetricRow& row);
  void eval(const EvalEvent& e, const EvalRow& row);
  void sample(double t_s,
              const nlohmann::json& fields);  // the runs.db row of a sample the sampler wrote
  void plan(const Plan& plan);
  void measured(const MeasuredEvent& e);
  void exported(const ExportEvent& e);
  void emit(std::string_view type, const nlohmann::json& fields);  // an event of another type
  void span(const SpanEvent& span);
  void log(LogLevel level, std::string_view message);
  // The run's predicted and measured figures, for History's columns (runs.db).
  void step_figures(const StepFigures& predicted, const StepFigures& measured);
  // Telemetry records not written so far.
  uint64_t dropped() const { return dropped_.load(); }

 private:
  RunRecorder(std::unique_ptr<RunStore> store, std::unique_ptr<EventWriter> events, std::string id,
              std::string dir, RunRecorderOptions options);
  // A runs.db write of a record the run needs, retried once.
  Status must(const std::function<Status()>& write, const std::string& what);
  // A telemetry record not written: counted; the first of each destination is reported.
  void lost(bool in_db, const std::string& what, const Status& st);

  std::unique_ptr<RunStore> store_;
  std::unique_ptr<EventWriter> events_;
  std::string id_, dir_;
  RunRecorderOptions options_;
  bool resumed_ = false;
  RunFolderLock folder_lock_;  // held while this recorder writes the run folder
  std::atomic<uint64_t> dropped_{0};
  std::mutex warn_mu_;
  bool warned_db_ = false, warned_events_ = false;
};

}  // namespace spillway
