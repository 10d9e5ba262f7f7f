#include "worker/job-file.h"

#include <filesystem>

#include "core/file-util.h"
#include "core/json-file.h"
#include "job/job-schema.h"

namespace spillway::worker {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

TierChoice tier_choice(const json& v) {
  const std::string s = v.get<std::string>();
  return s == "ssd" ? TierChoice::kSsd : s == "auto" ? TierChoice::kAuto : TierChoice::kDram;
}

std::string string_or_empty(const json& v) { return v.is_string() ? v.get<std::string>() : std::string(); }

// The engine's job from a resolved job: every key is there, typed and in range.
Result<TrainJob> to_train_job(const json& j) {
  const json &m = j["model"], &d = j["data"], &t = j["train"], &p = j["placement"], &o = j["output"];
  TrainJob job;
  job.name = j["name"].get<std::string>();
  job.model_path = string_or_empty(m["path"]);
  job.init_preset = string_or_empty(m["init"]);
  if (m["init"].is_object()) job.init_config = m["init"];
  job.init_seed = m["seed"].get<uint64_t>();
  job.tokenizer_path = string_or_empty(m["tokenizer"]);
  job.train_path = d["train"].get<std::string>();
  job.eval_path = string_or_empty(d["eval"]);
  job.eval_fraction = d["eval_fraction"].get<double>();
  job.format = d["format"].get<std::string>();
  job.chat_template = d["template"].get<std::string>();
  job.seq_len = d["seq_len"].get<int>();
  job.packing = d["packing"].get<bool>();
  job.shuffle = d["shuffle"].get<bool>();
  job.data_seed = d["seed"].get<uint64_t>();
  job.steps = t["steps"].get<int64_t>();
  job.epochs = t["epochs"].get<double>();
  job.micro_batch_size = t["micro_batch_size"].get<int>();
  job.grad_accum = t["grad_accum"].get<int>();
  job.schedule.lr = t["lr"].get<double>();
  auto sched = parse_lr_schedule(t["schedule"].get<std::string>());
  if (!sched.ok()) return sched.status().with_context("job.json: train.schedule");
  job.schedule.kind = *sched;
  job.schedule.warmup_steps = t["warmup_steps"].get<int64_t>();
  job.schedule.min_lr_ratio = t["min_lr_ratio"].get<double>();
  job.weight_decay = t["weight_decay"].get<double>();
  job.beta1 = t["beta1"].get<double>();
  job.beta2 = t["beta2"].get<double>();
  job.eps = t["eps"].get<double>();
  job.clip_grad_norm = t["clip_grad_norm"].get<double>();
  job.seed = t["seed"].get<uint64_t>();
  job.eval_every = t["eval_every"].get<int64_t>();
  job.eval_batches = t["eval_batches"].get<int64_t>();
  job.checkpoint_every = t["checkpoint_every"].get<int64_t>();
  job.keep_checkpoints = t["keep_checkpoints"].get<int>();
  job.log_every = t["log_every"].get<int64_t>();
  job.backend = p["backend"].get<std::string>();
  job.device_memory_bytes = p["device_memory_bytes"].get<uint64_t>();
  job.weight_slots = p["weight_slots"].get<int>();
  job.optimizer_tier = tier_choice(p["optimizer"]);
  job.master_tier = tier_choice(p["master"]);
  job.ssd_dir = p["ssd_dir"].get<std::string>();
  job.dram_cap_bytes = p["dram_cap_bytes"].get<uint64_t>();
  job.run_dir = o["run_dir"].get<std::string>();
  job.db_path = o["db"].get<std::string>();
  return job;
}

}  // namespace

Result<JobFile> parse_job_file(const json& input) {
  SPW_ASSIGN_OR_RETURN(json resolved, job::resolve_job(input));
  SPW_ASSIGN_OR_RETURN(TrainJob job, to_train_job(resolved));
  return JobFile{std::move(job), std::move(resolved)};
}

Result<JobFile> load_job_file(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return text.status().with_context("job file");
  SPW_ASSIGN_OR_RETURN(json j, parse_json(*text, path));
  auto resolved = job::resolve_job(j);
  if (!resolved.ok()) return resolved.status().with_context(path);
  // Relative paths are relative to the job file, so a job folder can be moved as a whole; the
  // resolved job (what the run folder and the run store keep) holds them absolute, so that it
  // still names the same files when read from elsewhere (export, History).
  const fs::path base = fs::absolute(path).parent_path();
  for (const job::JobKey& k : job::job_keys()) {
    if (k.type != job::KeyType::kPath) continue;
    json& v = (*resolved)[k.section()][k.name()];
    if (!v.is_string()) continue;
    const std::string p = v.get<std::string>();
    if (p.empty() || p.find(':') != std::string::npos || !fs::path(p).is_relative()) continue;
    v = (base / p).lexically_normal().string();
  }
  auto job = to_train_job(*resolved);
  if (!job.ok()) return job.status().with_context(path);
  return JobFile{std::move(*job), std::move(*resolved)};
}

Result<TrainJob> parse_job(const json& j) {
  SPW_ASSIGN_OR_RETURN(JobFile file, parse_job_file(j));
  return std::move(file.job);
}

Result<TrainJob> load_job(const std::string& path) {
  SPW_ASSIGN_OR_RETURN(JobFile file, load_job_file(path));
  return std::move(file.job);
}

}  // namespace spillway::worker
