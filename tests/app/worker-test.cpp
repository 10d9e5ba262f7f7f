// The worker end to end, as a user runs it: the golden AdamW trajectory through a job file,
// exact resume after SIGKILL, a real fine-tune of stories260K on tiny Shakespeare, the run store
// and events.jsonl, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "core/file-util.h"
#include "data/dataset.h"
#include "engine/train/golden-util.h"
#include "events/plan.h"
#include "history/run-folder.h"
#include "history/run-store.h"
#include "model/model-config.h"
#include "model/safetensors.h"
#include "run-files.h"
#include "test-data.h"
#include "train/inference.h"
#include "train/planner.h"
#include "worker-fixture.h"
#include "worker-process.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

using testing::of_type;
using testing::read_events;
using testing::WorkerTest;

// Writes the golden batches as pre-tokenized JSONL in the Hugging Face convention (labels aligned
// with input_ids, the model shifts): one extra id at the end carries the last target.
std::string write_golden_jsonl(const std::string& dir, const std::string& model, int steps, int* B,
                               int* T) {
  auto traj = TensorStore::open(testing::golden_case(model).file("adamw_trajectory.safetensors"));
  EXPECT_TRUE(traj.ok());
  std::string path = dir + "/golden.jsonl";
  std::ofstream f(path);
  for (int s = 0; s < steps; ++s) {
    const TensorInfo* ids = traj->find("batch" + std::to_string(s) + ".input_ids");
    const TensorInfo* labels = traj->find("batch" + std::to_string(s) + ".labels");
    *B = static_cast<int>(ids->shape[0]);
    *T = static_cast<int>(ids->shape[1]);
    const int32_t* id = reinterpret_cast<const int32_t*>(traj->data(*ids));
    const int32_t* lab = reinterpret_cast<const int32_t*>(traj->data(*labels));
    for (int b = 0; b < *B; ++b) {
      json row_ids = json::array(), row_labels = json::array({-100});
      for (int t = 0; t < *T; ++t) row_ids.push_back(id[b * *T + t]);
      row_ids.push_back(0);
      for (int t = 0; t < *T; ++t) row_labels.push_back(lab[b * *T + t]);
      f << json{{"input_ids", row_ids}, {"labels", row_labels}}.dump() << "\n";
    }
  }
  return path;
}

TEST_F(WorkerTest, GoldenTrajectoryThroughJobFile) {
  SPILLWAY_REQUIRE_DATA();
  auto meta = json::parse(*read_file(testing::data_path("golden/stories260K/meta.json")));
  int B = 0, T = 0;
  std::string data = write_golden_jsonl(tmp_.path(), "stories260K", 4, &B, &T);
  std::vector<std::string> model_files;
  for (int variant = 0; variant < 5; ++variant) {
    // mb 4, 2, 1 with the AdamW state in DRAM; then mb 4 with it on the SSD, and with the master
    // too.
    const int mb = variant < 3 ? (4 >> variant) : 4;
    const std::string run_dir = tmp_.path() + "/golden-" + std::to_string(variant);
    json placement = {{"backend", "cpu"}, {"device_memory_bytes", 4 << 20}};
    if (variant >= 3) placement["optimizer"] = "ssd", placement["ssd_dir"] = tmp_.path() + "/ssd";
    if (variant == 4) placement["master"] = "ssd";
    json job = {
        {"name", "golden"},
        {"model", {{"path", testing::data_path("models/stories260K")}}},
        {"data", {{"train", data}, {"format", "pretokenized"}, {"seq_len", T}, {"shuffle", false}}},
        {"train",
         {{"steps", 4},
          {"micro_batch_size", mb},
          {"grad_accum", B / mb},
          {"lr", 1e-3},
          {"schedule", "constant"},
          {"beta1", 0.9},
          {"beta2", 0.95},
          {"eps", 1e-8},
          {"weight_decay", 0.1},
          {"clip_grad_norm", 1.0}}},
        {"placement", placement},
        {"output", {{"run_dir", run_dir}}}};
    auto r = worker({"train", write_job("golden", job)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto steps = of_type(read_events(run_dir), "step");
    ASSERT_EQ(steps.size(), 4u);
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(steps[s]["step"], s + 1);
      // tests/engine/train/golden-util.h step_loss_tolerance: 1e-5 for step 1, 2e-5 after it.
      EXPECT_NEAR(steps[s]["loss"].get<double>(), meta["step_losses"][s].get<double>(),
                  s == 0 ? 1e-5 : 2e-5)
          << "mb " << mb << " step " << s + 1;
      EXPECT_NEAR(steps[s]["grad_norm"].get<double>(),
                  meta["step_grad_norms_before_clip"][s].get<double>(), 1e-4);
      // The optimizer of step s runs after its event, so its SSD bytes show in step s+1's.
      if (variant >= 3 && s > 0) {
        EXPECT_GT(steps[s]["ssd_read_bytes"].get<double>(), 0);
      }
    }
    model_files.push_back(*read_file(run_dir + "/checkpoints/step-000004/model.safetensors"));
  }
  // The state on the SSD runs the same math: the trained weights are bit-identical to DRAM's.
  EXPECT_TRUE(model_files[3] == model_files[0]);
  EXPECT_TRUE(model_files[4] == model_files[0]);
}

// Gemma 3 text through the worker: the golden gemma3-tiny (repository case) trains its 4 AdamW
// steps from a job file on the PyTorch reference's losses, and the export is the same model to the
// engine (config.json reads back as the trained one, with the Hub's keys: transformers' own check
// is tests/golden/check_export.py) and to `inspect`.
TEST_F(WorkerTest, Gemma3GoldenTrainsAndExports) {
  const testing::GoldenCase golden = testing::golden_case("gemma3-tiny");
  auto meta = json::parse(*read_file(golden.file("meta.json")));
  int B = 0, T = 0;
  std::string data = write_golden_jsonl(tmp_.path(), "gemma3-tiny", 4, &B, &T);
  const std::string run_dir = tmp_.path() + "/gemma3";
  json job = {
      {"name", "gemma3"},
      {"model", {{"path", golden.model}}},
      {"data", {{"train", data}, {"format", "pretokenized"}, {"seq_len", T}, {"shuffle", false}}},
      {"train",
       {{"steps", 4},
        {"micro_batch_size", 1},
        {"grad_accum", B},
        {"lr", 1e-3},
        {"schedule", "constant"},
        {"beta1", 0.9},
        {"beta2", 0.95},
        {"eps", 1e-8},
        {"weight_decay", 0.1},
        {"clip_grad_norm", 1.0}}},
      {"placement", {{"backend", "cpu"}}},
      {"output", {{"run_dir", run_dir}}}};
  auto r = worker({"train", write_job("gemma3", job)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto steps = of_type(read_events(run_dir), "step");
  ASSERT_EQ(steps.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_NEAR(steps[s]["loss"].get<double>(), meta["step_losses"][s].get<double>(),
                s == 0 ? 1e-5 : 2e-5)
        << "step " << s + 1;
  }
  auto exported = ModelConfig::load(run_dir + "/export");
  ASSERT_TRUE(exported.ok()) << exported.status().to_string();
  auto original = ModelConfig::load(golden.model);
  ASSERT_TRUE(original.ok());
  EXPECT_EQ(exported->to_json(), original->to_json());
  auto inspect = worker({"inspect", "--model", run_dir + "/export"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("Gemma3ForCausalLM: 176032 parameters"), std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find("sliding window 8 on 2 of 3 layers"), std::string::npos)
      << inspect.out;
}

// Four steps of two micro-batches of two, checkpoints at 2 and 4 kept: the training of the jobs
// that compare bits and checkpoint files across placements.
json bits_train() {
  return {{"steps", 4},          {"micro_batch_size", 2}, {"grad_accum", 2},      {"lr", 2e-3},
          {"weight_decay", 0.1}, {"checkpoint_every", 2}, {"keep_checkpoints", 0}};
}

// The HBM state tier as a user sets it (placement.hbm_state_blocks), on the CPU backend, whose
// device arena stands in for HBM: with the first three blocks' state there, the same step losses
// and the same checkpoint files, byte for byte, as with all of it in DRAM; and the tier run's
// step-2 checkpoint, resumed with the state in DRAM, ends in the uninterrupted run's files.
TEST_F(WorkerTest, TheHbmStateTierTrainsTheSameBits) {
  SPILLWAY_REQUIRE_DATA();
  auto job_for = [&](const std::string& run_dir, int hbm_blocks) {
    return stories_job("tier", run_dir, 3, bits_train(),
                       {{"backend", "cpu"}, {"hbm_state_blocks", hbm_blocks}});
  };
  const std::string dram = tmp_.path() + "/dram", hbm = tmp_.path() + "/hbm",
                    resumed = tmp_.path() + "/resumed";
  auto r = worker({"train", write_job("dram", job_for(dram, 0))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = worker({"train", write_job("hbm", job_for(hbm, 3))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto losses = [](const std::string& run_dir) {
    std::vector<double> out;
    for (const json& e : of_type(read_events(run_dir), "step")) out.push_back(e["loss"]);
    return out;
  };
  EXPECT_EQ(losses(hbm), losses(dram));
  EXPECT_EQ(losses(dram).size(), 4u);
  for (const char* step : {"step-000002", "step-000004"})
    same_files(dram + "/checkpoints/" + step, hbm + "/checkpoints/" + step,
               std::string("hbm 3 against dram, ") + step);

  fs::copy(hbm, resumed, fs::copy_options::recursive);
  fs::remove_all(resumed + "/checkpoints/step-000004");
  r = worker({"train", write_job("resumed", job_for(resumed, 0)), "--resume",
              resumed + "/checkpoints/step-000002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  same_files(dram + "/checkpoints/step-000004", resumed + "/checkpoints/step-000004",
             "the tier's step 2 resumed in DRAM");
}

// placement.optimizer "auto" with state a little larger than DRAM (placement.dram_cap_bytes):
// the plan keeps the moments of the first blocks in DRAM and puts the rest on the SSD, the run
// builds that mix and trains the all-DRAM run's bits into the same checkpoint files, and its
// checkpoint resumes with everything in DRAM. "dram" under the same cap says what "auto" keeps.
// placement.saved_activation_layers and mlp_recompute_layers reach the run: the plan records them,
// its table says what each layer recomputes, and the checkpoints are the files of a run that
// recomputes every layer.
TEST_F(WorkerTest, SavedActivationsTrainTheSameBits) {
  SPILLWAY_REQUIRE_DATA();
  auto job_for = [&](const std::string& run_dir, int whole, int mlp) {
    return stories_job(
        "saved", run_dir, 3, bits_train(),
        {{"backend", "cpu"}, {"saved_activation_layers", whole}, {"mlp_recompute_layers", mlp}});
  };
  const std::string none = tmp_.path() + "/none", saved = tmp_.path() + "/saved";
  const std::string saved_job = write_job("saved", job_for(saved, 2, 1));
  auto r = worker({"plan", saved_job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  recompute          the forward of layers 0-1 from their checkpoints; the "
                       "MLP of layer 2 (their other activations saved in the arena); nothing of "
                       "layers 3-4 (every activation saved in the arena)"),
            std::string::npos)
      << r.out;
  ASSERT_EQ(worker({"train", write_job("none", job_for(none, 0, 0))}).exit_code, 0);
  r = worker({"train", saved_job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const json& e : of_type(read_events(saved), "plan")) {
    EXPECT_EQ(e["state"]["saved_activation_layers"], 2) << e.dump();
    EXPECT_EQ(e["state"]["mlp_recompute_layers"], 1) << e.dump();
  }
  for (const char* step : {"step-000002", "step-000004"})
    same_files(none + "/checkpoints/" + step, saved + "/checkpoints/" + step,
               std::string("saved activations against none, ") + step);
}

TEST_F(WorkerTest, AutoPlacementMixesTheTiersPerBlockAndTrainsTheSameBits) {
  SPILLWAY_REQUIRE_DATA();
  const std::string ssd = tmp_.path() + "/ssd";
  fs::create_directories(ssd);  // the plan probes its free space
  auto job_for = [&](const std::string& run_dir, const std::string& optimizer, uint64_t cap) {
    return stories_job("mix", run_dir, 3, bits_train(),
                       {{"backend", "cpu"},
                        {"optimizer", optimizer},
                        {"master", "auto"},
                        {"ssd_dir", ssd},
                        {"dram_cap_bytes", cap}});
  };
  const std::string dram = tmp_.path() + "/dram", mixed = tmp_.path() + "/mixed",
                    resumed = tmp_.path() + "/resumed";
  // Room for everything: all in DRAM. Then a cap half the moments short.
  auto r = worker({"plan", write_job("roomy", job_for(mixed, "auto", 0)), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json plan = json::parse(r.out);
  const int blocks = plan["state"]["blocks"];
  EXPECT_EQ(plan["state"]["dram_blocks"], blocks);
  const auto& need = plan["tiers"]["dram"];
  const uint64_t cap = need["needed_bytes"].get<uint64_t>() -
                       need["categories"]["optimizer_bytes"].get<uint64_t>() / 2;
  const std::string mixed_job = write_job("mixed", job_for(mixed, "auto", cap));
  r = worker({"plan", mixed_job, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  plan = json::parse(r.out);
  const int in_dram = plan["state"]["dram_blocks"];
  EXPECT_GT(in_dram, 0);
  EXPECT_LT(in_dram, blocks);
  EXPECT_EQ(plan["state"]["ssd_moments_blocks"], blocks - in_dram);
  EXPECT_EQ(plan["state"]["ssd_blocks"], 0);
  EXPECT_LE(plan["tiers"]["dram"]["needed_bytes"].get<uint64_t>(), cap);
  r = worker({"plan", mixed_job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  host state         blocks 0-" + std::to_string(in_dram - 1)),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("with the master in DRAM and the moments on the SSD: the moments of every "
                       "block ("),
            std::string::npos)
      << r.out;

  r = worker({"train", write_job("dram", job_for(dram, "dram", 0))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = worker({"train", mixed_job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<json> events = read_events(mixed);
  bool training = false;  // the first "training" state says where the state lives
  for (const json& e : of_type(events, "state")) {
    if (e["state"] != "training" || !e.contains("optimizer_tier")) continue;
    training = true;
    EXPECT_EQ(e["optimizer_tier"], "dram+ssd");
    EXPECT_EQ(e["master_tier"], "dram");
  }
  EXPECT_TRUE(training);
  for (const json& e : of_type(events, "plan"))
    EXPECT_EQ(e["state"]["dram_blocks"], in_dram) << e.dump();
  for (const char* step : {"step-000002", "step-000004"})
    same_files(dram + "/checkpoints/" + step, mixed + "/checkpoints/" + step,
               std::string("auto mix against dram, ") + step);

  fs::copy(mixed, resumed, fs::copy_options::recursive);
  fs::remove_all(resumed + "/checkpoints/step-000004");
  r = worker({"train", write_job("resumed", job_for(resumed, "dram", 0)), "--resume",
              resumed + "/checkpoints/step-000002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  same_files(dram + "/checkpoints/step-000004", resumed + "/checkpoints/step-000004",
             "the mix's step 2 resumed in DRAM");

  r = worker({"train", write_job("too-big", job_for(tmp_.path() + "/too-big", "dram", cap))});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("(\"auto\" keeps the moments of the first " + std::to_string(in_dram) +
                       " of " + std::to_string(blocks) +
                       " blocks in DRAM and puts the rest on the "
                       "SSD)"),
            std::string::npos)
      << r.err;
}

// placement.devices through the job file, on CPU ranks (the data-parallel schedule of the GPUs):
// 2 ranks with 2 micro-batches each train what one rank with 4 trains (the global batch is
// micro-batch x accumulation x ranks), within float rounding; a resumed 2-rank run is the
// uninterrupted one bit for bit; the checkpoint does not depend on the number of ranks, so it
// resumes on one.
TEST_F(WorkerTest, DataParallelRanksTrainTheOneDeviceRunAndResumeOnAnotherCount) {
  SPILLWAY_REQUIRE_DATA();
  auto job_for = [&](const std::string& run_dir, int ranks, int accum) {
    return stories_job("dp", run_dir, 5,
                       {{"steps", 4},
                        {"micro_batch_size", 2},
                        {"grad_accum", accum},
                        {"lr", 2e-3},
                        {"weight_decay", 0.1},
                        {"checkpoint_every", 2},
                        {"keep_checkpoints", 0}},
                       {{"backend", "cpu"}, {"devices", ranks}});
  };
  const std::string one = tmp_.path() + "/one", two = tmp_.path() + "/two",
                    resumed = tmp_.path() + "/resumed", on_one = tmp_.path() + "/on-one";
  auto r = worker({"train", write_job("one", job_for(one, 1, 4))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = worker({"train", write_job("two", job_for(two, 2, 2))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto steps = [](const std::string& run_dir) { return of_type(read_events(run_dir), "step"); };
  const auto a = steps(one), b = steps(two);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]) << "step " << i + 1 << ": the same global batch";
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(),
                1e-5 * a[i]["loss"].get<double>())
        << "step " << i + 1;
  }
  // The run's plan says how many ranks it used.
  const auto plans = of_type(read_events(two), "plan");
  ASSERT_FALSE(plans.empty());
  EXPECT_EQ(plans[0]["devices"]["count"], 2);
  // Its timeline has every rank's spans, each naming its rank (the CPU backend's device index):
  // a sampled step's blocks of both ranks; the optimizer's and the step's are the host's. One
  // rank's spans name none, as before data parallel.
  std::map<int, std::map<std::string, int>> by_device;  // device -> phase -> spans
  for (const json& e : of_type(read_events(two), "span")) {
    const std::string phase = e["phase"];
    if (phase == "optimizer" || phase == "compute") {
      EXPECT_FALSE(e.contains("device")) << e.dump();
    } else {
      ASSERT_TRUE(e.contains("device")) << e.dump();
      ++by_device[e["device"].get<int>()][phase];
    }
  }
  ASSERT_EQ(by_device.size(), 2u);
  EXPECT_GT(by_device[0]["reduce"], 0);
  EXPECT_EQ(by_device[0], by_device[1]) << "whole steps of both ranks";
  for (const json& e : of_type(read_events(one), "span")) {
    EXPECT_FALSE(e.contains("device")) << e.dump();
    EXPECT_NE(e["phase"], "reduce");
  }

  fs::copy(two, resumed, fs::copy_options::recursive);
  fs::remove_all(resumed + "/checkpoints/step-000004");
  r = worker({"train", write_job("resumed", job_for(resumed, 2, 2)), "--resume",
              resumed + "/checkpoints/step-000002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  same_files(two + "/checkpoints/step-000004", resumed + "/checkpoints/step-000004",
             "2 ranks resumed at step 2");

  // The same checkpoint on one rank with the same global batch: it trains on, within rounding.
  fs::copy(two, on_one, fs::copy_options::recursive);
  fs::remove_all(on_one + "/checkpoints/step-000004");
  r = worker({"train", write_job("on-one", job_for(on_one, 1, 4)), "--resume",
              on_one + "/checkpoints/step-000002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto c = steps(on_one);  // the copied steps 1-4, then the resumed 3 and 4
  ASSERT_EQ(c.size(), 6u);
  EXPECT_EQ(c.back()["step"], 4);
  EXPECT_NEAR(c.back()["loss"].get<double>(), b[3]["loss"].get<double>(),
              1e-5 * b[3]["loss"].get<double>());
}

class ResumeTest : public WorkerTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(ResumeTest, ResumeAfterSigkillIsBitExact) {
  SPILLWAY_REQUIRE_DATA();
  const std::string tier =
      GetParam();  // where the AdamW state lives: "dram", "ssd", or "ssd+master"
  const json placement =
      tier == "dram" ? json{{"backend", "cpu"}}
      : tier == "ssd"
          ? json{{"backend", "cpu"}, {"optimizer", "ssd"}, {"ssd_dir", tmp_.path() + "/ssd"}}
          : json{{"backend", "cpu"},
                 {"optimizer", "ssd"},
                 {"master", "ssd"},
                 {"ssd_dir", tmp_.path() + "/ssd"}};
  auto job_for = [&](const std::string& run_dir) {
    return stories_job("resume", run_dir, 7,
                       {{"steps", 6},
                        {"micro_batch_size", 4},
                        {"grad_accum", 2},
                        {"lr", 2e-3},
                        {"schedule", "cosine"},
                        {"warmup_steps", 2},
                        {"weight_decay", 0.1},
                        {"checkpoint_every", 3},
                        {"keep_checkpoints", 5}},
                       placement);
  };
  const std::string straight = tmp_.path() + "/straight", killed = tmp_.path() + "/killed";
  ASSERT_EQ(worker({"train", write_job("straight", job_for(straight))}).exit_code, 0);

  // Start the same job, SIGKILL it as soon as its step-3 checkpoint exists, then resume from it.
  pid_t pid = testing::spawn_worker({"train", write_job("killed", job_for(killed))}, env_,
                                    tmp_.path() + "/k.out", tmp_.path() + "/k.err");
  ASSERT_GT(pid, 0);
  const std::string ckpt = killed + "/checkpoints/step-000003";
  // Up to two minutes: a sanitizer build on a loaded machine takes tens of seconds to get there.
  for (int i = 0; i < 24000 && !fs::exists(ckpt); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // Then at a random moment of the next steps (mid-forward, mid-update, mid-write of SSD state).
  const int delay_ms = static_cast<int>(std::random_device()() % 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  kill(pid, SIGKILL);
  SCOPED_TRACE("SIGKILL " + std::to_string(delay_ms) + " ms after the step-3 checkpoint");
  testing::wait_exit(pid);
  ASSERT_TRUE(fs::exists(ckpt + "/model.safetensors"));
  auto r = worker({"train", tmp_.path() + "/killed.json", "--resume", ckpt});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  // The same files whatever the tier: the moments on the SSD are streamed into the one
  // optimizer.safetensors too.
  for (const std::string file : {"model.safetensors", "optimizer.safetensors"}) {
    auto a = read_file(straight + "/checkpoints/step-000006/" + file);
    auto b = read_file(killed + "/checkpoints/step-000006/" + file);
    ASSERT_TRUE(a.ok() && b.ok()) << file;
    EXPECT_TRUE(*a == *b) << file << " differs after resume";
  }
  // The SSD working state of finished runs is removed; the checkpoints hold the durable copy.
  if (tier != "dram") {
    EXPECT_TRUE(!fs::exists(tmp_.path() + "/ssd") || fs::is_empty(tmp_.path() + "/ssd") ||
                std::distance(fs::directory_iterator(tmp_.path() + "/ssd"), {}) ==
                    1);  // the SIGKILLed run's
  }
  // The SIGKILLed run, resumed, is one run: one row, completed, with all six steps.
  auto store = RunStore::open(tmp_.path() + "/xdg/spillway/runs.db");
  ASSERT_TRUE(store.ok());
  auto runs = (*store)->list_runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);  // straight and killed
  for (const auto& run : *runs) {
    EXPECT_EQ(run.status, RunStatus::kCompleted) << run.run_dir;
    const auto metrics = (*store)->metrics(run.id);
    ASSERT_EQ(metrics->size(), 6u) << run.run_dir;
    EXPECT_EQ(metrics->front().step, 1);
    EXPECT_EQ(metrics->back().step, 6);
    // Each start's plan is in runs.db (History shows the placement from it): the resumed run has
    // two, and each says where every block's state lived (on the CPU backend: all off the device).
    const auto plans = (*store)->events(run.id, "plan");
    ASSERT_TRUE(plans.ok());
    EXPECT_EQ(plans->size(), run.run_dir.find("killed") != std::string::npos ? 2u : 1u)
        << run.run_dir;
    for (const auto& row : *plans) {
      auto plan = plan_from_json(json::parse(row.json));
      ASSERT_TRUE(plan.ok()) << row.json;
      EXPECT_EQ(plan->state.blocks, plan->model.layers + 2) << run.run_dir;
      EXPECT_EQ(plan->state.hbm_blocks, 0) << run.run_dir;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, ResumeTest, ::testing::Values("dram", "ssd", "ssd+master"),
                         [](const auto& info) {
                           std::string n = info.param;
                           return n == "ssd+master" ? std::string("ssd_master") : n;
                         });

TEST_F(WorkerTest, FineTuneStoriesOnShakespeare) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run_dir = tmp_.path() + "/shakespeare";
  json job = json::parse(*read_file(std::string(SPILLWAY_SOURCE_DIR) +
                                    "/resources/jobs/stories260k-shakespeare.json"));
  // Relative to the job file, as the shipped job's are.
  job["model"]["path"] =
      fs::relative(testing::data_path("models/stories260K"), tmp_.path()).string();
  job["data"]["train"] = testing::data_path("datasets/tinyshakespeare/input.txt");
  job["train"]["eval_batches"] = 0;  // the whole held-out 10%
  job["output"]["run_dir"] = run_dir;
  auto r = worker({"train", write_job("shakespeare", job), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json first = json::parse(r.out.substr(0, r.out.find('\n')));
  const std::string run_id = first["run_id"];

  auto events = read_events(run_dir);
  auto evals = of_type(events, "eval");
  ASSERT_GE(evals.size(), 2u);
  const double before = evals.front()["loss"], after = evals.back()["loss"];
  EXPECT_EQ(evals.front()["step"], 0);
  EXPECT_EQ(evals.back()["step"], 200);
  EXPECT_LT(after, 0.7 * before) << "held-out loss " << before << " -> " << after;
  std::printf("held-out loss %.4f -> %.4f (%.1f%% lower)\n", before, after,
              100 * (1 - after / before));

  // events.jsonl against the documented schema.
  int samples = 0;
  for (const auto& e : events) {
    ASSERT_TRUE(e["type"].is_string());
    ASSERT_TRUE(e["t"].is_number());
    const std::string type = e["type"];
    if (type == "step") {
      for (const char* k :
           {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "model_tflops", "step_s"})
        EXPECT_TRUE(e.contains(k) && e[k].is_number()) << k;
    } else if (type == "sample") {
      ++samples;
      EXPECT_TRUE(e["tiers"]["dram"]["master_bytes"].is_number());
      EXPECT_TRUE(e["tiers"]["hbm"]["weights_bytes"].is_number());
      EXPECT_TRUE(e["links"]["h2d_gbps"].is_number());
    } else if (type == "eval") {
      EXPECT_TRUE(e["loss"].is_number() && e["perplexity"].is_number());
    } else if (type == "checkpoint") {
      EXPECT_TRUE(fs::exists(e["path"].get<std::string>()));
    } else if (type == "state") {
      EXPECT_TRUE(e["state"].is_string());
    } else {
      EXPECT_TRUE(type == "span" || type == "log" || type == "export" || type == "plan" ||
                  type == "measured")
          << type;
      if (type == "measured") {
        EXPECT_TRUE(e["figures"]["step_s"].is_number() &&
                    e["versus_plan"]["step_s"]["ratio"].is_number());
        // The engine moves across the link exactly what the plan counts.
        EXPECT_DOUBLE_EQ(e["versus_plan"]["h2d_bytes"]["ratio"].get<double>(), 1.0);
      }
      if (type == "span") {
        EXPECT_TRUE(e["phase"].is_string() && e["start_s"].is_number() && e["end_s"].is_number());
      }
      if (type == "plan") {
        EXPECT_TRUE(e["fits"].is_boolean() && e["step"]["step_s"].is_number());
      }
    }
  }
  EXPECT_GT(samples, 5);
  EXPECT_EQ(of_type(events, "state").back()["state"], "completed");

  // The run store: the run, every step's metrics, downsampled samples, checkpoints, evals.
  auto store = RunStore::open(tmp_.path() + "/xdg/spillway/runs.db");
  ASSERT_TRUE(store.ok());
  auto run = (*store)->get_run(run_id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kCompleted);
  EXPECT_EQ((*store)->metrics(run_id)->size(), 200u);
  EXPECT_GT((*store)->samples(run_id)->size(), 2u);
  EXPECT_GE((*store)->checkpoints(run_id)->size(), 2u);
  EXPECT_EQ((*store)->evals(run_id)->size(), evals.size());
  // History keeps the plan's figures and the measured ones together.
  EXPECT_TRUE(json::parse(run->predicted_json)["step_s"].is_number()) << run->predicted_json;
  EXPECT_TRUE(json::parse(run->measured_json)["step_s"].is_number()) << run->measured_json;
  EXPECT_TRUE(json::parse(run->measured_json)["peak_dram_bytes"].is_number()) << run->measured_json;

  // The export loads back with the same held-out loss.
  // On the CPU, as the run trained, on a GPU machine too (a bf16 GPU evaluation differs by ~1e-4).
  auto session = InferenceSession::open(run_dir + "/export", 128, 8, 0, "cpu");
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  DatasetOptions opts;
  opts.seq_len = 128;
  auto ds = Dataset::load(testing::data_path("datasets/tinyshakespeare/input.txt"),
                          (*session)->tokenizer(), opts);
  ASSERT_TRUE(ds.ok());
  auto split = ds->split_tail(0.1);
  ASSERT_TRUE(split.ok());
  auto reloaded = (*session)->eval(split->second);
  ASSERT_TRUE(reloaded.ok());
  EXPECT_NEAR(reloaded->loss, after, 1e-4);

  // The run folder's job.json holds the resolved (absolute) model path, so `export` of a checkpoint
  // finds the tokenizer the run used, and the export is a whole model folder.
  const json kept = json::parse(*read_file(run_dir + "/job.json"));
  EXPECT_EQ(kept["model"]["path"],
            fs::weakly_canonical(testing::data_path("models/stories260K")).string());
  const std::string exp100 = tmp_.path() + "/export-100";
  auto ex =
      worker({"export", "--checkpoint", run_dir + "/checkpoints/step-000100", "--out", exp100});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_TRUE(fs::exists(exp100 + "/tokenizer.model") || fs::exists(exp100 + "/tokenizer.json"));
  auto ev = worker({"eval", "--model", exp100, "--data",
                    testing::data_path("datasets/tinyshakespeare/input.txt"), "--seq-len", "128",
                    "--batch", "8", "--json"});
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  EXPECT_LT(json::parse(ev.out)["loss"].get<double>(), before);

  // Generation from the trained model.
  auto gen = worker(
      {"generate", "--model", run_dir + "/export", "--prompt", "ROMEO:", "--max-new-tokens", "60"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_GT(gen.out.size(), 40u);
  std::printf("generated:\n%s\n", gen.out.c_str());
}

TEST_F(WorkerTest, SignalsCheckpointAndStopCleanly) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run_dir = tmp_.path() + "/signals";
  json job = {
      {"name", "signals"},
      {"model", {{"path", testing::data_path("models/stories260K")}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 64}}},
      {"train", {{"steps", 100000}, {"micro_batch_size", 4}, {"lr", 1e-3}}},
      {"output", {{"run_dir", run_dir}}}};
  pid_t pid = testing::spawn_worker({"train", write_job("signals", job)}, env_,
                                    tmp_.path() + "/s.out", tmp_.path() + "/s.err");
  ASSERT_GT(pid, 0);
  auto wait_for = [&](const std::string& type, size_t count) {
    for (int i = 0; i < 3000; ++i) {
      if (fs::exists(run_dir + "/events.jsonl") &&
          of_type(read_events(run_dir), type).size() >= count)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  ASSERT_TRUE(wait_for("step", 3));
  kill(pid, SIGUSR1);  // checkpoint now, keep training
  ASSERT_TRUE(wait_for("checkpoint", 1));
  const size_t steps_at_checkpoint = of_type(read_events(run_dir), "step").size();
  ASSERT_TRUE(wait_for("step", steps_at_checkpoint + 2));  // still training
  kill(pid, SIGTERM);                                      // checkpoint, then stop
  EXPECT_EQ(testing::wait_exit(pid), 0) << testing::slurp(tmp_.path() + "/s.err");
  auto events = read_events(run_dir);
  EXPECT_EQ(of_type(events, "checkpoint").size(), 2u);
  EXPECT_EQ(of_type(events, "state").back()["state"], "stopped");
  const int64_t last_step = of_type(events, "step").back()["step"];
  EXPECT_EQ(of_type(events, "checkpoint").back()["step"], last_step);
  EXPECT_TRUE(fs::exists(of_type(events, "checkpoint").back()["path"].get<std::string>() +
                         "/optimizer.safetensors"));
  auto store = RunStore::open(tmp_.path() + "/xdg/spillway/runs.db");
  ASSERT_TRUE(store.ok());
  auto runs = (*store)->list_runs();
  ASSERT_TRUE(runs.ok() && runs->size() == 1u);
  EXPECT_EQ(runs->front().status, RunStatus::kStopped);
}

// A checkpoint saved on request (SIGUSR1, the app's Save checkpoint) is the user's: the keep-N
// rotation of the scheduled ones never removes it (issue 13: it was deleted by keep_checkpoints).
TEST_F(WorkerTest, AManualCheckpointIsKeptByTheRotation) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run_dir = tmp_.path() + "/manual";
  json job = {
      {"name", "manual"},
      {"model", {{"path", testing::data_path("models/stories260K")}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 32}}},
      {"train",
       {{"steps", 100000},
        {"micro_batch_size", 2},
        {"lr", 1e-3},
        {"checkpoint_every", 2},
        {"keep_checkpoints", 1}}},
      {"output", {{"run_dir", run_dir}}}};
  pid_t pid = testing::spawn_worker({"train", write_job("manual", job)}, env_,
                                    tmp_.path() + "/m.out", tmp_.path() + "/m.err");
  ASSERT_GT(pid, 0);
  auto wait_for = [&](const std::string& type, size_t count) {
    for (int i = 0; i < 12000; ++i) {
      if (fs::exists(run_dir + "/events.jsonl") &&
          of_type(read_events(run_dir), type).size() >= count)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  ASSERT_TRUE(wait_for("step", 3));
  kill(pid, SIGUSR1);
  // The manual checkpoint's step, from its folder (a scheduled checkpoint written while the signal
  // was on its way is not it), then three scheduled ones after it.
  auto manual_step = [&]() -> std::optional<int64_t> {
    for (const std::string& dir : list_checkpoints(run_dir + "/checkpoints")) {
      auto text = read_file(dir + "/trainer_state.json");
      if (!text.ok()) continue;
      const json state = json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (state.is_object() && state.value("manual", false)) return state["step"].get<int64_t>();
    }
    return std::nullopt;
  };
  std::optional<int64_t> m;
  for (int i = 0; i < 12000 && !(m = manual_step()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(m.has_value()) << "no manual checkpoint after SIGUSR1";
  bool three_after = false;
  for (int i = 0; i < 12000 && !three_after; ++i) {
    const auto checkpoints = of_type(read_events(run_dir), "checkpoint");
    three_after = !checkpoints.empty() &&
                  checkpoints.back()["step"].get<int64_t>() >= *m + 6;  // every 2 steps
    if (!three_after) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(three_after);
  kill(pid, SIGTERM);
  EXPECT_EQ(testing::wait_exit(pid), 0) << testing::slurp(tmp_.path() + "/m.err");
  std::vector<int64_t> manual, scheduled;
  for (const std::string& dir : list_checkpoints(run_dir + "/checkpoints")) {
    const json state = json::parse(*read_file(dir + "/trainer_state.json"));
    (state.value("manual", false) ? manual : scheduled).push_back(state["step"].get<int64_t>());
  }
  ASSERT_EQ(manual.size(), 1u);
  ASSERT_EQ(scheduled.size(), 1u);  // keep_checkpoints 1: the newest of the scheduled ones
  const int64_t last_step = of_type(read_events(run_dir), "step").back()["step"];
  EXPECT_EQ(scheduled[0], last_step);   // the stop's checkpoint
  EXPECT_LT(manual[0] + 4, last_step);  // older than three scheduled ones that came and went
  std::printf(
      "manual checkpoint at step %lld kept; scheduled ones up to step %lld pruned to the last\n",
      static_cast<long long>(manual[0]), static_cast<long long>(last_step));
}

// A copy of stories260K's model folder without its tokenizer files: config.json and the weights.
std::string bare_model(const std::string& dir) {
  const std::string bare = dir + "/bare-model";
  fs::create_directories(bare);
  for (const char* name : {"config.json", "model.safetensors"})
    fs::copy_file(testing::data_path("models/stories260K/") + name, bare + "/" + name);
  return bare;
}

// `records` pre-tokenized rows of `len` ids below `vocab`, one per line.
std::string write_pretokenized(const std::string& path, int records, int len, int vocab) {
  std::mt19937 rng(11);
  std::ofstream f(path);
  for (int r = 0; r < records; ++r) {
    json ids = json::array();
    for (int t = 0; t < len; ++t) ids.push_back(static_cast<int>(rng() % vocab));
    f << json{{"input_ids", ids}}.dump() << "\n";
  }
  return path;
}

TEST_F(WorkerTest, ModelWithoutTokenizerTrainsOnPreTokenizedData) {
  SPILLWAY_REQUIRE_DATA();
  const std::string model = bare_model(tmp_.path());
  const int vocab = json::parse(*read_file(model + "/config.json"))["vocab_size"];
  const std::string data = write_pretokenized(tmp_.path() + "/ids.jsonl", 8, 33, vocab);
  const std::string run_dir = tmp_.path() + "/bare-run";
  json job = {{"name", "bare"},
              {"model", {{"path", model}}},
              {"data", {{"train", data}, {"format", "pretokenized"}, {"seq_len", 32}}},
              {"train", {{"steps", 3}, {"micro_batch_size", 2}, {"lr", 1e-3}}},
              {"output", {{"run_dir", run_dir}}}};
  auto r = worker({"train", write_job("bare", job)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto events = read_events(run_dir);
  EXPECT_EQ(of_type(events, "step").size(), 3u);

  // The export is the model without a tokenizer, and says so: in the export event and the log.
  const std::string exported = run_dir + "/export";
  EXPECT_TRUE(fs::exists(exported + "/model.safetensors") && fs::exists(exported + "/config.json"));
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"})
    EXPECT_FALSE(fs::exists(exported + "/" + name)) << name;
  ASSERT_EQ(of_type(events, "export").size(), 1u);
  EXPECT_EQ(of_type(events, "export")[0]["tokenizer"], false);
  bool warned = false;
  for (const auto& e : of_type(events, "log"))
    warned |= e["message"].get<std::string>().find("without a tokenizer") != std::string::npos;
  EXPECT_TRUE(warned);

  // `export` of a checkpoint of that run: the run's model folder names no tokenizer, and it says
  // so.
  const std::string out = tmp_.path() + "/bare-export";
  auto ex = worker({"export", "--checkpoint", run_dir + "/checkpoints/step-000003", "--out", out});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_NE(ex.out.find("no tokenizer written"), std::string::npos) << ex.out;
  EXPECT_NE(ex.err.find("has no tokenizer files"), std::string::npos) << ex.err;
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/tokenizer.json") || fs::exists(out + "/tokenizer.model"));
  ex = worker({"export", "--checkpoint", run_dir + "/checkpoints/step-000003", "--out",
               out + "-json", "--json"});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_EQ(json::parse(ex.out)["tokenizer"], false);

  // Text data still needs a tokenizer.
  json text = job;
  text["data"] = {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")},
                  {"seq_len", 32}};
  text["output"]["run_dir"] = tmp_.path() + "/never";
  r = worker({"train", write_job("bare-text", text)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("text data needs a tokenizer"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(model + " has no tokenizer files"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/never"));
}

TEST_F(WorkerTest, PreTokenizedIdBeyondModelVocabIsAClearError) {
  SPILLWAY_REQUIRE_DATA();
  const std::string model = bare_model(tmp_.path());
  const std::string data = write_pretokenized(tmp_.path() + "/ids.jsonl", 3, 33, 512);
  std::ofstream(data, std::ios::app) << json{{"input_ids", {5, 6, 512, 7}}}.dump() << "\n";
  json job = {{"name", "oov"},
              {"model", {{"path", model}}},
              {"data", {{"train", data}, {"format", "pretokenized"}, {"seq_len", 32}}},
              {"train", {{"steps", 1}}},
              {"output", {{"run_dir", tmp_.path() + "/never"}}}};
  auto r = worker({"train", write_job("oov", job)});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(
      r.err.find(data + ":4: 'input_ids' entry 2 = 512 is not below the model's vocab_size 512"),
      std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/never"));
}

// trainer_state.json's elapsed_s: the run's time at each checkpoint, carried on through a resume.
TEST_F(WorkerTest, CheckpointsRecordElapsedTime) {
  SPILLWAY_REQUIRE_DATA();
  auto job_for = [&](const std::string& run_dir) {
    return json{
        {"name", "elapsed"},
        {"model", {{"path", testing::data_path("models/stories260K")}}},
        {"data",
         {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 64}}},
        {"train",
         {{"steps", 4}, {"micro_batch_size", 4}, {"checkpoint_every", 2}, {"keep_checkpoints", 5}}},
        {"output", {{"run_dir", run_dir}}}};
  };
  auto elapsed = [](const std::string& ckpt) {
    return json::parse(*read_file(ckpt + "/trainer_state.json"))["elapsed_s"].get<double>();
  };
  const std::string first = tmp_.path() + "/elapsed", second = tmp_.path() + "/elapsed-resumed";
  auto r = worker({"train", write_job("elapsed", job_for(first))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double at2 = elapsed(first + "/checkpoints/step-000002"),
               at4 = elapsed(first + "/checkpoints/step-000004");
  EXPECT_GT(at2, 0);
  EXPECT_GT(at4, at2);
  // Resumed from step 2 into another folder: its step 4 counts the first run's time up to step 2
  // too.
  r = worker({"train", write_job("elapsed-resumed", job_for(second)), "--resume",
              first + "/checkpoints/step-000002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(elapsed(second + "/checkpoints/step-000004"), at2);
}

// `plan --measure N` trains N real steps of the job in a throwaway run and prints measured against
// predicted; History does not list that run and its temporary folder is gone afterwards.
TEST_F(WorkerTest, PlanMeasureComparesRealStepsWithThePlan) {
  SPILLWAY_REQUIRE_DATA();
  const std::string tmpdir = tmp_.path() + "/tmp";
  fs::create_directories(tmpdir);
  env_.push_back("TMPDIR=" + tmpdir);
  json job = {
      {"name", "measure"},
      {"model", {{"path", testing::data_path("models/stories260K")}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 64}}},
      {"train",
       {{"steps", 1000},
        {"micro_batch_size", 4},
        {"grad_accum", 2},
        {"checkpoint_every", 1},
        {"eval_every", 1}}},
      {"placement", {{"backend", "cpu"}}}};
  const std::string path = write_job("measure", job);
  auto r = worker({"plan", path, "--measure", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["steps"], 3);
  EXPECT_TRUE(out["plan"]["fits"].get<bool>());
  const json& v = out["versus_plan"];
  EXPECT_GT(v["step_s"]["measured"].get<double>(), 0);
  EXPECT_GT(v["step_s"]["ratio"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(v["h2d_bytes"]["ratio"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(v["d2h_bytes"]["ratio"].get<double>(), 1.0);
  EXPECT_TRUE(v["peak_hbm_bytes"]["measured"].is_null());  // the CPU backend has no HBM
  EXPECT_GT(v["peak_dram_bytes"]["measured"].get<double>(), 0);
  // The plan shown is the job's: its ETA is for the job's 1000 steps, not the 3 measured ("ETA
  // 0.17 s" for a 150-step job until it was), and its step time rests on this machine's probe.
  const json& step = out["plan"]["step"];
  EXPECT_EQ(step["total_steps"], 1000);
  EXPECT_DOUBLE_EQ(step["eta_s"].get<double>(), 1000 * step["step_s"].get<double>());
  // Calibrated where the model was held to 25% (up to kCpuCalibratedThreads threads); on a
  // machine of more cores the plan says it is not.
  EXPECT_EQ(step["calibrated"].get<bool>(), std::max(1u, std::thread::hardware_concurrency()) <=
                                                static_cast<unsigned>(kCpuCalibratedThreads));
  EXPECT_GT(out["plan"]["machine"]["cpu_attention_s_per_score"].get<double>(), 0);
  EXPECT_TRUE(fs::is_empty(tmpdir)) << "the throwaway run's folder is removed";
  EXPECT_FALSE(fs::exists(tmp_.path() + "/xdg/spillway/runs.db"))
      << "History does not see the probe";

  r = worker({"plan", path, "--measure", "3"});  // the table
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("measured over 2 steps after the first, against the plan:"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("H2D per step"), std::string::npos) << r.out;
  // The CPU backend's device is its arena in DRAM, and the runtime's memory is in the needs.
  EXPECT_NE(r.out.find("  arena (CPU)  "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("HBM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" runtime = "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("for 1000 steps"), std::string::npos) << r.out;

  // Steps from epochs: the ETA is for the epochs' steps, from the same sequences.
  job["train"]["steps"] = 0;
  job["train"]["epochs"] = 2;
  r = worker({"plan", write_job("measure-epochs", job), "--measure", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json epochs = json::parse(r.out)["plan"]["step"];
  EXPECT_GT(epochs["total_steps"].get<int64_t>(), 100);  // 1.1 MB of text in 8 x 64 tokens
  EXPECT_EQ(epochs["total_steps"].get<int64_t>() % 2, 0);

  r = worker({"plan", path, "--measure", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--measure expects a whole decimal number from 1 to 1000, got '0'"),
            std::string::npos)
      << r.err;
}

// `plan` says where each block's master weights, gradients and AdamW moments live (the HBM
// state tier, placement.hbm_state_blocks): none by default on the CPU backend, the first N when
// asked, and a count that does not fit the device is exit 3 with what to change.
TEST_F(WorkerTest, PlanSaysWhereTheBlocksStateLives) {
  SPILLWAY_REQUIRE_DATA();
  json job = {
      {"name", "state"},
      {"model", {{"path", testing::data_path("models/stories260K")}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 64}}},
      {"train", {{"steps", 10}, {"micro_batch_size", 4}, {"grad_accum", 2}}},
      {"placement", {{"backend", "cpu"}}}};
  auto r = worker({"plan", write_job("state-auto", job)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  state              none on the CPU backend: its device memory is DRAM "
                       "already\n"),
            std::string::npos)
      << r.out;

  job["placement"]["hbm_state_blocks"] = 2;
  const std::string two = write_job("state-two", job);
  r = worker({"plan", two, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json state = json::parse(r.out)["state"];
  const int blocks = state["blocks"];
  EXPECT_EQ(state["hbm_blocks"], 2);
  EXPECT_GT(state["hbm_bytes"].get<uint64_t>(), 0u);
  r = worker({"plan", two});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  state              first 2 of " + std::to_string(blocks) +
                       " blocks in arena (CPU) ("),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("): the embedding and layer 0, as placement.hbm_state_blocks asks; the "
                       "CPU's AdamW updates the other " +
                       std::to_string(blocks - 2) + " while their forward runs\n"),
            std::string::npos)
      << r.out;

  // Every block in a device of 4 MiB: stories260K's state (16 B/param) does not fit beside
  // streaming.
  job["placement"]["hbm_state_blocks"] = blocks;
  job["placement"]["device_memory_bytes"] = 4 << 20;
  r = worker({"plan", write_job("state-too-many", job)});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("does not fit: HBM: streaming needs "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(placement.hbm_state_blocks)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lower placement.hbm_state_blocks to "), std::string::npos) << r.err;
}

// `plan` with placement.devices: on the CPU backend a count of CPU ranks (the data-parallel
// schedule on the host's cores), one line for them and the step's tokens over all; a list of GPUs
// there is exit 3 with what to change. `probe` counts no GPU on the CPU backend.
TEST_F(WorkerTest, PlanSpreadsTheStepOverTheDevices) {
  SPILLWAY_REQUIRE_DATA();
  json job = {
      {"name", "ranks"},
      {"model", {{"path", testing::data_path("models/stories260K")}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 64}}},
      {"train", {{"steps", 10}, {"micro_batch_size", 4}, {"grad_accum", 2}}},
      {"placement", {{"backend", "cpu"}, {"devices", 2}}}};
  const std::string path = write_job("ranks", job);
  auto r = worker({"plan", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  CPU ranks          2, sharing the host's cores\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  tokens per step    1,024 (4 x 2 x 64 x 2 ranks), "), std::string::npos)
      << r.out;
  r = worker({"plan", path, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json plan = json::parse(r.out);
  EXPECT_EQ(plan["devices"]["count"], 2);
  EXPECT_EQ(plan["step"]["tokens"].get<double>(), 1024.0);
  EXPECT_EQ(plan["machine"]["gpus"].get<double>(), 0.0);

  job["placement"]["devices"] = json::array({0, 1});
  r = worker({"plan", write_job("ranks-listed", job)});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("does not fit: placement.devices lists GPUs (GPUs 0, 1) but the run is "
                       "on the CPU backend; set placement.devices to 1"),
            std::string::npos)
      << r.err;

  // GPUs asked for where the backend found none (auto fell back to the CPU): said, not turned
  // into CPU ranks. (Skipped where this machine has a usable GPU.)
  job["placement"]["devices"] = 2;
  job["placement"]["backend"] = "auto";
  r = worker({"plan", write_job("ranks-auto", job), "--json"});
  if (json::parse(r.out, nullptr, false).value("backend", "") == "cpu" || r.exit_code == 3) {
    EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
    EXPECT_NE(r.err.find("placement.devices asks for 2 GPUs, but the run is on the CPU backend "
                         "(no usable GPU); set placement.devices to 1, or placement.backend to "
                         "\"cpu\" for 2 CPU ranks"),
              std::string::npos)
        << r.err;
  }

  r = worker({"probe", "--backend", "cpu", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json probe = json::parse(r.out);
  EXPECT_TRUE(probe["gpus"].is_array());  // the GPUs this machine has (none in CI)
  EXPECT_TRUE(probe["nccl_bus_gbps"].is_null());
}

// `plan --measure` stopped from a terminal (Ctrl-C: SIGINT) or by the app (SIGTERM) mid-run: the
// throwaway run stops at its next layer, its folder in TMPDIR is removed (it was left behind,
// spillway-measure.XXXXXX), one line on stderr says so, and the exit is 0 as for a stopped `train`.
TEST_F(WorkerTest, PlanMeasureStoppedBySignalLeavesNothingBehind) {
  SPILLWAY_REQUIRE_DATA();
  const std::string tmpdir = tmp_.path() + "/t m p";  // a TMPDIR with a space
  fs::create_directories(tmpdir);
  env_.push_back("TMPDIR=" + tmpdir);
  json job = {
      {"name", "measure stopped"},
      {"model", {{"path", testing::data_path("models/stories260K")}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 256}}},
      {"train", {{"steps", 5}, {"micro_batch_size", 8}, {"grad_accum", 2}}},
      {"placement", {{"backend", "cpu"}}}};
  const std::string path = write_job("measure-stopped", job);
  // The complete "step" lines the throwaway run has written so far (its file is being written).
  auto steps_written = [&]() -> int {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(tmpdir, ec)) {
      std::ifstream f(e.path() / "run" / "events.jsonl");
      std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      text.erase(text.find_last_of('\n') == std::string::npos ? 0 : text.find_last_of('\n') + 1);
      for (size_t at = 0; (at = text.find("\"type\":\"step\"", at)) != std::string::npos; ++at) ++n;
    }
    return n;
  };
  for (const int sig : {SIGTERM, SIGINT}) {
    const std::string name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    SCOPED_TRACE(name);
    const bool json_out = sig == SIGTERM;  // as the app runs it
    std::vector<std::string> args = {"plan", path, "--measure", "1000"};
    if (json_out) args.push_back("--json");
    const std::string out = tmp_.path() + "/m.out", err = tmp_.path() + "/m.err";
    const pid_t pid = testing::spawn_worker(args, env_, out, err);
    ASSERT_GT(pid, 0);
    int seen = 0;
    for (int i = 0; i < 6000 && (seen = steps_written()) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_GE(seen, 1) << "no step within a minute: " << testing::slurp(err);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the measure ended before it was stopped";
    const auto t0 = std::chrono::steady_clock::now();
    kill(pid, sig);
    const int code = testing::wait_exit(pid);
    const double stop_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string stderr_text = testing::slurp(err), stdout_text = testing::slurp(out);
    EXPECT_EQ(code, 0) << stderr_text;
    EXPECT_LT(stop_s, 10 * testing::kTimeScale);
    std::printf("%s: stopped %.2f s after the signal, %d steps seen\n", name.c_str(), stop_s, seen);
    // One line: "... stopped by SIGTERM after K of 1000 steps: ...", K at least the steps seen.
    const std::string head = "spillway-worker: plan --measure: stopped by " + name + " after ";
    ASSERT_EQ(stderr_text.rfind(head, 0), 0u) << stderr_text;
    EXPECT_EQ(std::count(stderr_text.begin(), stderr_text.end(), '\n'), 1) << stderr_text;
    const int done = std::atoi(stderr_text.c_str() + head.size());
    EXPECT_GE(done, seen);
    EXPECT_LT(done, 1000);
    EXPECT_EQ(
        stderr_text.substr(head.size()),
        std::to_string(done) + " of 1000 steps: nothing measured; the throwaway run is removed\n");
    if (json_out) {
      const json j = json::parse(stdout_text, nullptr, false);
      ASSERT_TRUE(j.is_object()) << stdout_text;
      EXPECT_EQ(j["status"], "stopped");
      EXPECT_EQ(j["signal"], name);
      EXPECT_EQ(j["step"], done);
      EXPECT_EQ(j["steps"], 1000);
      EXPECT_FALSE(j.contains("figures"));
    }
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(tmpdir))
      left.push_back(e.path().filename().string());
    EXPECT_TRUE(left.empty()) << "left in TMPDIR: " << (left.empty() ? "" : left.front());
    EXPECT_FALSE(fs::exists(tmp_.path() + "/xdg/spillway/runs.db"))
        << "History does not see the probe";
  }
}

// A run that diverges stops at the first non-finite loss with a clear error, keeps its last
// checkpoint and exports nothing (a learning rate of 1e300 used to train on and export NaN
// weights, exit 0). A seq_len past the model's positions, and a job whose memory does not fit,
// are refused before anything is allocated, as `plan` refuses them.
TEST_F(WorkerTest, DivergedOrUnfitRunsStopWithClearErrors) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run_dir = tmp_.path() + "/diverge";
  json job = {
      {"name", "diverge"},
      {"model", {{"path", testing::data_path("models/stories260K")}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 64}}},
      // Weight decay 1 at lr 10 multiplies the weights by -9 a step, so the loss overflows within
      // a few steps whatever the compiler's rounding (lr 10 alone stayed finite for 40 steps in a
      // clang build: the trajectory is chaotic).
      {"train",
       {{"steps", 40},
        {"micro_batch_size", 4},
        {"lr", 10},
        {"weight_decay", 1.0},
        {"clip_grad_norm", 0},
        {"checkpoint_every", 2}}},
      {"output", {{"run_dir", run_dir}}}};
  auto r = worker({"train", write_job("diverge", job)});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("diverged: loss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lower train.lr (10)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(run_dir + "/export"));
  ASSERT_TRUE(fs::exists(run_dir + "/checkpoints"));
  EXPECT_FALSE(fs::is_empty(run_dir + "/checkpoints")) << "the last good checkpoint stays";

  json long_seq = job;
  long_seq["data"]["seq_len"] = 1024;  // stories260K has 512 positions
  long_seq["output"]["run_dir"] = tmp_.path() + "/long";
  r = worker({"train", write_job("long", long_seq)});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("data.seq_len 1024 is beyond the model's max_position_embeddings 512"),
            std::string::npos)
      << r.err;
  r = worker({"plan", write_job("long", long_seq)});
  EXPECT_EQ(r.exit_code, 3) << r.err;

  json small_dram = job;
  small_dram["placement"] = {
      {"dram_cap_bytes", 1 << 20}};  // 1 MiB for a 0.26M-parameter model's 4 MB of state
  small_dram["output"]["run_dir"] = tmp_.path() + "/small";
  r = worker({"train", write_job("small", small_dram)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("the job does not fit: DRAM: needs "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" MB but 1.05 MB is available"), std::string::npos) << r.err;
}

TEST_F(WorkerTest, BadInputGivesClearErrors) {
  SPILLWAY_REQUIRE_DATA();
  const std::string model = testing::data_path("models/stories260K");
  const std::string text = testing::data_path("datasets/tinyshakespeare/input.txt");
  json good = {{"name", "bad"},
               {"model", {{"path", model}}},
               {"data", {{"train", text}, {"seq_len", 32}}},
               {"train", {{"steps", 1}}},
               {"output", {{"run_dir", tmp_.path() + "/never"}}}};

  json wrong_key = good;
  wrong_key["train"]["learning_rate"] = 1e-3;
  auto r = worker({"train", write_job("wrong_key", wrong_key)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown key train.learning_rate"), std::string::npos) << r.err;

  json wrong_type = good;
  wrong_type["train"]["lr"] = "fast";
  r = worker({"train", write_job("wrong_type", wrong_type)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("train.lr: expected a number"), std::string::npos) << r.err;

  json missing_model = good;
  missing_model["model"]["path"] = tmp_.path() + "/no-such-model";
  r = worker({"train", write_job("missing_model", missing_model)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no-such-model"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;

  std::ofstream(tmp_.path() + "/bad.jsonl") << "{\"text\": \"fine\"}\n{\"text\": \"broken\n";
  json bad_line = good;
  bad_line["data"]["train"] = tmp_.path() + "/bad.jsonl";
  r = worker({"train", write_job("bad_line", bad_line)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("bad.jsonl:2"), std::string::npos) << r.err;

  json unwritable = good;
  unwritable["output"]["run_dir"] = "/proc/spillway-cannot-write-here";
  r = worker({"train", write_job("unwritable", unwritable)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot write the run folder"), std::string::npos) << r.err;

  // A job nested 100,000 levels deep overflowed the stack in plan and train; now a clear error.
  const std::string deep_job = tmp_.path() + "/deep.json";
  std::ofstream(deep_job) << "{\"name\": \"deep\", \"train\": {\"lr\": " << std::string(100000, '[')
                          << std::string(100000, ']') << "}}";
  for (const char* command : {"plan", "train"}) {
    r = worker({command, deep_job});
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_NE(r.err.find("deep.json: JSON nested 100002 levels deep (at most 100)"),
              std::string::npos)
        << r.err;
  }

  // None of them left a run folder behind.
  EXPECT_FALSE(fs::exists(tmp_.path() + "/never"));
}

// A resumed run is the same run (issue 13 point 2): resumed from an earlier checkpoint, from a
// terminal with the job as it was written (no run folder in it), it keeps its row, its folder, its
// tags and notes, and its metrics up to the checkpoint; the steps after it are replaced, not
// doubled. The run folder is named by the run id (issue 12 point 4), the id the launcher gives
// with --run-id when it gives one.
TEST_F(WorkerTest, AResumedRunIsTheSameRunInItsFolder) {
  SPILLWAY_REQUIRE_DATA();
  json job = {
      {"name", "same run"},
      {"model", {{"path", testing::data_path("models/stories260K")}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 32}}},
      {"train",
       {{"steps", 6}, {"micro_batch_size", 2}, {"checkpoint_every", 2}, {"keep_checkpoints", 5}}}};
  const std::string job_path = write_job("same-run", job);
  auto r = worker({"train", job_path, "--json", "--run-id", "20261125-230000-abcdef"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json started = json::parse(r.out.substr(0, r.out.find('\n')));
  const std::string run_dir = tmp_.path() + "/xdg/spillway/runs/20261125-230000-abcdef";
  EXPECT_EQ(started["run_id"], "20261125-230000-abcdef");
  EXPECT_EQ(started["run_dir"], run_dir);
  auto store = RunStore::open(tmp_.path() + "/xdg/spillway/runs.db");
  ASSERT_TRUE(store.ok());
  const std::string id = "20261125-230000-abcdef";
  ASSERT_TRUE((*store)->set_tags(id, {"keep"}).ok());
  ASSERT_TRUE((*store)->set_notes(id, "before the resume").ok());
  const auto first = *(*store)->metrics(id);
  ASSERT_EQ(first.size(), 6u);

  // Resumed from step 2 as a terminal user does: the job file as written, the run's checkpoint.
  r = worker({"train", job_path, "--resume", run_dir + "/checkpoints/step-000002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("run " + id + " in " + run_dir), std::string::npos) << r.out;
  const auto runs = *(*store)->list_runs();
  ASSERT_EQ(runs.size(), 1u) << "a resume adds no History row";
  EXPECT_EQ(runs[0].id, id);
  EXPECT_EQ(runs[0].status, RunStatus::kCompleted);
  EXPECT_EQ(runs[0].tags, std::vector<std::string>{"keep"});
  EXPECT_EQ(runs[0].notes, "before the resume");
  EXPECT_EQ(runs[0].final_step, 6);
  const auto metrics = *(*store)->metrics(id);
  ASSERT_EQ(metrics.size(), 6u) << "steps 3..6 replaced, not doubled";
  for (int s = 0; s < 6; ++s) EXPECT_EQ(metrics[s].step, s + 1);
  EXPECT_EQ(*metrics[1].loss, *first[1].loss) << "step 2, before the resume, stays";
  // The resumed steps are the same math (bit-exact resume), written again with later times.
  EXPECT_NEAR(*metrics[5].loss, *first[5].loss, 1e-6);
  EXPECT_GT(*metrics[5].t_s, *first[5].t_s);
  // The first run's checkpoints after step 2 are set aside, whole, and the resumed run's own take
  // their place; the log says where they went.
  std::vector<std::string> names;
  for (const std::string& dir : list_checkpoints(run_dir + "/checkpoints"))
    names.push_back(fs::path(dir).filename());
  EXPECT_EQ(names, (std::vector<std::string>{"step-000002", "step-000004", "step-000006"}));
  std::string aside;
  for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints"))
    if (e.path().filename().string().starts_with("replaced-")) aside = e.path().string();
  ASSERT_FALSE(aside.empty());
  EXPECT_TRUE(fs::exists(aside + "/step-000004/model.safetensors"));
  EXPECT_TRUE(fs::exists(aside + "/step-000006/model.safetensors"));
  bool logged = false;
  for (const json& e : of_type(read_events(run_dir), "log"))
    logged |=
        e["message"] ==
        "the checkpoints after step 2 (steps this resume trains again) were moved to " + aside;
  EXPECT_TRUE(logged);
  EXPECT_FALSE(fs::exists(tmp_.path() + "/xdg/spillway/runs") &&
               std::distance(fs::directory_iterator(tmp_.path() + "/xdg/spillway/runs"), {}) != 1)
      << "no second folder";

  // A second launch of the same job without a run id is a new run in its own folder.
  r = worker({"train", job_path, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json second = json::parse(r.out.substr(0, r.out.find('\n')));
  EXPECT_NE(second["run_id"], id);
  EXPECT_EQ(second["run_dir"],
            tmp_.path() + "/xdg/spillway/runs/" + second["run_id"].get<std::string>());
  // A run id already taken is refused for a new run, and a run id that is not a folder name at all.
  r = worker({"train", job_path, "--run-id", id});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(
      r.err.find(
          "run " + id + " is in History already (its folder " + run_dir +
          "): resume it from one of its checkpoints (--resume), or start a new run without its id"),
      std::string::npos)
      << r.err;
  EXPECT_EQ((*store)->get_run(id)->status, RunStatus::kCompleted) << "the run named is left alone";
  r = worker({"train", job_path, "--run-id", "../elsewhere"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--run-id '../elsewhere': a run id names the run's folder"),
            std::string::npos)
      << r.err;
  // The refused launch is in History as failed, with no folder (it named another run's).
  const auto all = *(*store)->list_runs();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].status, RunStatus::kFailed);
  EXPECT_EQ(all[0].run_dir, "");
  EXPECT_NE(all[0].error_message.find("is in History already"), std::string::npos)
      << all[0].error_message;
}

// A resume that fails (issue 13: it left no record) fails its run with the worker's message; the
// run keeps its steps and checkpoints and resumes from another checkpoint.
TEST_F(WorkerTest, AFailedResumeIsRecordedOnItsRun) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run_dir = tmp_.path() + "/resumable";
  json job = {
      {"name", "resumable"},
      {"model", {{"path", testing::data_path("models/stories260K")}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 32}}},
      {"train",
       {{"steps", 4}, {"micro_batch_size", 2}, {"checkpoint_every", 2}, {"keep_checkpoints", 5}}},
      {"output", {{"run_dir", run_dir}}}};
  const std::string job_path = write_job("resumable", job);
  auto r = worker({"train", job_path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto store = RunStore::open(tmp_.path() + "/xdg/spillway/runs.db");
  ASSERT_TRUE(store.ok());
  const std::string id = (*store)->list_runs()->at(0).id;
  // The checkpoint at step 2 loses its weights.
  fs::remove(run_dir + "/checkpoints/step-000002/model.safetensors");
  r = worker({"train", job_path, "--resume", run_dir + "/checkpoints/step-000002", "--run-id", id});
  ASSERT_NE(r.exit_code, 0);
  const std::string message =
      r.err.substr(std::string("spillway-worker: ").size(),
                   r.err.find('\n') - std::string("spillway-worker: ").size());
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << r.err;
  auto runs = *(*store)->list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, RunStatus::kFailed);
  EXPECT_EQ(runs[0].error_message,
            "could not resume from " + run_dir + "/checkpoints/step-000002: " + message);
  EXPECT_EQ((*store)->metrics(id)->size(), 4u);
  EXPECT_EQ(runs[0].final_step, 4);

  // The same from a terminal, without the run id: the checkpoint's folder names the run.
  r = worker({"train", job_path, "--resume", run_dir + "/checkpoints/step-000002/"});
  ASSERT_NE(r.exit_code, 0);
  EXPECT_EQ((*store)->list_runs()->size(), 1u);

  // From its other checkpoint it goes on, and the failure is gone.
  r = worker({"train", job_path, "--resume", run_dir + "/checkpoints/step-000004"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  runs = *(*store)->list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, RunStatus::kCompleted);
  EXPECT_EQ(runs[0].error_message, "");
}

// A job file the worker cannot read (issue 13: the GUI showed the failure, History nothing) is a
// failed run when the launch names a run: the GUI's --run-id gives the folder it watches. A job
// typed wrong on a terminal, naming no run, is answered there and not kept.
TEST_F(WorkerTest, AJobItCannotReadIsAFailedRunWhenTheLaunchNamesOne) {
  const std::string jobs = tmp_.path() + "/jobs/20261125-gui job";
  fs::create_directories(jobs);
  std::ofstream(jobs + "/job.json")
      << R"({"name": "typo", "model": {"path": "model"}, "data": {"train": "x.txt"},
                                          "train": {"learning_rate": 0.001}})";
  auto r = worker({"train", jobs + "/job.json", "--json", "--run-id", "20261125-230001-000001"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const json reply = json::parse(r.out.substr(0, r.out.find('\n')));
  const std::string message = reply["message"].get<std::string>();
  EXPECT_NE(message.find("unknown key train.learning_rate"), std::string::npos) << message;
  auto store = RunStore::open(tmp_.path() + "/xdg/spillway/runs.db");
  ASSERT_TRUE(store.ok());
  auto run = (*store)->get_run("20261125-230001-000001");
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(run->status, RunStatus::kFailed);
  EXPECT_EQ(run->name, "typo");
  EXPECT_EQ(run->model_path, jobs + "/model");  // relative to the job file, as the worker reads it
  EXPECT_EQ(run->dataset, jobs + "/x.txt");
  EXPECT_NE(run->error_message.find(message), std::string::npos) << run->error_message;
  EXPECT_EQ(run->run_dir, tmp_.path() + "/xdg/spillway/runs/20261125-230001-000001");
  EXPECT_FALSE(fs::exists(run->run_dir)) << "no folder is made for a run that never began";

  // Not JSON at all: named by its folder.
  std::ofstream(jobs + "/job.json", std::ios::trunc) << "{\"name\": ";
  r = worker({"train", jobs + "/job.json", "--run-id", "20261125-230001-000002"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  run = (*store)->get_run("20261125-230001-000002");
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(run->name, "20261125-gui job");
  EXPECT_NE(run->error_message.find("not valid JSON"), std::string::npos) << run->error_message;

  // A terminal's mistyped job, naming no run: no row.
  r = worker({"train", tmp_.path() + "/no-such-job.json"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ((*store)->list_runs()->size(), 2u);
}

// generate --chat: the prompt as a user turn in the model's template with the assistant's turn
// opened (what the app's Try it sends), --tokenizer for a folder without one, and bad values
// refused.
TEST_F(WorkerTest, GenerateAnswersAsAChatTurn) {
  SPILLWAY_REQUIRE_DATA();
  auto llama = worker({"generate", "--model", testing::data_path("models/stories260K"), "--prompt",
                       "Name three colours.", "--chat", "auto", "--max-new-tokens", "4", "--json"});
  ASSERT_EQ(llama.exit_code, 0) << llama.err;
  const json l = json::parse(llama.out);
  EXPECT_EQ(l["template"], "llama-2");  // stories260K's family; its tokenizer names no template
  EXPECT_EQ(l["prompt_text"], "[INST] Name three colours. [/INST]");
  EXPECT_EQ(l["ids"][0], 1);  // BOS first, as training renders it
  EXPECT_LE(l["new_tokens"].get<int>(), 4);

  // A model folder without a tokenizer (as a checkpoint is), the tokenizer given; ChatML by name.
  const std::string bare = bare_model(tmp_.path());
  auto chatml =
      worker({"generate", "--model", bare, "--tokenizer", testing::data_path("models/stories260K"),
              "--prompt", "hi", "--chat", "chatml", "--max-new-tokens", "2", "--json"});
  ASSERT_EQ(chatml.exit_code, 0) << chatml.err;
  const json c = json::parse(chatml.out);
  EXPECT_EQ(c["template"], "chatml");
  EXPECT_EQ(c["template_reason"], "set to chatml");
  EXPECT_EQ(c["prompt_text"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

  auto without = worker({"generate", "--model", bare, "--prompt", "hi"});
  EXPECT_NE(without.exit_code, 0);  // no tokenizer in the folder and none given
  auto bad = worker({"generate", "--model", testing::data_path("models/stories260K"), "--prompt",
                     "x", "--chat", "vicuna", "--json"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--chat: unknown chat template 'vicuna'"), std::string::npos) << bad.out;
  auto top = worker({"generate", "--model", testing::data_path("models/stories260K"), "--prompt",
                     "x", "--top-p", "0"});
  EXPECT_EQ(top.exit_code, 2);
  EXPECT_NE(top.err.find("--top-p must be in (0, 1]"), std::string::npos) << top.err;
}

// `COMMAND --help` (or -h), anywhere an option may stand, prints that command's usage and exits 0;
// it was refused as an unknown option. A value given to a flag (--json=x) was silently dropped;
// now it is refused by name with exit 2, before the command does anything.
TEST_F(WorkerTest, HelpAfterACommandAndAValueGivenToAFlag) {
  for (const char* command : {"train", "plan", "eval", "generate", "export", "inspect", "probe",
                              "bench", "tokenize", "job-keys"}) {
    for (const char* help : {"--help", "-h"}) {
      auto r = worker({command, help});
      EXPECT_EQ(r.exit_code, 0) << command << " " << help << ": " << r.err;
      EXPECT_EQ(r.out.rfind(std::string("usage: spillway-worker ") + command + " ", 0), 0u)
          << r.out;
      EXPECT_EQ(r.err, "");
    }
  }
  // After other options too, and it runs nothing (the model does not exist).
  auto r = worker({"generate", "--model", tmp_.path() + "/no-such-model", "--prompt", "hi", "-h"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("generate --model DIR --prompt TEXT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Continues a prompt"), std::string::npos) << r.out;
  // As an option's value it is that value: a prompt "--help" is generated from, not help.
  SPILLWAY_REQUIRE_DATA();
  r = worker({"generate", "--model", testing::data_path("models/stories260K"), "--prompt", "--help",
              "--max-new-tokens", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("usage:"), std::string::npos) << r.out;
  EXPECT_LE(json::parse(r.out)["new_tokens"].get<int>(), 2);

  r = worker({"inspect", "--model", testing::data_path("models/stories260K"), "--json=x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("option --json takes no value, got '--json=x'; write --json alone"),
            std::string::npos)
      << r.err;
  r = worker({"job-keys", "--markdown=yes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("option --markdown takes no value"), std::string::npos) << r.err;
  // A value option still takes its value inline.
  r = worker({"inspect", "--model=" + testing::data_path("models/stories260K"), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out).is_object());
}

// The built-in job's model (model.init llama-byte-5m, builtin:bytes) as Try it serves it: its
// latest checkpoint with the job's tokenizer. A byte model's completion may hold bytes that are
// not UTF-8 (here: the greedy continuation of a model two steps from random weights, 0x9E first);
// --json ended in "internal error: invalid UTF-8 byte" and exit 1. Now each such byte is U+FFFD
// in the JSON, and the plain output writes the bytes as they are.
TEST_F(WorkerTest, GenerateFromAByteModelCheckpointWritesValidJson) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run = tmp_.path() + "/bytes run";
  json job = {
      {"name", "bytes"},
      {"model", {{"init", "llama-byte-5m"}, {"tokenizer", "builtin:bytes"}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 32}}},
      {"train", {{"steps", 2}, {"micro_batch_size", 1}, {"eval_batches", 1}}},
      {"placement", {{"backend", "cpu"}}},
      {"output", {{"run_dir", run}}}};
  auto r = worker({"train", write_job("bytes", job)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string ckpt = run + "/checkpoints/step-000002";
  ASSERT_TRUE(fs::exists(ckpt));
  r = worker({"generate", "--model", ckpt, "--tokenizer", "builtin:bytes", "--prompt",
              "ROMEO:", "--max-new-tokens", "5", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["new_tokens"], 5);
  const std::string completion = j["completion"];
  EXPECT_NE(completion.find("\xEF\xBF\xBD"), std::string::npos) << r.out;  // U+FFFD
  r = worker({"generate", "--model", ckpt, "--tokenizer", "builtin:bytes", "--prompt",
              "ROMEO:", "--max-new-tokens", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("ROMEO:", 0), 0u) << r.out;
}

// Numbers on the command line are decimal where a count or a rate is expected: strtod read
// "--temperature 0x10" as 16, "--max-new-tokens 1e2" as 100 and " 5" as 5 (issue 28 point 3).
TEST_F(WorkerTest, NumbersOnTheCommandLineAreDecimal) {
  SPILLWAY_REQUIRE_DATA();
  const std::string model = testing::data_path("models/stories260K");
  for (const auto& [option, value] :
       std::vector<std::pair<std::string, std::string>>{{"--temperature", "0x10"},
                                                        {"--temperature", "inf"},
                                                        {"--top-p", " 0.5"},
                                                        {"--max-new-tokens", "1e2"},
                                                        {"--max-new-tokens", "0x10"},
                                                        {"--max-new-tokens", "+5"},
                                                        {"--seed", "5.0"}}) {
    SCOPED_TRACE(option + " " + value);
    const auto r = worker({"generate", "--model", model, "--prompt", "Once", option, value});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("option " + option + " expects a"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("decimal number"), std::string::npos) << r.err;
  }
  // Plain decimals are read as before.
  const auto ok = worker({"generate", "--model", model, "--prompt", "Once", "--temperature", "0.5",
                          "--max-new-tokens", "4", "--seed", "7", "--json"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  const auto bench = worker({"bench", "--model", "stories260K", "--micro-batch", "0x2"});
  EXPECT_EQ(bench.exit_code, 2) << bench.err;
  EXPECT_NE(bench.err.find("--micro-batch expects a whole decimal number"), std::string::npos)
      << bench.err;
}

// A prompt that fills the model's positions leaves no room for a new token: generate says so
// (exit 2) instead of answering nothing with exit 0.
TEST_F(WorkerTest, GenerateSaysWhenThePromptLeavesNoRoom) {
  SPILLWAY_REQUIRE_DATA();
  std::string prompt;
  for (int i = 0; i < 600; ++i) prompt += "Once upon a time ";  // > 512 positions of stories260K
  const auto r =
      worker({"generate", "--model", testing::data_path("models/stories260K"), "--prompt", prompt});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no room is left for new tokens; shorten the prompt"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("max_position_embeddings 512"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace spillway
