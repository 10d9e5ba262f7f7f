#include "history/run-store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "telemetry/telemetry-sampler.h"
#include "test-data.h"

namespace spillway {
namespace {

std::unique_ptr<RunStore> open_store(const std::string& path, RunStoreOptions opt = {}) {
  auto store = RunStore::open(path, opt);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  return store.ok() ? std::move(store).value() : nullptr;
}

TEST(RunStore, FullLifecycle) {
  testing::TempDir dir;
  auto store = open_store(dir.file("runs.db"));
  ASSERT_TRUE(store);

  RunInfo info;
  info.name = "llama lora test";
  info.job_json = R"({"model":"/m","steps":3})";
  info.model_name = "stories260K";
  info.dataset = "tiny.jsonl";
  info.dataset_hash = "abc123";
  info.hardware_json = R"({"gpu":"none"})";
  info.run_dir = dir.file("runs/x");
  info.tags = {"baseline", "cpu"};
  auto id = store->create_run(info);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(id->size(), std::string("20250131-142501-3fa9c2").size());

  auto run = store->get_run(*id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kRunning);
  EXPECT_EQ(run->pid, static_cast<std::int64_t>(getpid()));  // the calling process was recorded
  EXPECT_TRUE(run->started_at.has_value());
  EXPECT_FALSE(run->ended_at.has_value());
  EXPECT_GT(run->created_at, 1.6e9);
  EXPECT_EQ(run->job_json, info.job_json);
  EXPECT_EQ(run->tags, info.tags);

  for (int step = 1; step <= 3; ++step) {
    MetricRow m;
    m.step = step;
    m.loss = 3.0 - 0.5 * step;
    m.lr = 1e-4;
    m.tokens = 256 * step;
    m.tokens_per_s = 1000.0;
    m.t_s = 0.5 * step;
    ASSERT_TRUE(store->add_metric(*id, m).ok());
  }
  // A resumed run redoes step 3: replaced, not duplicated.
  MetricRow redo;
  redo.step = 3;
  redo.loss = 1.25;
  ASSERT_TRUE(store->add_metric(*id, redo).ok());
  ASSERT_TRUE(store->add_event(*id, 0.1, "log", R"({"level":"info","message":"hi"})").ok());
  ASSERT_TRUE(store->add_event(*id, 0.2, "state", R"({"state":"training"})").ok());
  ASSERT_TRUE(store->add_checkpoint(*id, {2, dir.file("runs/x/checkpoints/2"), 0, 4096}).ok());
  ASSERT_TRUE(store->add_eval(*id, {2, 2.0, std::exp(2.0), 1.0}).ok());
  ASSERT_TRUE(store->update_status(*id, RunStatus::kRunning).ok());

  FinalFigures fin;
  fin.final_loss = 1.25;
  fin.final_step = 3;
  fin.tokens = 768;
  ASSERT_TRUE(store->finish_run(*id, RunStatus::kCompleted, fin).ok());

  run = store->get_run(*id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kCompleted);
  ASSERT_TRUE(run->ended_at.has_value());
  EXPECT_GE(*run->ended_at, *run->started_at);
  EXPECT_EQ(run->final_loss, 1.25);
  EXPECT_EQ(run->final_step, 3);
  EXPECT_EQ(run->tokens, 768);

  auto metrics = store->metrics(*id);
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->size(), 3u);
  EXPECT_EQ((*metrics)[0].step, 1);
  EXPECT_DOUBLE_EQ(*(*metrics)[0].loss, 2.5);
  EXPECT_DOUBLE_EQ(*(*metrics)[0].lr, 1e-4);
  EXPECT_EQ(*(*metrics)[1].tokens, 512);
  EXPECT_FALSE((*metrics)[0].grad_norm.has_value());  // never given: absent, not 0
  EXPECT_DOUBLE_EQ(*(*metrics)[2].loss, 1.25);
  EXPECT_FALSE((*metrics)[2].lr.has_value());

  auto events = store->events(*id);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].type, "log");
  auto states = store->events(*id, "state");
  ASSERT_TRUE(states.ok());
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ(nlohmann::json::parse((*states)[0].json)["state"], "training");

  auto ckpts = store->checkpoints(*id);
  ASSERT_TRUE(ckpts.ok());
  ASSERT_EQ(ckpts->size(), 1u);
  EXPECT_EQ((*ckpts)[0].step, 2);
  EXPECT_EQ((*ckpts)[0].bytes, 4096);
  EXPECT_GT((*ckpts)[0].created_at, 1.6e9);
  auto evals = store->evals(*id);
  ASSERT_TRUE(evals.ok());
  ASSERT_EQ(evals->size(), 1u);
  EXPECT_NEAR(*(*evals)[0].perplexity, std::exp(2.0), 1e-9);

  // User edits.
  ASSERT_TRUE(store->rename(*id, "renamed").ok());
  ASSERT_TRUE(store->set_notes(*id, "lr too high?").ok());
  ASSERT_TRUE(store->set_tags(*id, {"keep"}).ok());
  run = store->get_run(*id);
  EXPECT_EQ(run->name, "renamed");
  EXPECT_EQ(run->notes, "lr too high?");
  EXPECT_EQ(run->tags, std::vector<std::string>{"keep"});

  // Deletion removes the child rows too.
  ASSERT_TRUE(store->delete_run(*id).ok());
  EXPECT_EQ(store->get_run(*id).status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(store->metrics(*id)->empty());
  EXPECT_TRUE(store->events(*id)->empty());
  EXPECT_TRUE(store->checkpoints(*id)->empty());
  EXPECT_EQ(store->delete_run(*id).code(), ErrorCode::kNotFound);
}

TEST(RunStore, UnknownRunIsNotFound) {
  auto store = open_store(":memory:");
  ASSERT_TRUE(store);
  EXPECT_EQ(store->rename("nope", "x").code(), ErrorCode::kNotFound);
  EXPECT_EQ(store->update_status("nope", RunStatus::kFailed).code(), ErrorCode::kNotFound);
  EXPECT_EQ(store->finish_run("nope", RunStatus::kFailed).code(), ErrorCode::kNotFound);
  // Child rows of an unknown run violate the foreign key.
  MetricRow m;
  m.step = 1;
  EXPECT_FALSE(store->add_metric("nope", m).ok());
}

TEST(RunStore, StepFiguresRoundTrip) {
  auto store = open_store(":memory:");
  ASSERT_TRUE(store);
  RunInfo info;
  info.status = RunStatus::kCompleted;
  auto id = store->create_run(info);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(store->get_run(*id)->predicted_json, "{}");  // until the run has trained a step
  ASSERT_TRUE(store->set_step_figures(*id, R"({"step_s":6.41})", R"({"step_s":6.46})").ok());
  auto run = store->get_run(*id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->predicted_json, R"({"step_s":6.41})");
  EXPECT_EQ(run->measured_json, R"({"step_s":6.46})");
  EXPECT_EQ(store->set_step_figures("nope", "{}", "{}").code(), ErrorCode::kNotFound);
}

TEST(RunStore, DuplicateIdIsRejected) {
  auto store = open_store(":memory:");
  ASSERT_TRUE(store);
  RunInfo info;
  info.id = "fixed-id";
  info.status = RunStatus::kCompleted;
  ASSERT_TRUE(store->create_run(info).ok());
  auto again = store->create_run(info);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), ErrorCode::kInvalidArgument);
}

TEST(RunStore, SamplesAreDownsampledAndRoundTrip) {
  testing::TempDir dir;
  auto store = open_store(dir.file("runs.db"));
  ASSERT_TRUE(store);
  auto id = store->create_run(RunInfo{});
  ASSERT_TRUE(id.ok());
  int stored = 0;
  for (int i = 0; i < 50; ++i) {  // 5 s at 10 Hz
    double t = 0.1 * i;
    nlohmann::json s = {{"rss_bytes", 1000 + i}, {"links", {{"h2d_gbps", 0.5 * i}}}};
    auto r = store->add_sample(*id, t, s.dump());
    ASSERT_TRUE(r.ok());
    stored += *r ? 1 : 0;
  }
  EXPECT_GE(stored, 4);
  EXPECT_LE(stored, 6);
  auto samples = store->samples(*id);
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(static_cast<int>(samples->size()), stored);
  EXPECT_DOUBLE_EQ((*samples)[0].t_s, 0.0);
  auto first = nlohmann::json::parse((*samples)[0].json);
  EXPECT_EQ(first["rss_bytes"], 1000);
  for (size_t i = 1; i < samples->size(); ++i) {
    EXPECT_GE((*samples)[i].t_s - (*samples)[i - 1].t_s, 1.0 - 1e-9);
  }
  // A t before the last stored one is a new time base (resume): stored.
  auto r = store->add_sample(*id, 0.05, "{}");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
}

TEST(RunStore, ListFilters) {
  auto store = open_store(":memory:");
  ASSERT_TRUE(store);
  auto make = [&](const char* name, RunStatus st, const char* model, std::vector<std::string> tags,
                  double t) {
    RunInfo r;
    r.name = name;
    r.status = st;
    r.model_name = model;
    r.tags = std::move(tags);
    r.created_at = t;
    auto id = store->create_run(r);
    EXPECT_TRUE(id.ok());
    return *id;
  };
  make("alpha 100%", RunStatus::kCompleted, "llama", {"a", "b"}, 1000);
  make("beta", RunStatus::kFailed, "qwen", {"b"}, 2000);
  make("gamma", RunStatus::kCompleted, "qwen", {}, 3000);

  auto all = store->list_runs();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].name, "gamma");  // newest first

  RunFilter f;
  f.status = RunStatus::kCompleted;
  EXPECT_EQ(store->list_runs(f)->size(), 2u);
  f = {};
  f.model_name = "qwen";
  EXPECT_EQ(store->list_runs(f)->size(), 2u);
  f = {};
  f.tag = "b";
  EXPECT_EQ(store->list_runs(f)->size(), 2u);
  f.tag = "a";
  EXPECT_EQ(store->list_runs(f)->size(), 1u);
  f = {};
  f.text = "100%";  // % is matched literally
  auto hits = store->list_runs(f);
  ASSERT_EQ(hits->size(), 1u);
  EXPECT_EQ((*hits)[0].name, "alpha 100%");
  f.text = "ETA";  // case-insensitive: matches "beta"
  EXPECT_EQ(store->list_runs(f)->size(), 1u);
  f = {};
  f.limit = 2;
  f.offset = 1;
  auto page = store->list_runs(f);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].name, "beta");
}

TEST(RunStore, OwnRunningRunSurvivesReopen) {
  testing::TempDir dir;
  std::string id;
  {
    auto store = open_store(dir.file("runs.db"));
    ASSERT_TRUE(store);
    auto r = store->create_run(RunInfo{});
    ASSERT_TRUE(r.ok());
    id = *r;
  }
  auto store = open_store(dir.file("runs.db"));
  ASSERT_TRUE(store);
  EXPECT_EQ(store->get_run(id)->status, RunStatus::kRunning);
  auto n = store->reconcile();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0);
}

TEST(RunStore, TwoConnectionsShareTheFile) {
  // The worker writes while the GUI reads: two connections, WAL.
  testing::TempDir dir;
  auto worker = open_store(dir.file("runs.db"));
  auto gui = open_store(dir.file("runs.db"));
  ASSERT_TRUE(worker && gui);
  auto id = worker->create_run(RunInfo{});
  ASSERT_TRUE(id.ok());
  std::vector<MetricRow> rows;
  for (int i = 0; i < 100; ++i) {
    MetricRow m;
    m.step = i;
    m.loss = 1.0 / (i + 1);
    rows.push_back(m);
  }
  ASSERT_TRUE(worker->add_metrics(*id, rows).ok());
  auto seen = gui->metrics(*id);
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->size(), 100u);
  ASSERT_TRUE(gui->set_notes(*id, "from gui").ok());
  EXPECT_EQ(worker->get_run(*id)->notes, "from gui");
}

TEST(RunStore, DefaultPathsFollowXdg) {
  const char* old_xdg = std::getenv("XDG_DATA_HOME");
  std::string saved = old_xdg ? old_xdg : "";
  setenv("XDG_DATA_HOME", "/some/xdg", 1);
  EXPECT_EQ(*RunStore::default_db_path(), "/some/xdg/spillway/runs.db");
  EXPECT_EQ(*RunStore::default_runs_dir(), "/some/xdg/spillway/runs");
  setenv("XDG_DATA_HOME", "relative/ignored", 1);  // the XDG spec says relative paths are invalid
  auto p = RunStore::default_db_path();
  ASSERT_TRUE(p.ok());
  EXPECT_NE(p->find("/.local/share/spillway/runs.db"), std::string::npos) << *p;
  if (old_xdg) {
    setenv("XDG_DATA_HOME", saved.c_str(), 1);
  } else {
    unsetenv("XDG_DATA_HOME");
  }
}

TEST(RunStore, SamplerFeedsStoreThroughCallback) {
  testing::TempDir dir;
  auto store = open_store(dir.file("runs.db"));
  ASSERT_TRUE(store);
  auto id = store->create_run(RunInfo{});
  ASSERT_TRUE(id.ok());
  TierCounters counters;
  TelemetrySamplerOptions opt;
  opt.callback_interval_s = 0.0;  // every sample reaches the callback; the store downsamples
  opt.on_sample = [&](double t, const nlohmann::json& s) {
    (void)store->add_sample(*id, t, s.dump());
  };
  TelemetrySampler sampler(counters, nullptr, opt);
  for (int i = 0; i < 3; ++i) (void)sampler.sample_once();
  auto samples = store->samples(*id);
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 1u);  // three samples within a second: one stored
  EXPECT_TRUE(nlohmann::json::parse((*samples)[0].json).contains("tiers"));
}

}  // namespace
}  // namespace spillway
