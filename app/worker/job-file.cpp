#include "worker/job-file.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/file-util.h"
#include "core/json-depth.h"

namespace spillway::worker {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

enum class Kind { kString, kNumber, kInteger, kBool, kObject, kAny };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kString: return "a string";
    case Kind::kNumber: return "a number";
    case Kind::kInteger: return "an integer";
    case Kind::kBool: return "true or false";
    case Kind::kObject: return "an object";
    case Kind::kAny: return "a value";
  }
  return "?";
}

bool matches(const json& v, Kind k) {
  switch (k) {
    case Kind::kString: return v.is_string();
    case Kind::kNumber: return v.is_number();
    case Kind::kInteger: return v.is_number_integer();
    case Kind::kBool: return v.is_boolean();
    case Kind::kObject: return v.is_object();
    case Kind::kAny: return true;
  }
  return false;
}

// Checks that `section` holds only the keys of `schema`, each of its kind (null allowed where a
// default applies), and fills in defaults.
Status check_section(json& section, const std::string& path, const std::vector<std::tuple<const char*, Kind, json>>& schema) {
  if (!section.is_object()) return invalid_argument("job.json: " + path + ": expected an object");
  std::set<std::string> known;
  for (const auto& [key, kind, def] : schema) {
    known.insert(key);
    auto it = section.find(key);
    if (it == section.end() || it->is_null()) {
      section[key] = def;
      continue;
    }
    if (!matches(*it, kind)) {
      std::string got = it->dump();  // a value may be megabytes long: show its start
      if (got.size() > 60) got = got.substr(0, 60) + "...";
      return invalid_argument("job.json: " + path + "." + key + ": expected " + kind_name(kind) + ", got " + got);
    }
  }
  for (auto it = section.begin(); it != section.end(); ++it) {
    if (!known.count(it.key())) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return invalid_argument("job.json: unknown key " + path + "." + it.key() + " (known keys: " + list + ")");
    }
  }
  return {};
}

// An integer key within [lo, hi]: out-of-range values used to wrap when read into an int (a
// micro-batch of 2^32 + 4 became 4) or overflow the planner's arithmetic.
Result<int64_t> int_in(const json& section, const std::string& path, const char* key, int64_t lo, int64_t hi) {
  const json& v = section[key];
  bool fits = false;
  if (v.is_number_unsigned()) {
    fits = v.get<uint64_t>() <= static_cast<uint64_t>(hi) && static_cast<int64_t>(v.get<uint64_t>()) >= lo;
  } else {
    const int64_t x = v.get<int64_t>();
    fits = x >= lo && x <= hi;
  }
  if (!fits)
    return invalid_argument("job.json: " + path + "." + key + " must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got " + v.dump());
  return v.get<int64_t>();
}

// A finite number within [lo, hi].
Result<double> number_in(const json& section, const std::string& path, const char* key, double lo, double hi) {
  const double v = section[key].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    char range[96];
    std::snprintf(range, sizeof(range), "[%g, %g], got %g", lo, hi, v);
    return invalid_argument("job.json: " + path + "." + key + " must be in " + range);
  }
  return v;
}

Result<TierChoice> tier_choice(const json& v, const std::string& key) {
  const std::string s = v.get<std::string>();
  if (s == "dram") return TierChoice::kDram;
  if (s == "ssd") return TierChoice::kSsd;
  if (s == "auto") return TierChoice::kAuto;
  return invalid_argument("job.json: placement." + key + ": '" + s + "' is not one of dram, ssd, auto");
}

}  // namespace

Result<TrainJob> parse_job(const json& input) {
  if (!input.is_object()) return invalid_argument("job.json: expected a JSON object");
  json j = input;
  SPW_RETURN_IF_ERROR(check_section(j, "job", {{"name", Kind::kString, nullptr},
                                               {"model", Kind::kObject, nullptr},
                                               {"data", Kind::kObject, nullptr},
                                               {"train", Kind::kObject, json::object()},
                                               {"placement", Kind::kObject, json::object()},
                                               {"output", Kind::kObject, json::object()}}));
  if (j["name"].is_null()) return invalid_argument("job.json: missing required key name");
  if (j["model"].is_null()) return invalid_argument("job.json: missing required key model ({\"path\": DIR} or {\"init\": PRESET})");
  if (j["data"].is_null()) return invalid_argument("job.json: missing required key data ({\"train\": FILE, ...})");
  json& m = j["model"];
  SPW_RETURN_IF_ERROR(check_section(m, "model", {{"path", Kind::kString, nullptr},
                                                 {"init", Kind::kAny, nullptr},
                                                 {"seed", Kind::kInteger, 0},
                                                 {"tokenizer", Kind::kString, nullptr}}));
  if (m["path"].is_null() == m["init"].is_null())
    return invalid_argument("job.json: model needs exactly one of \"path\" (a Hugging Face folder) or \"init\" (a preset name or a config object)");
  if (!m["init"].is_null() && !m["init"].is_string() && !m["init"].is_object())
    return invalid_argument("job.json: model.init: expected a preset name or a config.json object");
  json& d = j["data"];
  SPW_RETURN_IF_ERROR(check_section(d, "data", {{"train", Kind::kString, nullptr},
                                                {"eval", Kind::kString, nullptr},
                                                {"eval_fraction", Kind::kNumber, 0.0},
                                                {"format", Kind::kString, "auto"},
                                                {"template", Kind::kString, "auto"},
                                                {"seq_len", Kind::kInteger, 256},
                                                {"shuffle", Kind::kBool, true},
                                                {"seed", Kind::kInteger, 0}}));
  if (d["train"].is_null()) return invalid_argument("job.json: missing required key data.train");
  json& t = j["train"];
  SPW_RETURN_IF_ERROR(check_section(t, "train", {{"steps", Kind::kInteger, 0},
                                                 {"epochs", Kind::kNumber, 0.0},
                                                 {"micro_batch_size", Kind::kInteger, 1},
                                                 {"grad_accum", Kind::kInteger, 1},
                                                 {"lr", Kind::kNumber, 1e-4},
                                                 {"schedule", Kind::kString, "constant"},
                                                 {"warmup_steps", Kind::kInteger, 0},
                                                 {"min_lr_ratio", Kind::kNumber, 0.0},
                                                 {"weight_decay", Kind::kNumber, 0.0},
                                                 {"beta1", Kind::kNumber, 0.9},
                                                 {"beta2", Kind::kNumber, 0.999},
                                                 {"eps", Kind::kNumber, 1e-8},
                                                 {"clip_grad_norm", Kind::kNumber, 1.0},
                                                 {"seed", Kind::kInteger, 0},
                                                 {"eval_every", Kind::kInteger, 0},
                                                 {"eval_batches", Kind::kInteger, 0},
                                                 {"checkpoint_every", Kind::kInteger, 0},
                                                 {"keep_checkpoints", Kind::kInteger, 2},
                                                 {"log_every", Kind::kInteger, 1}}));
  json& p = j["placement"];
  SPW_RETURN_IF_ERROR(check_section(p, "placement", {{"backend", Kind::kString, "auto"},
                                                     {"device_memory_bytes", Kind::kInteger, 0},
                                                     {"weight_slots", Kind::kInteger, 2},
                                                     {"optimizer", Kind::kString, "dram"},
                                                     {"master", Kind::kString, "dram"},
                                                     {"ssd_dir", Kind::kString, ""},
                                                     {"dram_cap_bytes", Kind::kInteger, 0}}));
  json& o = j["output"];
  SPW_RETURN_IF_ERROR(check_section(o, "output", {{"run_dir", Kind::kString, ""}, {"db", Kind::kString, ""}}));

  TrainJob job;
  job.name = j["name"].get<std::string>();
  if (job.name.empty()) return invalid_argument("job.json: name must not be empty");
  if (m["path"].is_string()) job.model_path = m["path"].get<std::string>();
  if (m["init"].is_string()) job.init_preset = m["init"].get<std::string>();
  if (m["init"].is_object()) job.init_config = m["init"];
  job.init_seed = m["seed"].get<uint64_t>();
  if (m["tokenizer"].is_string()) job.tokenizer_path = m["tokenizer"].get<std::string>();
  job.train_path = d["train"].get<std::string>();
  if (d["eval"].is_string()) job.eval_path = d["eval"].get<std::string>();
  job.eval_fraction = d["eval_fraction"].get<double>();
  if (job.eval_fraction < 0 || job.eval_fraction >= 1) return invalid_argument("job.json: data.eval_fraction must be in [0, 1)");
  job.format = d["format"].get<std::string>();
  job.chat_template = d["template"].get<std::string>();
  constexpr int64_t kMaxCount = int64_t{1} << 40;  // steps, intervals: far beyond any run, safe to multiply
  SPW_ASSIGN_OR_RETURN(const int64_t seq_len, int_in(d, "data", "seq_len", 2, 1 << 20));
  job.seq_len = static_cast<int>(seq_len);
  job.shuffle = d["shuffle"].get<bool>();
  job.data_seed = d["seed"].get<uint64_t>();

  SPW_ASSIGN_OR_RETURN(job.steps, int_in(t, "train", "steps", 0, kMaxCount));
  SPW_ASSIGN_OR_RETURN(job.epochs, number_in(t, "train", "epochs", 0, 1e6));
  if (job.steps == 0 && job.epochs == 0) return invalid_argument("job.json: set train.steps or train.epochs");
  SPW_ASSIGN_OR_RETURN(const int64_t micro_batch, int_in(t, "train", "micro_batch_size", 1, 1 << 16));
  SPW_ASSIGN_OR_RETURN(const int64_t grad_accum, int_in(t, "train", "grad_accum", 1, 1 << 16));
  job.micro_batch_size = static_cast<int>(micro_batch);
  job.grad_accum = static_cast<int>(grad_accum);
  job.schedule.lr = t["lr"].get<double>();
  // Above 10 every model diverges (1e300 trained to a NaN loss and exported a NaN model).
  if (!(job.schedule.lr > 0) || !(job.schedule.lr <= 10))
    return invalid_argument("job.json: train.lr must be in (0, 10], got " + t["lr"].dump());
  auto sched = parse_lr_schedule(t["schedule"].get<std::string>());
  if (!sched.ok()) return sched.status().with_context("job.json: train.schedule");
  job.schedule.kind = *sched;
  SPW_ASSIGN_OR_RETURN(job.schedule.warmup_steps, int_in(t, "train", "warmup_steps", 0, kMaxCount));
  SPW_ASSIGN_OR_RETURN(job.schedule.min_lr_ratio, number_in(t, "train", "min_lr_ratio", 0, 1));
  SPW_ASSIGN_OR_RETURN(job.weight_decay, number_in(t, "train", "weight_decay", 0, 1e3));
  job.beta1 = t["beta1"].get<double>();
  job.beta2 = t["beta2"].get<double>();
  SPW_ASSIGN_OR_RETURN(job.eps, number_in(t, "train", "eps", 0, 1));
  if (job.beta1 < 0 || job.beta1 >= 1 || job.beta2 < 0 || job.beta2 >= 1)
    return invalid_argument("job.json: train.beta1 and train.beta2 must be in [0, 1)");
  SPW_ASSIGN_OR_RETURN(job.clip_grad_norm, number_in(t, "train", "clip_grad_norm", 0, 1e30));
  job.seed = t["seed"].get<uint64_t>();
  SPW_ASSIGN_OR_RETURN(job.eval_every, int_in(t, "train", "eval_every", 0, kMaxCount));
  SPW_ASSIGN_OR_RETURN(job.eval_batches, int_in(t, "train", "eval_batches", 0, kMaxCount));
  SPW_ASSIGN_OR_RETURN(job.checkpoint_every, int_in(t, "train", "checkpoint_every", 0, kMaxCount));
  SPW_ASSIGN_OR_RETURN(const int64_t keep, int_in(t, "train", "keep_checkpoints", 0, 1 << 20));
  job.keep_checkpoints = static_cast<int>(keep);
  SPW_ASSIGN_OR_RETURN(job.log_every, int_in(t, "train", "log_every", 0, kMaxCount));

  job.backend = p["backend"].get<std::string>();
  if (job.backend != "auto" && job.backend != "cpu" && job.backend != "cuda")
    return invalid_argument("job.json: placement.backend: '" + job.backend + "' is not one of auto, cpu, cuda");
  job.device_memory_bytes = p["device_memory_bytes"].get<uint64_t>();
  SPW_ASSIGN_OR_RETURN(const int64_t slots, int_in(p, "placement", "weight_slots", 2, 64));
  job.weight_slots = static_cast<int>(slots);
  SPW_ASSIGN_OR_RETURN(job.optimizer_tier, tier_choice(p["optimizer"], "optimizer"));
  SPW_ASSIGN_OR_RETURN(job.master_tier, tier_choice(p["master"], "master"));
  job.ssd_dir = p["ssd_dir"].get<std::string>();
  job.dram_cap_bytes = p["dram_cap_bytes"].get<uint64_t>();
  if ((job.optimizer_tier == TierChoice::kSsd || job.master_tier == TierChoice::kSsd) && job.ssd_dir.empty())
    return invalid_argument("job.json: placement.ssd_dir is required when optimizer or master is on \"ssd\"");
  job.run_dir = o["run_dir"].get<std::string>();
  job.db_path = o["db"].get<std::string>();
  job.resolved = j;
  return job;
}

Result<TrainJob> load_job(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return text.status().with_context("job file");
  SPW_RETURN_IF_ERROR(check_json_depth(*text, path));
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return invalid_argument(path + ": not valid JSON");
  auto job = parse_job(j);
  if (!job.ok()) return job.status().with_context(path);
  // Relative paths are relative to the job file, so a job folder can be moved as a whole; the
  // resolved job (what the run folder and the run store keep) holds them absolute, so that it
  // still names the same files when read from elsewhere (export, History).
  const fs::path base = fs::absolute(path).parent_path();
  auto resolve = [&](std::string& p, const char* section, const char* key) {
    if (p.empty() || p.find(':') != std::string::npos || !fs::path(p).is_relative()) return;
    p = (base / p).lexically_normal().string();
    job->resolved[section][key] = p;
  };
  resolve(job->model_path, "model", "path");
  resolve(job->tokenizer_path, "model", "tokenizer");
  resolve(job->train_path, "data", "train");
  resolve(job->eval_path, "data", "eval");
  resolve(job->ssd_dir, "placement", "ssd_dir");
  resolve(job->run_dir, "output", "run_dir");
  resolve(job->db_path, "output", "db");
  return job;
}

}  // namespace spillway::worker
