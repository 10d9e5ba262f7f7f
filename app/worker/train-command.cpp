#include "worker/train-command.h"

#include <signal.h>

#include <atomic>
#include <filesystem>
#include <ostream>

#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "data/batch-iterator.h"
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
  auto trainer = Trainer::create(job->job, args->get("--resume").value_or(""), hooks);
  if (!trainer.ok()) return report_failure(io, json, trainer.status());
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
