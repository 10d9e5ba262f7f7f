#include "history/run-recorder.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "history/process-liveness.h"
#include "history/run-folder.h"

namespace spillway {
namespace fs = std::filesystem;

Result<std::unique_ptr<RunRecorder>> RunRecorder::create(RunInfo info, RunRecorderOptions options,
                                                         const std::optional<ResumePoint>& resume) {
  std::string db = options.db_path;
  if (db.empty()) {
    SPW_ASSIGN_OR_RETURN(db, RunStore::default_db_path());
  }
  SPW_ASSIGN_OR_RETURN(std::unique_ptr<RunStore> store, RunStore::open(db, options.store));
  if (!info.run_dir.empty()) info.run_dir = fs::absolute(info.run_dir).string();
  // A resume: the run it continues, when runs.db knows it.
  std::optional<RunInfo> resumed;
  if (resume) {
    const std::string from_folder = run_folder_of_checkpoint(resume->checkpoint_dir);
    if (!info.id.empty()) {
      auto run = store->get_run(info.id);
      if (run.ok()) {
        if (!info.run_dir.empty() && !same_folder(info.run_dir, run->run_dir)) {
          return invalid_argument("run " + info.id + " has its folder in " + run->run_dir +
                                  ", not in output.run_dir " + info.run_dir +
                                  ": resume it without output.run_dir, or leave out the run id to "
                                  "start a new run from the checkpoint there");
        }
        resumed = std::move(*run);
      } else if (run.status().code() != ErrorCode::kNotFound) {
        return run.status();
      }
    } else {
      const std::string folder = !info.run_dir.empty() ? info.run_dir : from_folder;
      SPW_ASSIGN_OR_RETURN(resumed, store->find_run_by_folder(folder));
    }
    if (!resumed) {
      if (info.run_dir.empty()) info.run_dir = from_folder;
      // A branch into another folder: the run that wrote the checkpoint is its parent.
      if (info.parent_id.empty() && !from_folder.empty() &&
          !same_folder(info.run_dir, from_folder)) {
        SPW_ASSIGN_OR_RETURN(std::optional<RunInfo> parent, store->find_run_by_folder(from_folder));
        if (parent) info.parent_id = parent->id;
      }
    }
  }
  if (!resume && !info.id.empty()) {
    if (auto taken = store->get_run(info.id); taken.ok()) {
      return invalid_argument(
          "run " + info.id + " is in History already (its folder " + taken->run_dir +
          "): resume it from one of its checkpoints (--resume), or start a new run without "
          "its id");
    }
  }
  if (resumed) {
    // Two workers must not write one run (Resume pressed twice, a terminal and the GUI).
    if (resumed->status == RunStatus::kRunning && resumed->pid &&
        *resumed->pid != static_cast<int64_t>(getpid())) {
      const ProcessIdentity who = worker_of(*resumed);
      if (check_process(who) != Liveness::kGone) {
        return invalid_argument("run " + resumed->id + " in " + resumed->run_dir +
                                " is still running (worker " + std::to_string(who.pid) +
                                (who.host.empty() ? "" : " on " + who.host) +
                                "): stop it, or wait for it to end, before resuming it");
      }
    }
    info.id = resumed->id;
    info.run_dir = resumed->run_dir;
  }
  if (info.id.empty()) info.id = RunStore::new_run_id();
  if (info.run_dir.empty()) {
    SPW_ASSIGN_OR_RETURN(info.run_dir, default_run_folder(info.id));
  }
  std::error_code ec;
  fs::create_directories(info.run_dir, ec);
  if (ec || access(info.run_dir.c_str(), W_OK) != 0) {
    return io_error("cannot write the run folder " + info.run_dir +
                    (ec ? ": " + ec.message() : "") + "; choose another output.run_dir");
  }
  // One worker per run folder: a second one is refused before it writes anything there.
  auto lock = RunFolderLock::acquire(info.run_dir);
  if (!lock.ok()) {
    if (lock.status().code() != ErrorCode::kInvalidArgument) return lock.status();
    std::string who;
    auto other = store->find_run_by_folder(info.run_dir);
    if (other.ok() && *other && (*other)->status == RunStatus::kRunning)
      who = " (run " + (*other)->id +
            ((*other)->pid ? ", worker process " + std::to_string(*(*other)->pid) : std::string()) +
            ")";
    return invalid_argument(
        lock.status().message() + who +
        ": stop that run or wait for it to end, or choose another output.run_dir");
  }
  // Under the lock no other worker writes here: a step-N.tmp-<pid> folder is a dead writer's.
  remove_unfinished_checkpoints(run_checkpoints_dir(info.run_dir), /*lock_held=*/true);
  // A resume in the checkpoint's own folder: the checkpoints after it are the abandoned steps'.
  std::string set_aside;
  if (resume && same_folder(run_folder_of_checkpoint(resume->checkpoint_dir), info.run_dir)) {
    if (resumed && !resume->run_id.empty() && resume->run_id != info.id)
      return corrupt("the checkpoint " + resume->checkpoint_dir + " was written by run " +
                     resume->run_id + ", not by run " + info.id +
                     " whose folder holds it (it was copied from another run): resume from one "
                     "of this run's own checkpoints");
    SPW_ASSIGN_OR_RETURN(set_aside, set_aside_checkpoints_after(info.run_dir, resume->step));
  }
  std::string id = info.id;
  if (resumed) {
    Status st = store->resume_run(id, info, resume->step);
    if (!st.ok()) return st.with_context("resume run " + id);
  } else {
    SPW_ASSIGN_OR_RETURN(id, store->create_run(info));
  }
  const std::string events_path = (fs::path(info.run_dir) / kRunEventsFile).string();
  SPW_ASSIGN_OR_RETURN(
      std::unique_ptr<EventWriter> events,
      EventWriter::open(info.run_dir, EventWriter::last_t_s(events_path).value_or(0.0)));
  auto rec = std::unique_ptr<RunRecorder>(new RunRecorder(
      std::move(store), std::move(events), std::move(id), info.run_dir, std::move(options)));
  rec->resumed_ = resumed.has_value();
  if (!set_aside.empty()) {
    rec->log(LogLevel::kInfo, "the checkpoints after step " + std::to_string(resume->step) +
                                  " (steps this resume trains again) were moved to " + set_aside);
  }
  rec->folder_lock_ = std::move(*lock);
  return rec;
}

RunRecorder::RunRecorder(std::unique_ptr<RunStore> store, std::unique_ptr<EventWriter> events,
                         std::string id, std::string dir, RunRecorderOptions options)
    : store_(std::move(store)),
      events_(std::move(events)),
      id_(std::move(id)),
      dir_(std::move(dir)),
      options_(std::move(options)) {}

RunRecorder::~RunRecorder() = default;

Status RunRecorder::must(const std::function<Status()>& write, const std::string& what) {
  Status st = write();
  if (st.ok()) return st;
  std::this_thread::sleep_for(std::chrono::duration<double>(options_.retry_delay_s));
  st = write();
  if (st.ok()) return st;
  return st.with_context("the run's history (" + store_->path() + ") could not record " + what +
                         "; the run folder " + dir_ +
                         " keeps its checkpoints: free the database (close the program "
                         "holding it, or make it writable) and resume");
}

void RunRecorder::lost(bool in_db, const std::string& what, const Status& st) {
  dropped_.fetch_add(1);
  std::string warning;
  {
    std::lock_guard lock(warn_mu_);
    bool& warned = in_db ? warned_db_ : warned_events_;
    if (warned) return;
    warned = true;
    warning =
        std::string(in_db ? "History (" + store_->path() + ")" : events_->path()) +
        " could not record " + what + ": " + st.to_string() + "; the run goes on" +
        (in_db ? ", and its events.jsonl keeps every step" : ", and History keeps its steps") +
        " (further failures are counted, not repeated)";
  }
  if (options_.on_warning) options_.on_warning(warning);
  if (in_db) log(LogLevel::kWarn, warning);  // into the other destination
}

Status RunRecorder::state(const StateEvent& e) {
  Status st = events_->state(e);
  if (!st.ok()) return st.with_context(events_->path() + ": the '" + e.state + "' state");
  return st;
}

Status RunRecorder::checkpoint(int64_t step, const std::string& path, uint64_t bytes,
                               double write_s) {
  Status st = events_->checkpoint(CheckpointEvent{step, path, bytes, write_s});
  if (!st.ok()) return st.with_context(events_->path() + ": checkpoint " + path);
  return must(
      [&] {
        return store_->add_checkpoint(id_,
                                      CheckpointRow{step, path, 0, static_cast<int64_t>(bytes)});
      },
      "checkpoint " + path);
}

Status RunRecorder::finish(RunStatus status, const FinalFigures& figures, StateEvent state_extra) {
  if (const uint64_t n = dropped(); n > 0)
    log(LogLevel::kWarn, std::to_string(n) + " telemetry record" + (n == 1 ? " was" : "s were") +
                             " not written (see the first warning)");
  state_extra.state = run_status_name(status);
  SPW_RETURN_IF_ERROR(state(state_extra));
  return must([&] { return store_->finish_run(id_, status, figures); },
              std::string("the run's end (") + run_status_name(status) + ")");
}

Status RunRecorder::fail(const Status& why, FinalFigures figures) {
  figures.error_message = why.to_string();
  Status st = events_->error(why);
  if (st.ok()) st = events_->state("failed");
  if (st.ok())
    st = must([&] { return store_->finish_run(id_, RunStatus::kFailed, figures); },
              "the run's failure");
  if (st.ok()) return why;
  return Status(why.code(),
                why.message() + " (and recording the failure failed too: " + st.to_string() + ")");
}

void RunRecorder::step(const StepEvent& e, const MetricRow& row) {
  if (Status st = events_->step(e); !st.ok()) lost(false, "step " + std::to_string(row.step), st);
  if (Status st = store_->add_metric(id_, row); !st.ok())
    lost(true, "step " + std::to_string(row.step) + "'s metrics", st);
}

void RunRecorder::eval(const EvalEvent& e, const EvalRow& row) {
  if (Status st = events_->eval(e); !st.ok())
    lost(false, "the eval at step " + std::to_string(row.step), st);
  if (Status st = store_->add_eval(id_, row); !st.ok())
    lost(true, "the eval at step " + std::to_string(row.step), st);
}

void RunRecorder::sample(double t_s, const nlohmann::json& fields) {
  if (auto st = store_->add_sample(id_, t_s, fields.dump()); !st.ok())
    lost(true, "a telemetry sample", st.status());
}

void RunRecorder::emit(std::string_view type, const nlohmann::json& fields) {
  if (Status st = events_->emit(type, fields); !st.ok())
    lost(false, "a '" + std::string(type) + "' event", st);
}

void RunRecorder::plan(const Plan& plan) {
  const nlohmann::json j = to_json(plan);
  emit(event_type_name(EventType::kPlan), j);
  // In runs.db too: History shows each run's placement (the HBM state tier's blocks) from there,
  // the run folder gone or not, and a resume's newer plan after the first.
  if (Status st =
          store_->add_event(id_, events_->now_s(), event_type_name(EventType::kPlan), j.dump());
      !st.ok())
    lost(true, "the plan", st);
}

void RunRecorder::measured(const MeasuredEvent& e) {
  emit(event_type_name(EventType::kMeasured), to_json(e));
}

void RunRecorder::exported(const ExportEvent& e) {
  emit(event_type_name(EventType::kExport), to_json(e));
}

void RunRecorder::span(const SpanEvent& span) {
  if (Status st = events_->span(span); !st.ok()) lost(false, "a span", st);
}

void RunRecorder::log(LogLevel level, std::string_view message) {
  if (Status st = events_->log(level, message); !st.ok()) lost(false, "a log line", st);
}

void RunRecorder::step_figures(const StepFigures& predicted, const StepFigures& measured) {
  if (Status st =
          store_->set_step_figures(id_, to_json(predicted).dump(), to_json(measured).dump());
      !st.ok())
    lost(true, "the predicted and measured figures", st);
}

}  // namespace spillway
