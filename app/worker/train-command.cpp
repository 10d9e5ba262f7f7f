#include "worker/train-command.h"

#include <signal.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <ostream>

#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "data/batch-iterator.h"
#include "history/process-liveness.h"
#include "history/run-store.h"
#include "train/trainer.h"
#include "worker/args.h"
#include "worker/job-file.h"

namespace spillway::worker {
namespace {

Trainer* g_trainer = nullptr;  // the running trainer, for the signal handler

// Async-signal-safe: the trainer's request_* only store to atomics.
void on_signal(int sig) {
  if (!g_trainer) return;
  if (sig == SIGUSR1) g_trainer->request_checkpoint();
  else g_trainer->request_stop();
}

// A job that fails before its run begins (a model, dataset, backend or SSD folder refused) has no
// row in runs.db yet: it gets one, failed with the reason, so that History shows it beside the
// runs that started. A row this process wrote already (the trainer got that far) is ended as failed
// instead. A resume that fails to start leaves the run it resumes as it was. A record that cannot
// be written is reported on stderr; the job's own error is what the exit code reports.
void record_failed_start(const JobFile& file, const Status& why, std::ostream& err) {
  const TrainJob& job = file.job;
  std::string db = job.db_path;
  if (db.empty()) {
    auto path = RunStore::default_db_path();
    if (!path.ok()) return void(err << "spillway-worker: warning: the failed run is not in History: " << path.status().to_string() << "\n");
    db = *path;
  }
  auto store = RunStore::open(db);
  if (!store.ok()) return void(err << "spillway-worker: warning: the failed run is not in History: " << store.status().to_string() << "\n");
  const std::string run_dir = job.run_dir.empty() ? std::string() : std::filesystem::absolute(job.run_dir).string();
  FinalFigures figures;
  figures.error_message = why.to_string();
  RunFilter mine;
  mine.status = RunStatus::kRunning;
  if (auto runs = (*store)->list_runs(mine); runs.ok()) {
    for (const RunInfo& r : *runs) {
      if (r.pid == static_cast<int64_t>(getpid()) && r.boot_id == current_boot_id()) {
        Status st = (*store)->finish_run(r.id, RunStatus::kFailed, figures);
        if (!st.ok()) err << "spillway-worker: warning: the failed run is not in History: " << st.to_string() << "\n";
        return;
      }
    }
  }
  RunInfo info;
  info.name = job.name;
  info.status = RunStatus::kFailed;
  info.ended_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  info.job_json = file.resolved.dump();
  info.model_name = !job.model_path.empty() ? std::filesystem::path(job.model_path).filename().string()
                                            : (!job.init_preset.empty() ? job.init_preset : "custom-init");
  info.model_path = job.model_path;
  info.dataset = job.train_path;
  info.run_dir = run_dir;
  info.error_message = figures.error_message;
  if (auto id = (*store)->create_run(info); !id.ok())
    err << "spillway-worker: warning: the failed run is not in History: " << id.status().to_string() << "\n";
}

}  // namespace

int run_train(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--resume"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool json = args->has("--json");
  if (args->positional.size() != 1) return report_failure(io, json, invalid_argument("usage: train JOB.json [--resume CHECKPOINT_DIR] [--json]"));
  auto job = load_job_file(args->positional[0]);
  if (!job.ok()) return report_failure(io, json, job.status());
  TrainerHooks hooks;
  // The resolved job is the worker's: the run store keeps it, the run folder holds it as job.json.
  hooks.job_json = job->resolved.dump();
  hooks.on_run_folder = [&](const std::string& dir) {
    return write_file_atomic((std::filesystem::path(dir) / "job.json").string(), job->resolved.dump(2) + "\n");
  };
  hooks.on_started = [&](const std::string& id, const std::string& dir) {
    if (json) io.out << nlohmann::json{{"run_id", id}, {"run_dir", dir}}.dump() << std::endl;
    else io.out << "run " << id << " in " << dir << std::endl;
  };
  hooks.on_log = [&](const std::string& line) {
    if (!json) io.out << line << std::endl;
  };
  hooks.on_warning = [&](const std::string& warning) { io.err << "spillway-worker: warning: " << warning << std::endl; };
  const std::string resume_from = args->get("--resume").value_or("");
  auto trainer = Trainer::create(job->job, resume_from, hooks);
  if (!trainer.ok()) {
    if (resume_from.empty()) record_failed_start(*job, trainer.status(), io.err);
    return report_failure(io, json, trainer.status());
  }
  g_trainer = trainer->get();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  Status st = (*trainer)->run();
  g_trainer = nullptr;
  if (!st.ok()) return report_failure(io, json, st);
  if (json) io.out << nlohmann::json{{"status", "done"}, {"run_id", (*trainer)->run_id()}}.dump() << std::endl;
  return 0;
}

}  // namespace spillway::worker
