#include "worker/train-command.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "compute/host-group.h"
#include "core/file-util.h"
#include "core/json-file.h"
#include "data/batch-iterator.h"
#include "history/process-liveness.h"
#include "history/run-folder.h"
#include "history/run-store.h"
#include "train/trainer.h"
#include "worker/args.h"
#include "worker/job-file.h"
#include "worker/stop-signals.h"

namespace spillway::worker {
namespace {

// What the worker knows of the run it was asked for, to record a failure before the run began.
struct Attempt {
  std::string db;       // the job's output.db; "" : the default
  std::string run_id;   // --run-id
  std::string run_dir;  // the job's output.run_dir, absolute; "" when it names none
  std::string resume;   // --resume
  std::string name, job_json = "{}", model_name, model_path, dataset;
};

Attempt attempt_of(const JobFile& file, const std::string& run_id, const std::string& resume) {
  const TrainJob& job = file.job;
  Attempt a;
  a.db = job.db_path;
  a.run_id = run_id;
  a.run_dir = job.run_dir.empty() ? std::string() : std::filesystem::absolute(job.run_dir).string();
  a.resume = resume;
  a.name = job.name;
  a.job_json = file.resolved.dump();
  a.model_name = !job.model_path.empty()
                     ? std::filesystem::path(job.model_path).filename().string()
                     : (!job.init_preset.empty() ? job.init_preset : "custom-init");
  a.model_path = job.model_path;
  a.dataset = job.train_path;
  return a;
}

// A job file the worker cannot use: what can still be read of it (its name, database, run
// folder, model and data, each only when it is a string), paths taken relative to its folder as
// load_job_file takes them; its file name when it says nothing.
Attempt attempt_of_unreadable(const std::string& path, const std::string& run_id,
                              const std::string& resume) {
  namespace fs = std::filesystem;
  Attempt a;
  a.run_id = run_id;
  a.resume = resume;
  const fs::path file = fs::absolute(path);
  // The GUI's job files are all job.json, each in a folder of its own: the folder names it.
  a.name = file.filename() == "job.json" && file.has_parent_path()
               ? file.parent_path().filename().string()
               : file.stem().string();
  auto text = read_file(path);
  if (!text.ok()) return a;
  const auto parsed = parse_json(*text, path);
  if (!parsed.ok() || !parsed->is_object()) return a;
  const nlohmann::json& j = *parsed;
  auto string_at = [&](const char* section, const char* key) -> std::string {
    const auto s = j.find(section);
    if (s == j.end() || !s->is_object()) return {};
    const auto v = s->find(key);
    return v != s->end() && v->is_string() ? v->get<std::string>() : std::string();
  };
  auto path_at = [&](const char* section, const char* key) -> std::string {
    const std::string p = string_at(section, key);
    if (p.empty() || fs::path(p).is_absolute()) return p;
    return (file.parent_path() / p).lexically_normal().string();
  };
  if (const auto n = j.find("name");
      n != j.end() && n->is_string() && !n->get<std::string>().empty())
    a.name = n->get<std::string>();
  a.db = path_at("output", "db");
  a.run_dir = path_at("output", "run_dir");
  a.model_path = path_at("model", "path");
  if (!a.model_path.empty()) a.model_name = fs::path(a.model_path).filename().string();
  a.dataset = path_at("data", "train");
  a.job_json = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return a;
}

// A job that fails before its run begins (a job file it cannot read, a model, dataset, backend or
// SSD folder refused, a checkpoint it cannot resume from) gets a record in runs.db, failed with
// the reason, so that History shows it beside the runs that started:
//  - a row this process wrote already (the trainer got that far) is ended as failed;
//  - a resume fails the run it was to continue (--run-id, else the run of the job's run folder,
//    else the run of the checkpoint's folder), which keeps its steps and checkpoints and can be
//    resumed again, unless that run is still going under another worker;
//  - otherwise a new row, failed, under --run-id when it is free, with the run folder the run was
//    to have (the job's output.run_dir, the checkpoint's run folder, or the folder --run-id names:
//    where the GUI looks for it), which need not exist.
// A job file the worker cannot read is recorded only when the launch names a run (--run-id, as the
// GUI launches, --resume, or an output.run_dir that can be read): a mistyped path on a terminal is
// answered there, not kept in History. A record that cannot be written is reported on stderr; the
// job's own error is what the exit code reports.
void record_failure(const Attempt& a, const Status& why, std::ostream& err) {
  auto warn = [&](const Status& st) {
    err << "spillway-worker: warning: the failed run is not in History: " << st.to_string() << "\n";
  };
  std::string db = a.db;
  if (db.empty()) {
    auto path = RunStore::default_db_path();
    if (!path.ok()) return warn(path.status());
    db = *path;
  }
  auto opened = RunStore::open(db);
  if (!opened.ok()) return warn(opened.status());
  RunStore& store = **opened;
  FinalFigures figures;
  figures.error_message = why.to_string();
  RunFilter mine;
  mine.status = RunStatus::kRunning;
  if (auto runs = store.list_runs(mine); runs.ok()) {
    for (const RunInfo& r : *runs) {
      if (r.pid == static_cast<int64_t>(getpid()) && r.boot_id == current_boot_id()) {
        if (Status st = store.finish_run(r.id, RunStatus::kFailed, figures); !st.ok()) warn(st);
        return;
      }
    }
  }
  const std::string checkpoint_run = run_folder_of_checkpoint(a.resume);
  if (!a.resume.empty()) {
    std::optional<RunInfo> run;
    if (!a.run_id.empty()) {
      if (auto r = store.get_run(a.run_id); r.ok()) run = std::move(*r);
    } else if (auto r = store.find_run_by_folder(!a.run_dir.empty() ? a.run_dir : checkpoint_run);
               r.ok()) {
      run = std::move(*r);
    }
    if (run) {
      if (run->status == RunStatus::kRunning)
        return;  // its worker (alive: open() reconciled the dead) goes on
      figures.error_message = "could not resume from " + a.resume + ": " + why.to_string();
      if (Status st = store.finish_run(run->id, RunStatus::kFailed, figures); !st.ok()) warn(st);
      return;
    }
  }
  RunInfo info;
  // A run id that is taken names another run, and its folder: neither is this one's.
  const bool id_free = !a.run_id.empty() && !store.get_run(a.run_id).ok();
  if (id_free) info.id = a.run_id;
  info.name = a.name;
  info.status = RunStatus::kFailed;
  info.ended_at =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  info.job_json = a.job_json;
  info.model_name = a.model_name;
  info.model_path = a.model_path;
  info.dataset = a.dataset;
  info.run_dir = a.run_dir;
  if (info.run_dir.empty()) info.run_dir = checkpoint_run;
  if (info.run_dir.empty() && id_free) {
    if (auto folder = default_run_folder(a.run_id); folder.ok()) info.run_dir = *folder;
  }
  info.error_message = a.resume.empty()
                           ? figures.error_message
                           : "could not resume from " + a.resume + ": " + figures.error_message;
  if (auto id = store.create_run(info); !id.ok()) warn(id.status());
}

// A run id names a folder: letters, digits, '-', '_' and '.', not "." or "..".
bool valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

}  // namespace

int run_train(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--resume", "--run-id", "--rank", "--processes", "--rendezvous"},
                         {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool json = args->has("--json");
  if (args->positional.size() != 1)
    return report_failure(io, json, invalid_argument("usage: " + std::string(kTrainUsage)));
  const std::string resume_from = args->get("--resume").value_or("");
  const std::string run_id = args->get("--run-id").value_or("");
  if (args->get("--run-id") && !valid_run_id(run_id)) {
    return report_failure(io, json,
                          invalid_argument("--run-id '" + run_id +
                                           "': a run id names the run's folder, so it is "
                                           "1 to 128 letters, digits, '-', '_' or '.'"));
  }
  auto job = load_job_file(args->positional[0]);
  if (!job.ok()) {
    const Attempt a = attempt_of_unreadable(args->positional[0], run_id, resume_from);
    if (!a.run_id.empty() || !a.resume.empty() || !a.run_dir.empty())
      record_failure(a, job.status(), io.err);
    return report_failure(io, json, job.status());
  }
  // Past one machine: this process's rank among the run's, from the flags or the launcher's
  // environment (Slurm, Open MPI, torchrun), and the group joined before anything is loaded.
  auto rank = args->integer("--rank", -1, 0, 1 << 20);
  if (!rank.ok()) return report_failure(io, json, rank.status());
  auto processes = args->integer("--processes", -1, 1, 1 << 20);
  if (!processes.ok()) return report_failure(io, json, processes.status());
  auto spec =
      compute::process_group_spec(static_cast<int>(*rank), static_cast<int>(*processes),
                                  args->get("--rendezvous").value_or(""), compute::environment());
  if (!spec.ok()) return report_failure(io, json, spec.status());
  std::unique_ptr<compute::HostGroup> group;
  if (spec->multi()) {
    if (!json)
      io.out << "process " << spec->rank << " of " << spec->processes << " (" << spec->source
             << "), joining at " << spec->rendezvous << std::endl;
    auto joined = compute::HostGroup::join(*spec, compute::kProcessJoinTimeoutS);
    if (!joined.ok()) return report_failure(io, json, joined.status());
    group = std::move(*joined);
  }
  TrainerHooks hooks;
  hooks.run_id = run_id;
  hooks.processes = group.get();
  // The resolved job is the worker's: the run store keeps it, the run folder holds it as job.json.
  hooks.job_json = job->resolved.dump();
  hooks.on_run_folder = [&](const std::string& dir) {
    return write_file_atomic((std::filesystem::path(dir) / "job.json").string(),
                             job->resolved.dump(2) + "\n");
  };
  hooks.on_started = [&](const std::string& id, const std::string& dir) {
    if (json)
      io.out << nlohmann::json{{"run_id", id}, {"run_dir", dir}}.dump() << std::endl;
    else
      io.out << "run " << id << " in " << dir << std::endl;
  };
  hooks.on_log = [&](const std::string& line) {
    if (!json) io.out << line << std::endl;
  };
  hooks.on_warning = [&](const std::string& warning) {
    io.err << "spillway-worker: warning: " << warning << std::endl;
  };
  auto trainer = Trainer::create(job->job, resume_from, hooks);
  if (!trainer.ok()) {
    record_failure(attempt_of(*job, run_id, resume_from), trainer.status(), io.err);
    return report_failure(io, json, trainer.status());
  }
  // Declared before the trainer, so that a signal while the trainer winds down (its threads
  // joined, its SSD scratch folder removed) is still caught rather than killing the worker there.
  StopSignals signals(/*checkpoint_on_sigusr1=*/true);
  const std::unique_ptr<Trainer> t = std::move(*trainer);
  signals.attach(*t);
  Status st = t->run();
  signals.detach();
  if (!st.ok()) return report_failure(io, json, st);
  if (json)
    io.out << nlohmann::json{{"status", "done"}, {"run_id", t->run_id()}}.dump() << std::endl;
  return 0;
}

}  // namespace spillway::worker
