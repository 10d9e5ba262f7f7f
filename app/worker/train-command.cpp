#include "worker/train-command.h"

#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <utility>

#include <nlohmann/json.hpp>

#include "data/batch-iterator.h"
#include "train/planner.h"
#include "train/trainer.h"
#include "worker/args.h"
#include "worker/job-file.h"
#include "worker/probe-command.h"

namespace spillway::worker {
namespace {

Trainer* g_trainer = nullptr;  // the running trainer, for the signal handler

// Async-signal-safe: the trainer's request_* only store to atomics.
void on_signal(int sig) {
  if (!g_trainer) return;
  if (sig == SIGUSR1) g_trainer->request_checkpoint();
  else g_trainer->request_stop();
}

std::string num(double v, const char* fmt) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// 12345.6 -> "12,346"
std::string thousands(double v) {
  const std::string digits = num(std::abs(v), "%.0f");
  std::string out = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string gb(const nlohmann::json& bytes) {
  return num(bytes.get<double>() / 1e9, "%.1f GB");
}

// "micro-batch 8 x 3 accumulation = 48K tokens/step: 9,843 tokens/s, step 4.99 s, 406 model TFLOPS"
std::string suggestion_line(const nlohmann::json& s) {
  const int64_t tokens = s["tokens_per_step"];
  return "micro-batch " + std::to_string(s["micro_batch_size"].get<int>()) + " x " + std::to_string(s["grad_accum"].get<int>()) +
         " accumulation = " + (tokens % 1024 == 0 ? std::to_string(tokens / 1024) + "K" : std::to_string(tokens)) +
         " tokens/step: " + thousands(s["tokens_per_s"]) + " tokens/s, step " + num(s["step_s"], "%.2f s") + ", " +
         num(s["model_tflops"], "%.3g model TFLOPS") + (s["same_as_job"].get<bool>() ? " (the job's own)" : "");
}

// `plan` without --json: the plan as a table, the suggested batch last.
void print_plan(std::ostream& out, const nlohmann::json& plan) {
  auto row = [&](const std::string& name, const std::string& value) {
    out << "  " << name << std::string(name.size() < 18 ? 18 - name.size() : 0, ' ') << " " << value << "\n";
  };
  const auto& model = plan["model"];
  const double params = model["parameters"];
  const std::string device = plan["machine"]["device"].get<std::string>();
  out << model["architecture"].get<std::string>() << " ("
      << (params >= 1e9 ? num(params / 1e9, "%.2f B") : num(params / 1e6, "%.1f M")) << " parameters, "
      << model["layers"].get<int>() << " layers) on " << plan["backend"].get<std::string>()
      << (device.empty() ? "" : " (" + device + ")") << ": " << (plan["fits"].get<bool>() ? "fits" : "does not fit") << "\n";
  for (const auto& [key, name] : {std::pair{"hbm", "HBM"}, std::pair{"dram", "DRAM"}, std::pair{"ssd", "SSD"}}) {
    const auto& t = plan["tiers"][key];
    const double free = t["free_bytes"], total = t["total_bytes"];
    row(name, "needs " + gb(t["needed_bytes"]) + ", free " + (free > 0 ? gb(t["free_bytes"]) : "unbounded") + ", total " +
                  (total > 0 ? gb(t["total_bytes"]) : "unbounded"));
  }
  const auto& s = plan["step"];
  row("tokens per step", thousands(s["tokens"]) + " (" + std::to_string(plan["micro_batch_size"].get<int>()) + " x " +
                             std::to_string(plan["grad_accum"].get<int>()) + " x " + std::to_string(plan["seq_len"].get<int>()) +
                             "), checkpoints " + (plan["checkpoints"] == "device" ? "on the device" : "in host memory"));
  row("step", num(s["step_s"], "%.2f s") + ": compute " + num(s["compute_s"], "%.2f s") + ", link " + num(s["link_s"], "%.2f s") +
                  ", AdamW " + num(s["adamw_s"], "%.2f s") + ", optimizer visible " + num(s["optimizer_visible_s"], "%.2f s") +
                  (s["ssd_s"].get<double>() > 0 ? ", SSD " + num(s["ssd_s"], "%.2f s") : ""));
  row("tokens/s", thousands(s["tokens_per_s"]) + " (" + num(s["model_tflops"], "%.3g model TFLOPS") + ")");
  if (s["total_steps"].get<int64_t>() > 0) {
    const double eta = s["eta_s"];
    row("ETA", (eta >= 3600 ? num(eta / 3600, "%.1f h") : eta >= 60 ? num(eta / 60, "%.1f min") : num(eta, "%.0f s")) + " for " +
                   std::to_string(s["total_steps"].get<int64_t>()) + " steps");
  }
  row("bottleneck", s["bottleneck"].get<std::string>());
  if (plan.contains("suggestion")) {
    const auto& g = plan["suggestion"];
    if (g["fits"].get<bool>()) row("suggested", suggestion_line(g));
    row(g["fits"].get<bool>() ? "" : "suggested", g["why"].get<std::string>());
  }
}

}  // namespace

int run_train(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--resume"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool json = args->has("--json");
  if (args->positional.size() != 1) return report_failure(io, json, invalid_argument("usage: train JOB.json [--resume CHECKPOINT_DIR] [--json]"));
  auto job = load_job(args->positional[0]);
  if (!job.ok()) return report_failure(io, json, job.status());
  TrainerHooks hooks;
  hooks.on_started = [&](const std::string& id, const std::string& dir) {
    if (json) io.out << nlohmann::json{{"run_id", id}, {"run_dir", dir}}.dump() << std::endl;
    else io.out << "run " << id << " in " << dir << std::endl;
  };
  hooks.on_log = [&](const std::string& line) {
    if (!json) io.out << line << std::endl;
  };
  auto trainer = Trainer::create(*job, args->get("--resume").value_or(""), hooks);
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

int run_plan(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool json = args->has("--json");
  if (args->positional.size() != 1) return report_failure(io, json, invalid_argument("usage: plan JOB.json [--json]"));
  auto job = load_job(args->positional[0]);
  if (!job.ok()) return report_failure(io, json, job.status());
  Result<ModelConfig> config = !job->model_path.empty() ? ModelConfig::load(job->model_path)
                               : !job->init_preset.empty() ? model_preset(job->init_preset)
                                                           : ModelConfig::from_json(job->init_config);
  if (!config.ok()) return report_failure(io, json, config.status());
  std::string reason;
  auto machine = probe_for_backend(job->ssd_dir.empty() ? "." : job->ssd_dir, job->backend, &reason);
  if (!machine.ok()) return report_failure(io, json, machine.status());
  // Steps from epochs need the dataset size; without reading it the plan assumes `steps`.
  const int64_t steps = job->steps > 0 ? job->steps : 0;
  nlohmann::json plan = make_plan(*config, *job, *machine, steps);
  plan["backend_reason"] = reason;
  if (json) {
    io.out << plan.dump() << std::endl;
  } else {
    print_plan(io.out, plan);
    io.out.flush();
    if (!plan["fits"].get<bool>()) io.err << "does not fit: " << plan["reason"].get<std::string>() << "\n";
  }
  return plan["fits"].get<bool>() ? 0 : 3;
}

}  // namespace spillway::worker
