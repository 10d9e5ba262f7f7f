// The fault matrix (issue 15 point 4, README "What survives a fault"): the real worker killed with
// SIGKILL in the middle of a checkpoint, an export and a runs.db write, its run folder's disk
// full, runs.db corrupt, locked by another process or read-only, two workers on one run folder,
// its pinned-memory allocation refused, and more memory asked than it gets. Each row checks the
// message the user sees, that what was saved before is intact and readable, and that resume works
// where it applies.
//
// The kills land at an exact moment through fail points (core/fail-point.h: SPILLWAY_FAIL_POINTS
// makes the worker raise SIGKILL there, as `kill -9` would). A full disk is a real one: a small
// tmpfs in a private mount namespace (skipped where this process may not mount).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/file-util.h"
#include "history/run-folder.h"
#include "history/run-store.h"
#include "history/sqlite-util.h"
#include "model/safetensors.h"
#include "run-files.h"
#include "test-data.h"
#include "worker-process.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using testing::of_type;
using testing::read_events;

constexpr int kKilled = 128 + SIGKILL;

class FaultMatrix : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = tmp_.path() + "/xdg/spillway/runs.db";
    env_ = {"XDG_DATA_HOME=" + tmp_.path() + "/xdg", "OPENBLAS_THREAD_TIMEOUT=4",
            "OPENBLAS_NUM_THREADS=1", "SPILLWAY_FAIL_POINTS="};
  }
  // stories260K on tiny Shakespeare: `steps` steps, a checkpoint every `every`.
  json job(const std::string& run_dir, int steps = 6, int every = 2) const {
    return json{{"name", "fault"},
                {"model", {{"path", testing::data_path("models/stories260K")}}},
                {"data",
                 {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")},
                  {"seq_len", 64},
                  {"seed", 3}}},
                {"train",
                 {{"steps", steps},
                  {"micro_batch_size", 4},
                  {"lr", 1e-3},
                  {"checkpoint_every", every},
                  {"keep_checkpoints", 10},
                  {"eval_every", 0}}},
                {"placement", {{"backend", "cpu"}}},
                {"output", {{"run_dir", run_dir}}}};
  }
  std::string write_job(const std::string& name, const json& j) {
    const std::string path = tmp_.path() + "/" + name + ".json";
    std::ofstream(path) << j.dump(2);
    return path;
  }
  // The worker with SPILLWAY_FAIL_POINTS=`points` ("" for none).
  testing::ProcessResult worker(const std::vector<std::string>& args,
                                const std::string& points = "") {
    auto env = env_;
    env.push_back("SPILLWAY_FAIL_POINTS=" + points);
    return testing::run_worker_process(args, env, tmp_.path());
  }
  std::unique_ptr<RunStore> store() {
    auto s = RunStore::open(db_);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // The runs of runs.db by status name.
  std::map<std::string, int> statuses() {
    std::map<std::string, int> out;
    auto s = store();
    if (!s) return out;
    for (const RunInfo& r : *s->list_runs()) ++out[run_status_name(r.status)];
    return out;
  }

  testing::TempDir tmp_;
  std::string db_;
  std::vector<std::string> env_;
};

// PRAGMA integrity_check of the database at `path`: "ok" when every page and index is sound.
std::string integrity(const std::string& path) {
  auto db = SqliteDb::open(path);
  if (!db.ok()) return db.status().to_string();
  auto st = db->prepare("PRAGMA integrity_check");
  if (!st.ok()) return st.status().to_string();
  auto row = st->step();
  return row.ok() && *row ? st->column_text(0) : "no row";
}

// A checkpoint folder loads as the worker's resume would: its tensors open and its state parses.
void expect_checkpoint_readable(const std::string& dir) {
  for (const std::string& f : {"model.safetensors", "optimizer.safetensors"}) {
    auto t = TensorStore::open(dir + "/" + f);
    EXPECT_TRUE(t.ok()) << dir << "/" << f << ": " << t.status().to_string();
  }
  auto state = read_file(dir + "/trainer_state.json");
  ASSERT_TRUE(state.ok()) << dir;
  EXPECT_TRUE(json::parse(*state, nullptr, false).is_object()) << dir;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// kill -9 in the middle of the second checkpoint (step 4: its weights written, its optimizer state
// not): step 2's checkpoint is whole, the half-written one is never listed and is removed by the
// next writer, the killed run shows as interrupted with its rows, and resume from step 2 finishes
// the run with the same weights as a run never killed.
TEST_F(FaultMatrix, KillDuringCheckpointWrite) {
  SPILLWAY_REQUIRE_DATA();
  const std::string straight = tmp_.path() + "/straight", run = tmp_.path() + "/run";
  ASSERT_EQ(worker({"train", write_job("straight", job(straight))}).exit_code, 0);
  const std::string path = write_job("run", job(run));
  auto r = worker({"train", path}, "checkpoint.write=kill@2");
  ASSERT_EQ(r.exit_code, kKilled) << r.err;
  const std::string ckpts = run_checkpoints_dir(run);
  const auto names = names_in(ckpts);
  ASSERT_EQ(names.size(), 2u) << ::testing::PrintToString(names);
  EXPECT_EQ(names[0], "step-000002");
  EXPECT_TRUE(names[1].starts_with("step-000004.tmp-")) << names[1];  // the half-written one
  EXPECT_TRUE(fs::exists(ckpts + "/" + names[1] + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(ckpts + "/" + names[1] + "/optimizer.safetensors"));
  EXPECT_EQ(list_checkpoints(ckpts), std::vector<std::string>{ckpts + "/step-000002"});
  expect_checkpoint_readable(ckpts + "/step-000002");
  EXPECT_EQ(statuses(), (std::map<std::string, int>{{"completed", 1}, {"interrupted", 1}}));

  r = worker({"train", path, "--resume", ckpts + "/step-000002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(names_in(ckpts),
            (std::vector<std::string>{"step-000002", "step-000004", "step-000006"}));
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_TRUE(*read_file(straight + "/checkpoints/step-000006/" + f) ==
                *read_file(ckpts + "/step-000006/" + f))
        << f;
  }
  EXPECT_TRUE(fs::exists(run + "/export/model.safetensors"));
}

// kill -9 in the middle of an export: over an earlier export (the run's own, re-exported from a
// checkpoint) the earlier one stays whole and byte-identical; killed just after the new folder was
// swapped in, the new one is whole and the old one's leftover is removed by the next export; killed
// in the trainer's own final export, the run is interrupted with its checkpoints, and resume from
// the last one writes the export.
TEST_F(FaultMatrix, KillDuringExport) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run = tmp_.path() + "/run";
  ASSERT_EQ(worker({"train", write_job("run", job(run, 4))}).exit_code, 0);
  const std::string exported = run + "/export";
  const std::string before = *read_file(exported + "/model.safetensors");
  const std::string ckpt2 = run + "/checkpoints/step-000002";

  auto r = worker({"export", "--checkpoint", ckpt2, "--out", exported}, "export.write=kill");
  ASSERT_EQ(r.exit_code, kKilled) << r.err;
  EXPECT_TRUE(*read_file(exported + "/model.safetensors") == before)
      << "the earlier export is untouched";
  EXPECT_TRUE(fs::exists(exported + "/tokenizer.model") ||
              fs::exists(exported + "/tokenizer.json"));
  EXPECT_TRUE(TensorStore::open(exported + "/model.safetensors").ok());

  r = worker({"export", "--checkpoint", ckpt2, "--out", exported}, "folder.replace=kill");
  ASSERT_EQ(r.exit_code, kKilled) << r.err;
  const std::string after = *read_file(exported + "/model.safetensors");
  EXPECT_FALSE(after == before) << "step 2's weights are in place, whole";
  EXPECT_TRUE(*read_file(ckpt2 + "/model.safetensors") == after);
  r = worker({"export", "--checkpoint", ckpt2, "--out", exported});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& n : names_in(run))
    EXPECT_EQ(n.find(".tmp-"), std::string::npos) << n << " left behind";

  // The trainer's own export, at the end of a run.
  const std::string run2 = tmp_.path() + "/run2";
  const std::string path2 = write_job("run2", job(run2, 4));
  r = worker({"train", path2}, "export.write=kill");
  ASSERT_EQ(r.exit_code, kKilled) << r.err;
  EXPECT_FALSE(fs::exists(run2 + "/export"));
  expect_checkpoint_readable(run2 + "/checkpoints/step-000004");
  r = worker({"train", path2, "--resume", run2 + "/checkpoints/step-000004"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(*read_file(run2 + "/export/model.safetensors") ==
              *read_file(run + "/checkpoints/step-000004/model.safetensors"));
  EXPECT_EQ(statuses(), (std::map<std::string, int>{{"completed", 2}, {"interrupted", 1}}));
}

// kill -9 in the middle of a write to runs.db (the N-th write to its write-ahead log, for several
// N: the run's first row, its metrics, a checkpoint's row): the database opens and passes
// integrity_check every time, the run before it keeps every row, the killed run is interrupted
// (or absent, when its first row was the write killed), and resume from its last checkpoint works.
TEST_F(FaultMatrix, KillDuringRunsDbWrite) {
  SPILLWAY_REQUIRE_DATA();
  const std::string first = tmp_.path() + "/first";
  ASSERT_EQ(worker({"train", write_job("first", job(first, 4))}).exit_code, 0);
  std::string first_id;
  size_t first_metrics = 0, first_checkpoints = 0;
  {
    auto s = store();
    ASSERT_TRUE(s);
    first_id = s->list_runs()->front().id;
    first_metrics = s->metrics(first_id)->size();
    first_checkpoints = s->checkpoints(first_id)->size();
  }
  ASSERT_EQ(first_metrics, 4u);
  for (int n : {1, 3, 10, 20, 35}) {
    SCOPED_TRACE("killed at runs.db WAL write " + std::to_string(n));
    const std::string run = tmp_.path() + "/run-" + std::to_string(n);
    const std::string path = write_job("run-" + std::to_string(n), job(run));
    auto r = worker({"train", path}, "runs-db.write=kill@" + std::to_string(n));
    ASSERT_EQ(r.exit_code, kKilled) << r.err;
    EXPECT_EQ(integrity(db_), "ok");
    auto s = store();
    ASSERT_TRUE(s);
    EXPECT_EQ(s->get_run(first_id)->status, RunStatus::kCompleted);
    EXPECT_EQ(s->metrics(first_id)->size(), first_metrics);
    EXPECT_EQ(s->checkpoints(first_id)->size(), first_checkpoints);
    for (const RunInfo& info : *s->list_runs())
      EXPECT_NE(info.status, RunStatus::kRunning) << info.id;
    const auto ckpts = list_run_checkpoints(run);
    r = ckpts.empty() ? worker({"train", path}) : worker({"train", path, "--resume", ckpts.back()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(fs::exists(run + "/checkpoints/step-000006/model.safetensors"));
  }
  EXPECT_EQ(integrity(db_), "ok");
}

// Runs a test body's worker in a private mount namespace of this process, so that it can mount a
// tmpfs or a read-only bind without touching the machine's. False where this process may not.
bool private_mounts() {
  static const bool ok = ::unshare(CLONE_NEWNS) == 0 &&
                         ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
  return ok;
}

// The run folder's disk fills up at the second checkpoint (a real tmpfs of 5 MiB; a checkpoint of
// stories260K is 3 MB): the worker stops with a message naming the disk and what to do, the first
// checkpoint is whole, no half-written one is left to fill the disk further, History has the
// failure, and once there is room resume from the first checkpoint finishes the run.
TEST_F(FaultMatrix, RunFolderDiskFull) {
  SPILLWAY_REQUIRE_DATA();
  if (!private_mounts())
    GTEST_SKIP() << "cannot make a private mount namespace here (needs CAP_SYS_ADMIN)";
  const std::string disk = tmp_.path() + "/small-disk";
  fs::create_directories(disk);
  ASSERT_EQ(::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=5m"), 0) << std::strerror(errno);
  struct Unmount {
    std::string dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{disk};
  const std::string run = disk + "/run";
  const std::string path = write_job("full", job(run));
  auto r = worker({"train", path});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("checkpoint at step 4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("free space"), std::string::npos) << r.err;
  std::printf("%s", r.err.c_str());
  const std::string ckpts = run_checkpoints_dir(run);
  EXPECT_EQ(names_in(ckpts), std::vector<std::string>{"step-000002"});
  expect_checkpoint_readable(ckpts + "/step-000002");
  auto s = store();
  ASSERT_TRUE(s);
  auto runs = s->list_runs();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().status, RunStatus::kFailed);
  EXPECT_NE(runs->front().error_message.find("No space left on device"), std::string::npos)
      << runs->front().error_message;
  EXPECT_EQ(s->checkpoints(runs->front().id)->size(), 1u);

  ASSERT_EQ(::mount("tmpfs", disk.c_str(), "tmpfs", MS_REMOUNT, "size=64m"), 0)
      << std::strerror(errno);
  r = worker({"train", path, "--resume", ckpts + "/step-000002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_checkpoint_readable(ckpts + "/step-000006");
  EXPECT_TRUE(fs::exists(run + "/export/model.safetensors"));
}

}  // namespace
}  // namespace spillway
