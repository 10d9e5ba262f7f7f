// RunRecorder's policy, with runs.db taken away in the middle of a run: another process holds its
// write lock (a GUI, a backup, a second worker), so every write waits out the busy timeout and
// fails. Telemetry is counted and reported once, with what still holds; a checkpoint's record
// fails the run with a message that says which file, what was kept and what to do; events.jsonl
// keeps every line.
#include "history/run-recorder.h"

#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "history/sqlite-util.h"
#include "test-data.h"

namespace spillway {
namespace {

// A step event of `step` with `loss`, the rest 0.
StepEvent step_event(int64_t step, double loss) {
  StepEvent e;
  e.step = step;
  e.loss = loss;
  return e;
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(RunRecorder, LockedDatabaseMidRun) {
  testing::TempDir dir;
  std::vector<std::string> warnings;
  RunRecorderOptions o;
  o.db_path = dir.file("runs.db");
  o.store.busy_timeout_ms = 50;
  o.retry_delay_s = 0.01;
  o.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  RunInfo info;
  info.name = "locked";
  info.run_dir = dir.file("run");
  auto rec = RunRecorder::create(info, o);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  RunRecorder& r = **rec;
  EXPECT_EQ(r.dir(), dir.file("run"));
  ASSERT_TRUE(r.state("training").ok());
  r.step(step_event(1, 2.5), MetricRow{1, 2.5});
  EXPECT_EQ(r.dropped(), 0u);

  // Another connection takes the write lock and keeps it.
  auto other = SqliteDb::open(o.db_path);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other->exec("BEGIN EXCLUSIVE").ok());

  r.step(step_event(2, 2.4), MetricRow{2, 2.4});
  r.step(step_event(3, 2.3), MetricRow{3, 2.3});
  r.sample(1.0, {{"rss_bytes", 1}});
  EXPECT_EQ(r.dropped(), 3u);
  ASSERT_EQ(warnings.size(), 1u) << "reported once";
  EXPECT_NE(warnings[0].find("History (" + o.db_path + ") could not record step 2's metrics"),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("the run goes on, and its events.jsonl keeps every step"),
            std::string::npos)
      << warnings[0];

  // A checkpoint's record is one the run needs: it fails, saying what was kept and what to do.
  Status st = r.checkpoint(3, dir.file("run/checkpoints/step-000003"), 1234, 0.5);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(
      st.message().find("could not record checkpoint " + dir.file("run/checkpoints/step-000003")),
      std::string::npos)
      << st.to_string();
  EXPECT_NE(st.message().find("keeps its checkpoints"), std::string::npos) << st.to_string();
  Status failed = r.fail(st, FinalFigures{});
  EXPECT_EQ(failed.code(), st.code());
  EXPECT_NE(failed.message().find("recording the failure failed too"), std::string::npos)
      << failed.to_string();

  // events.jsonl has every step, the warning, the checkpoint and the failure.
  int steps = 0, warns = 0;
  bool error = false, failed_state = false;
  for (const auto& e : read_lines(dir.file("run/events.jsonl"))) {
    steps += e["type"] == "step";
    warns += e["type"] == "log" && e["level"] == "warn";
    error |= e["type"] == "error";
    failed_state |= e["type"] == "state" && e["state"] == "failed";
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(warns, 1);
  EXPECT_TRUE(error);
  EXPECT_TRUE(failed_state);

  // Once the lock is gone the database takes records again; the first step is there.
  ASSERT_TRUE(other->exec("ROLLBACK").ok());
  r.step(step_event(4, 0), MetricRow{4, 2.2});
  EXPECT_EQ(r.dropped(), 3u);
  auto store = RunStore::open(o.db_path);
  ASSERT_TRUE(store.ok());
  auto metrics = (*store)->metrics(r.id());
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->size(), 2u);
  EXPECT_EQ((*metrics)[0].step, 1);
  EXPECT_EQ((*metrics)[1].step, 4);
}

TEST(RunRecorder, UnwritableRunFolderIsRefusedAtCreate) {
  testing::TempDir dir;
  RunRecorderOptions o;
  o.db_path = dir.file("runs.db");
  RunInfo info;
  info.run_dir = "/proc/spillway-run";  // cannot be created
  auto rec = RunRecorder::create(info, o);
  ASSERT_FALSE(rec.ok());
  EXPECT_NE(rec.status().message().find("cannot write the run folder /proc/spillway-run"),
            std::string::npos)
      << rec.status().to_string();
}

}  // namespace
}  // namespace spillway
