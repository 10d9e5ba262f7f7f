// The job schema (engine/job/job-schema) is the one source of the job file's keys: the worker's
// parser, the defaults of TrainJob, the resolved job and the README's table must agree with it.
#include "job/job-schema.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "data/chat-template.h"
#include "data/dataset-reader.h"
#include "job/device-selection.h"
#include "train/lr-schedule.h"
#include "worker/commands.h"
#include "worker/job-file.h"

namespace spillway {
namespace {
using nlohmann::json;

json minimal_job() {
  return {{"name", "n"}, {"model", {{"init", "llama-tiny"}}}, {"data", {{"train", "/t.txt"}}}};
}

// The README's job table is the schema's: `spillway-worker job-keys --markdown` between the
// markers.
TEST(JobSchema, ReadmeTableIsTheSchemas) {
  auto readme = read_file(std::string(SPILLWAY_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(readme.ok()) << readme.status().to_string();
  const std::string begin = "<!-- job-keys:begin -->\n", end = "<!-- job-keys:end -->";
  const size_t b = readme->find(begin), e = readme->find(end);
  ASSERT_NE(b, std::string::npos) << "README.md has no " << begin;
  ASSERT_NE(e, std::string::npos) << "README.md has no " << end;
  const std::string table = readme->substr(b + begin.size(), e - b - begin.size());
  EXPECT_EQ(table, job::job_keys_markdown())
      << "README.md's job table differs from the schema: paste the output of `spillway-worker "
         "job-keys --markdown` "
         "between the job-keys markers";
}

// Each default is a value its own key accepts, each choice one the engine reads, each required key
// has no default, and every section's key path is unique.
TEST(JobSchema, DefaultsAndChoicesAreValid) {
  std::set<std::string> paths;
  for (const job::JobKey& k : job::job_keys()) {
    EXPECT_TRUE(paths.insert(k.path).second) << k.path << " twice";
    EXPECT_FALSE(k.description.empty()) << k.path;
    if (k.required) {
      EXPECT_TRUE(k.default_value.is_null()) << k.path;
    } else if (!k.default_value.is_null()) {
      EXPECT_TRUE(job::check_value(k, k.default_value).ok())
          << k.path << ": " << job::check_value(k, k.default_value).to_string();
    }
    if (k.type == job::KeyType::kChoice) {
      ASSERT_FALSE(k.choices.empty()) << k.path;
      EXPECT_EQ(k.default_value, k.choices.front()) << k.path;
      for (const std::string& c : k.choices) {
        EXPECT_TRUE(job::check_value(k, c).ok()) << k.path << " " << c;
        if (k.path == "data.format") EXPECT_TRUE(parse_dataset_format(c).ok()) << c;
        if (k.path == "data.template") EXPECT_TRUE(parse_chat_template_kind(c).ok()) << c;
        if (k.path == "train.schedule") EXPECT_TRUE(parse_lr_schedule(c).ok()) << c;
      }
    }
  }
  for (const std::string& s : job::job_sections()) {
    EXPECT_TRUE(std::any_of(job::job_keys().begin(), job::job_keys().end(),
                            [&](const job::JobKey& k) { return k.section() == s; }))
        << s;
  }
}

// The resolved job holds every key of the table, the defaults filled in, and resolves to itself.
TEST(JobSchema, ResolvedJobHoldsEveryKey) {
  auto resolved = job::resolve_job(minimal_job());
  ASSERT_TRUE(resolved.ok()) << resolved.status().to_string();
  for (const job::JobKey& k : job::job_keys()) {
    const json& v =
        k.section().empty() ? (*resolved)[k.name()] : (*resolved)[k.section()][k.name()];
    if (!k.required && k.path != "model.init") EXPECT_EQ(v, k.default_value) << k.path;
  }
  size_t keys = 1;  // name
  for (const std::string& s : job::job_sections()) keys += (*resolved)[s].size();
  EXPECT_EQ(keys, job::job_keys().size());
  auto again = job::resolve_job(*resolved);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(*again, *resolved);
}

// TrainJob's fields are the schema's keys: train_job_fields() names each key once, in the schema's
// order, and nothing else — so that a default-made TrainJob holds every key's schema default (its
// constructor sets each through its field) and a resolved job reaches every member.
TEST(JobSchema, TrainJobHasAFieldForEveryKey) {
  const std::vector<TrainJobField>& fields = train_job_fields();
  ASSERT_EQ(fields.size(), job::job_keys().size());
  for (size_t i = 0; i < fields.size(); ++i)
    EXPECT_EQ(fields[i].path, job::job_keys()[i].path) << i;
  // Setting each key's default on a default-made job changes nothing: the defaults are there
  // already.
  const TrainJob d;
  for (const TrainJobField& f : fields) {
    const job::JobKey* k = job::find_job_key(f.path);
    if (k->default_value.is_null()) continue;
    TrainJob j = d;
    ASSERT_TRUE(f.set(j, k->default_value).ok()) << f.path;
    EXPECT_TRUE(j == d) << f.path;
  }
}

// TrainJob's own defaults (what the planner's and the engine's tests start from) are the schema's.
TEST(JobSchema, TrainJobDefaultsAreTheSchemas) {
  json j = minimal_job();
  j["model"] = {{"path", "/m"}};
  auto parsed = worker::parse_job(j);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  const TrainJob& p = *parsed;
  const TrainJob d;
  EXPECT_EQ(p.init_seed, d.init_seed);
  EXPECT_EQ(p.tokenizer_path, d.tokenizer_path);
  EXPECT_EQ(p.eval_path, d.eval_path);
  EXPECT_EQ(p.eval_fraction, d.eval_fraction);
  EXPECT_EQ(p.format, d.format);
  EXPECT_EQ(p.chat_template, d.chat_template);
  EXPECT_EQ(p.seq_len, d.seq_len);
  EXPECT_EQ(p.packing, d.packing);
  EXPECT_EQ(p.shuffle, d.shuffle);
  EXPECT_EQ(p.data_seed, d.data_seed);
  EXPECT_EQ(p.steps, d.steps);
  EXPECT_EQ(p.epochs, d.epochs);
  EXPECT_EQ(p.micro_batch_size, d.micro_batch_size);
  EXPECT_EQ(p.grad_accum, d.grad_accum);
  EXPECT_EQ(p.schedule.lr, d.schedule.lr);
  EXPECT_EQ(p.schedule.kind, d.schedule.kind);
  EXPECT_EQ(p.schedule.warmup_steps, d.schedule.warmup_steps);
  EXPECT_EQ(p.schedule.min_lr_ratio, d.schedule.min_lr_ratio);
  EXPECT_EQ(p.weight_decay, d.weight_decay);
  EXPECT_EQ(p.beta1, d.beta1);
  EXPECT_EQ(p.beta2, d.beta2);
  EXPECT_EQ(p.eps, d.eps);
  EXPECT_EQ(p.clip_grad_norm, d.clip_grad_norm);
  EXPECT_EQ(p.seed, d.seed);
  EXPECT_EQ(p.eval_every, d.eval_every);
  EXPECT_EQ(p.eval_batches, d.eval_batches);
  EXPECT_EQ(p.checkpoint_every, d.checkpoint_every);
  EXPECT_EQ(p.keep_checkpoints, d.keep_checkpoints);
  EXPECT_EQ(p.log_every, d.log_every);
  EXPECT_EQ(p.backend, d.backend);
  EXPECT_EQ(p.device_memory_bytes, d.device_memory_bytes);
  EXPECT_EQ(p.weight_slots, d.weight_slots);
  EXPECT_EQ(p.optimizer_tier, d.optimizer_tier);
  EXPECT_EQ(p.master_tier, d.master_tier);
  EXPECT_EQ(p.ssd_dir, d.ssd_dir);
  EXPECT_EQ(p.dram_cap_bytes, d.dram_cap_bytes);
  EXPECT_EQ(p.run_dir, d.run_dir);
  EXPECT_EQ(p.db_path, d.db_path);
}

// Every key of the table reaches the engine's job: a value other than the default changes it.
TEST(JobSchema, EveryKeyReachesTheEngine) {
  json base = minimal_job();
  base["train"] = {{"steps", 10}};
  base["placement"] = {{"ssd_dir", "/ssd"}};
  auto reference = worker::parse_job_file(base);
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();
  for (const job::JobKey& k : job::job_keys()) {
    json other;
    switch (k.type) {
      case job::KeyType::kString:
      case job::KeyType::kPath:
        other = "/other";
        break;
      case job::KeyType::kInteger:
        other = static_cast<int64_t>(k.range.lo) + 3;
        break;
      case job::KeyType::kNumber:
        other = k.range.lo + (k.range.hi - k.range.lo) / 7;
        break;
      case job::KeyType::kBool:
        other = !k.default_value.get<bool>();
        break;
      case job::KeyType::kChoice:
        other = k.choices.back();
        break;
      case job::KeyType::kModel:
        other = "llama-5m";
        break;
      case job::KeyType::kDevices:
        other = json::array({1, 0});
        break;
    }
    if (k.path == "model.path")
      continue;  // exclusive with model.init: checked by ModelOrInit below
    json j = base;
    if (k.section().empty())
      j[k.name()] = other;
    else
      j[k.section()][k.name()] = other;
    auto changed = worker::parse_job_file(j);
    ASSERT_TRUE(changed.ok()) << k.path << " = " << other.dump() << ": "
                              << changed.status().to_string();
    EXPECT_NE(changed->resolved, reference->resolved) << k.path;
    // Every field of TrainJob (its defaulted ==).
    const bool same = reference->job == changed->job;
    EXPECT_FALSE(same) << k.path << " = " << other.dump() << " did not reach TrainJob";
  }
}

// placement.devices: "all", a count or a list, resolved against the GPUs present.
TEST(JobSchema, DeviceSelectionResolvesAgainstTheMachine) {
  auto all = job::parse_device_selection("all");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*job::resolve_devices(*all, 4), (std::vector<int>{0, 1, 2, 3}));
  auto two = job::parse_device_selection(2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*job::resolve_devices(*two, 4), (std::vector<int>{0, 1}));
  auto list = job::parse_device_selection(json::array({3, 1}));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(*job::resolve_devices(*list, 4), (std::vector<int>{3, 1}));  // rank order kept
  EXPECT_EQ(list->to_string(), "GPUs 3, 1");
  EXPECT_EQ(list->to_json(), json::array({3, 1}));
  EXPECT_EQ(two->to_json(), 2);

  auto more = job::resolve_devices(*two, 1);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("asks for 2 GPUs, but this machine has 1 GPU"),
            std::string::npos)
      << more.status().message();
  auto missing = job::resolve_devices(*list, 2);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("names GPU 3, but this machine has 2 GPUs"),
            std::string::npos)
      << missing.status().message();
  auto none = job::resolve_devices(*all, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no usable GPU"), std::string::npos);
}

TEST(JobSchema, NamedErrors) {
  const std::pair<json, const char*> bad[] = {
      {json{{"name", "n"}, {"data", {{"train", "/t"}}}}, "missing required key model"},
      {json{{"name", "n"}, {"model", {{"init", "llama-tiny"}}}}, "missing required key data"},
      {json{{"name", "n"}, {"model", {{"init", "llama-tiny"}}}, {"data", json::object()}},
       "missing required key data.train"},
      {json{{"name", "n"}, {"model", {{"init", "x"}, {"path", "/m"}}}, {"data", {{"train", "/t"}}}},
       "exactly one of"},
      {json{{"name", "n"}, {"model", {{"init", 5}}}, {"data", {{"train", "/t"}}}},
       "model.init: expected a preset name or a config.json object, got 5"},
      {json{{"name", ""}, {"model", {{"init", "x"}}}, {"data", {{"train", "/t"}}}},
       "name must not be empty"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"trian", json::object()}},
       "unknown key job.trian"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"train", {{"learning_rate", 1}}}},
       "unknown key train.learning_rate (known keys: "},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"train", {{"lr", "fast"}}}},
       "train.lr: expected a number, got \"fast\""},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"placement", {{"devices", "every"}}}},
       "placement.devices: \"every\"; expected \"all\", a count of GPUs"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"placement", {{"devices", 0}}}},
       "placement.devices: a count must be in [1, 64], got 0"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"placement", {{"devices", json::array({0, 1, 0})}}}},
       "placement.devices: GPU 0 is listed twice"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"placement", {{"devices", json::array()}}}},
       "placement.devices: an empty list"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"train", {{"steps", 0}, {"epochs", 0}}}},
       "set train.steps or train.epochs"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"train", {{"schedule", "step"}}}},
       "train.schedule: 'step' is not one of constant, cosine, linear"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}, {"format", "csv"}}}},
       "data.format: unknown dataset format 'csv'"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}, {"template", "vicuna"}}}},
       "data.template: "},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"placement", {{"optimizer", "ssd"}}}},
       "placement.ssd_dir is required"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"placement", {{"backend", "rocm"}}}},
       "placement.backend: 'rocm' is not one of auto, cpu, cuda"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"placement", {{"dram_cap_bytes", -1}}}},
       "placement.dram_cap_bytes must be in [0, 1152921504606846976], got -1"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}, {"eval_fraction", 1}}}},
       "data.eval_fraction must be in [0, 1), got 1"},
      {json{{"name", "n"},
            {"model", {{"init", "x"}}},
            {"data", {{"train", "/t"}}},
            {"train", {{"beta2", 1.0}}}},
       "train.beta2 must be in [0, 1), got 1"},
  };
  for (const auto& [j, message] : bad) {
    auto r = job::resolve_job(j);
    ASSERT_FALSE(r.ok()) << j.dump();
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
  }
  // The engine's aliases stay accepted: job files written with them still run.
  json j = minimal_job();
  j["data"]["format"] = "messages";
  j["data"]["template"] = "qwen";
  EXPECT_TRUE(job::resolve_job(j).ok());
  // Any seed a 64-bit unsigned integer holds.
  j["data"]["seed"] = 18446744073709551615ULL;
  EXPECT_TRUE(job::resolve_job(j).ok());
  // A key whose range starts below 0 takes the positive values a job file holds (a parser reads
  // them as unsigned; every one was refused, "must be in [-1, 1048576], got 2"), and no others.
  for (const char* blocks : {"-1", "0", "2", "1048576"}) {
    j["placement"] = json::parse(std::string(R"({"hbm_state_blocks": )") + blocks + "}");
    const auto r = job::resolve_job(j);
    EXPECT_TRUE(r.ok()) << blocks << ": " << r.status().to_string();
  }
  for (const char* blocks : {"-2", "1048577"}) {
    j["placement"] = json::parse(std::string(R"({"hbm_state_blocks": )") + blocks + "}");
    const auto r = job::resolve_job(j);
    ASSERT_FALSE(r.ok()) << blocks;
    EXPECT_EQ(r.status().message(),
              std::string("job.json: placement.hbm_state_blocks must be in [-1, 1048576], got ") +
                  blocks);
  }
}

TEST(JobSchema, WorkerPrintsTheKeys) {
  std::istringstream in;
  std::ostringstream out, err;
  ASSERT_EQ(worker::run_worker({"job-keys", "--markdown"}, {in, out, err}), 0) << err.str();
  EXPECT_EQ(out.str(), job::job_keys_markdown());
  std::ostringstream text;
  ASSERT_EQ(worker::run_worker({"job-keys"}, {in, text, err}), 0) << err.str();
  EXPECT_NE(text.str().find("train.micro_batch_size (1, sequences; [1, 65536])"), std::string::npos)
      << text.str();
  std::ostringstream js;
  ASSERT_EQ(worker::run_worker({"job-keys", "--json"}, {in, js, err}), 0) << err.str();
  const json keys = json::parse(js.str());
  ASSERT_EQ(keys.size(), job::job_keys().size());
  EXPECT_EQ(keys[0]["path"], "name");
  EXPECT_EQ(worker::run_worker({"job-keys", "extra"}, {in, out, err}), 2);
}

}  // namespace
}  // namespace spillway
