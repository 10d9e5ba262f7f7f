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
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sched.h>
#include <sys/ioctl.h>
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
#include "immutable-flag.h"
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
  // runs.db holds one run, failed, whose message says `why`.
  void expect_one_failed_run(const std::string& why) {
    auto s = store();
    ASSERT_TRUE(s);
    auto runs = s->list_runs();
    ASSERT_EQ(runs->size(), 1u);
    EXPECT_EQ(runs->front().status, RunStatus::kFailed);
    EXPECT_NE(runs->front().error_message.find(why), std::string::npos)
        << runs->front().error_message;
  }
  // The runs of runs.db by status name.
  std::map<std::string, int> statuses() {
    std::map<std::string, int> out;
    auto s = store();
    if (!s) return out;
    const std::vector<RunInfo> runs =
        s->list_runs().value();  // owned: *s->list_runs() dangles in a range-for
    for (const RunInfo& r : runs) ++out[run_status_name(r.status)];
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

// kill -9 while the keep-N rotation removes an old checkpoint: the one being removed is out of the
// list at once (renamed, then deleted), so a half-deleted folder is never offered for resume; the
// newest is whole, resume from it works, and the next checkpoint's writer removes the leftover.
TEST_F(FaultMatrix, KillDuringCheckpointRotation) {
  SPILLWAY_REQUIRE_DATA();
  json j = job(tmp_.path() + "/run");
  j["train"]["keep_checkpoints"] = 1;
  const std::string run = tmp_.path() + "/run", path = write_job("run", j);
  auto r = worker({"train", path}, "checkpoint.prune=kill@1");
  ASSERT_EQ(r.exit_code, kKilled) << r.err;
  const std::string ckpts = run_checkpoints_dir(run);
  EXPECT_EQ(list_checkpoints(ckpts), std::vector<std::string>{ckpts + "/step-000004"});
  const auto names = names_in(ckpts);
  ASSERT_EQ(names.size(), 2u) << ::testing::PrintToString(names);
  EXPECT_TRUE(names[0].starts_with("step-000002.tmp-")) << names[0];
  expect_checkpoint_readable(ckpts + "/step-000004");
  r = worker({"train", path, "--resume", ckpts + "/step-000004"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(names_in(ckpts), std::vector<std::string>{"step-000006"});
}

// kill -9 in the rotation after the run's last checkpoint (issue 28 point 4): the run's work is all
// saved, so the next run over the folder (resume from the last checkpoint: nothing left to train)
// writes no checkpoint, yet removes the half-deleted step-N.tmp-<pid> folder. So does it one whose
// pid is alive (pid 1: a reused pid), which no other worker can own while this one holds the run
// folder's lock.
TEST_F(FaultMatrix, KillDuringTheLastRotationLeavesNothingBehind) {
  SPILLWAY_REQUIRE_DATA();
  json j = job(tmp_.path() + "/run");
  j["train"]["keep_checkpoints"] = 1;
  const std::string run = tmp_.path() + "/run", path = write_job("run", j);
  auto r = worker({"train", path}, "checkpoint.prune=kill@2");  // after step 6's checkpoint
  ASSERT_EQ(r.exit_code, kKilled) << r.err;
  const std::string ckpts = run_checkpoints_dir(run);
  EXPECT_EQ(list_checkpoints(ckpts), std::vector<std::string>{ckpts + "/step-000006"});
  auto names = names_in(ckpts);
  ASSERT_EQ(names.size(), 2u) << ::testing::PrintToString(names);
  EXPECT_TRUE(names[0].starts_with("step-000004.tmp-")) << names[0];
  fs::create_directories(ckpts + "/step-000002.tmp-1");  // a writer's folder under a live pid
  std::ofstream(ckpts + "/step-000002.tmp-1/model.safetensors") << "half";
  r = worker({"train", path, "--resume", ckpts + "/step-000006"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(names_in(ckpts), std::vector<std::string>{"step-000006"});

  // `plan` of a job naming the folder removes one too, when no worker holds the folder.
  fs::create_directories(ckpts + "/step-000004.tmp-1");
  r = worker({"plan", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(names_in(ckpts), std::vector<std::string>{"step-000006"});
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
  // Resumed in place (one row) or as a new row beside the interrupted one: none is left running.
  auto st = statuses();
  EXPECT_GE(st["completed"], 2);
  EXPECT_EQ(st.count("running"), 0u);
}

// An export replaces its whole folder, so it goes only where Spillway wrote everything: a folder
// with a user's files is refused (exit 2, a message that names them and says what to do) and left
// as it was; an earlier export, proven by its manifest, is replaced; a user's file added to that
// export afterwards makes it a folder with other files again. A `.tmp-PID` sibling that is not
// Spillway's (no marker) is left alone.
TEST_F(FaultMatrix, ExportRemovesOnlyWhatSpillwayWrote) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run = tmp_.path() + "/run";
  ASSERT_EQ(worker({"train", write_job("run", job(run, 4))}).exit_code, 0);
  const std::string ckpt = run + "/checkpoints/step-000004";
  const std::string downloads = tmp_.path() + "/Downloads";
  fs::create_directories(downloads + "/photos");
  ASSERT_TRUE(write_file_atomic(downloads + "/notes.txt", "mine\n").ok());
  ASSERT_TRUE(write_file_atomic(downloads + "/photos/a.jpg", "jpeg").ok());
  fs::create_directories(downloads + ".tmp-999999");  // a user's, named as a temporary would be
  auto r = worker({"export", "--checkpoint", ckpt, "--out", downloads});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("holds files Spillway did not write (notes.txt, photos)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("name a new or empty folder (e.g. " + downloads + "/model)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(*read_file(downloads + "/notes.txt"), "mine\n");
  EXPECT_EQ(*read_file(downloads + "/photos/a.jpg"), "jpeg");
  EXPECT_FALSE(fs::exists(downloads + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(downloads + ".tmp-999999"));

  // Into a new subfolder: written, with its manifest; exported again over itself: replaced.
  const std::string out = downloads + "/model";
  r = worker({"export", "--checkpoint", ckpt, "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json manifest = json::parse(*read_file(out + "/spillway-export.json"));
  EXPECT_EQ(manifest["written_by"], "spillway");
  const auto files = manifest["files"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(files.begin(), files.end(), "model.safetensors"), files.end());
  EXPECT_NE(std::find(files.begin(), files.end(), "config.json"), files.end());
  r = worker({"export", "--checkpoint", run + "/checkpoints/step-000002", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(*read_file(out + "/model.safetensors") ==
              *read_file(run + "/checkpoints/step-000002/model.safetensors"));
  EXPECT_EQ(*read_file(downloads + "/notes.txt"), "mine\n");

  // A link to the export: replacing it would replace the link, which is the user's.
  fs::create_directory_symlink(out, downloads + "/latest");
  r = worker({"export", "--checkpoint", ckpt, "--out", downloads + "/latest"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("that is a symbolic link"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(downloads + "/latest"));

  // A user's file put into the export: the export is no longer only Spillway's.
  ASSERT_TRUE(write_file_atomic(out + "/README.md", "my model\n").ok());
  r = worker({"export", "--checkpoint", ckpt, "--out", out, "--json"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.out.find("holds files Spillway did not write (README.md)"), std::string::npos)
      << r.out;
  EXPECT_EQ(*read_file(out + "/README.md"), "my model\n");
  EXPECT_TRUE(*read_file(out + "/model.safetensors") ==
              *read_file(run + "/checkpoints/step-000002/model.safetensors"));
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
    const std::vector<RunInfo> runs = s->list_runs().value();
    for (const RunInfo& info : runs) EXPECT_NE(info.status, RunStatus::kRunning) << info.id;
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

// The run folder's disk fills up at the second checkpoint: a real tmpfs of 5 MiB (a checkpoint of
// stories260K is 3 MB) where this process may mount in a private namespace, else the fail point
// checkpoint.write=fail@2 (the same error from the same writer, without the rest of the disk
// filling). The worker stops with a message naming the disk and what to do, the first checkpoint
// is whole, no half-written one is left to fill the disk further, History has the failure, and
// once there is room resume from the first checkpoint finishes the run.
TEST_F(FaultMatrix, RunFolderDiskFull) {
  SPILLWAY_REQUIRE_DATA();
  const bool tmpfs = private_mounts();
  SCOPED_TRACE(tmpfs ? "a 5 MiB tmpfs"
                     : "fail point checkpoint.write=fail@2 (no CAP_SYS_ADMIN to mount)");
  const std::string disk = tmp_.path() + "/small-disk";
  fs::create_directories(disk);
  struct Unmount {
    std::string dir;
    ~Unmount() {
      if (!dir.empty()) ::umount2(dir.c_str(), MNT_DETACH);
    }
  } unmount;
  if (tmpfs) {
    ASSERT_EQ(::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=5m"), 0) << std::strerror(errno);
    unmount.dir = disk;
  }
  const std::string run = disk + "/run";
  const std::string path = write_job("full", job(run));
  auto r = worker({"train", path}, tmpfs ? "" : "checkpoint.write=fail@2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("no space: checkpoint at step 4 not saved: cannot write " + run +
                       "/checkpoints/step-000004.tmp-"),
            std::string::npos)
      << r.err;
  EXPECT_NE(
      r.err.find("No space left on device (free space on that disk or choose another folder)"),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the last whole checkpoint, " + run +
                       "/checkpoints/step-000002, is kept: resume from it"),
            std::string::npos)
      << r.err;
  const std::string ckpts = run_checkpoints_dir(run);
  EXPECT_EQ(names_in(ckpts), std::vector<std::string>{"step-000002"});
  expect_checkpoint_readable(ckpts + "/step-000002");
  expect_one_failed_run("No space left on device");
  auto s = store();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->checkpoints(s->list_runs()->front().id)->size(), 1u);

  if (tmpfs)
    ASSERT_EQ(::mount("tmpfs", disk.c_str(), "tmpfs", MS_REMOUNT, "size=64m"), 0)
        << std::strerror(errno);
  r = worker({"train", path, "--resume", ckpts + "/step-000002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_checkpoint_readable(ckpts + "/step-000006");
  EXPECT_TRUE(fs::exists(run + "/export/model.safetensors"));
}

// runs.db damaged (its header overwritten, or cut short): the worker refuses to start, names the
// file and what to do, and leaves it byte for byte as it was (no new run folder either); the runs
// it recorded keep their folders; moved aside, a new runs.db is started and training works.
TEST_F(FaultMatrix, RunsDbCorrupt) {
  SPILLWAY_REQUIRE_DATA();
  const std::string first = tmp_.path() + "/first";
  ASSERT_EQ(worker({"train", write_job("first", job(first, 2))}).exit_code, 0);
  {
    auto db = SqliteDb::open(db_);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("PRAGMA wal_checkpoint(TRUNCATE)").ok());  // every row in runs.db itself
  }
  const std::string good = *read_file(db_);
  for (const std::string how : {"header", "truncated"}) {
    SCOPED_TRACE(how);
    std::string bad = how == "header" ? std::string(64, '\x5a') + good.substr(64)
                                      : good.substr(0, good.size() / 2);
    ASSERT_TRUE(write_file_atomic(db_, bad).ok());
    const std::string run = tmp_.path() + "/run-" + how;
    auto r = worker({"train", write_job("run", job(run, 2))});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(db_ + " is damaged ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Spillway leaves it as it is: move it aside (History then starts a new "
                         "one) or restore it from a backup"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(*read_file(db_) == bad) << "runs.db is not touched";
    EXPECT_FALSE(fs::exists(run));
  }
  expect_checkpoint_readable(first + "/checkpoints/step-000002");
  EXPECT_TRUE(TensorStore::open(first + "/export/model.safetensors").ok());
  fs::rename(db_, db_ + ".damaged");
  fs::remove(db_ + "-wal");
  fs::remove(db_ + "-shm");
  auto r = worker({"train", write_job("again", job(tmp_.path() + "/again", 2))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(statuses(), (std::map<std::string, int>{{"completed", 1}}));
}

// runs.db locked by another process for longer than the worker waits (5 s): the run does not
// start, the message names the file and what to do, and the run that holds nothing is recorded
// once the lock is gone. (Locked in the middle of a run: RunRecorder.LockedDatabaseMidRun.)
TEST_F(FaultMatrix, RunsDbLockedByAnotherProcess) {
  SPILLWAY_REQUIRE_DATA();
  const std::string first = tmp_.path() + "/first";
  ASSERT_EQ(worker({"train", write_job("first", job(first, 2))}).exit_code, 0);
  // The test process is the other process: it takes the write lock and keeps it.
  auto other = SqliteDb::open(db_);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other->exec("BEGIN EXCLUSIVE").ok());
  const std::string run = tmp_.path() + "/run";
  const std::string path = write_job("run", job(run, 2));
  auto r = worker({"train", path});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(
      r.err.find(
          db_ + " is locked by another process (database is locked): close the program holding it"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("INSERT"), std::string::npos) << "no SQL in the message: " << r.err;
  EXPECT_TRUE(list_run_checkpoints(run).empty());
  ASSERT_TRUE(other->exec("ROLLBACK").ok());
  r = worker({"train", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(integrity(db_), "ok");
  auto st = statuses();
  EXPECT_EQ(st["completed"], 2);
  EXPECT_EQ(st.count("running"), 0u);
}

// runs.db on a read-only folder (a read-only bind mount where this process may mount, else the
// folder's and file's write permissions): the run does not start, the message names the file and
// why, runs.db is unchanged; writable again, training works.
TEST_F(FaultMatrix, RunsDbReadOnly) {
  SPILLWAY_REQUIRE_DATA();
  const std::string first = tmp_.path() + "/first";
  ASSERT_EQ(worker({"train", write_job("first", job(first, 2))}).exit_code, 0);
  const std::string folder = fs::path(db_).parent_path().string();
  {
    auto db = SqliteDb::open(db_);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("PRAGMA wal_checkpoint(TRUNCATE)").ok());
  }
  const std::string before = *read_file(db_);
  const bool mounted = ::geteuid() == 0;
  if (mounted) {
    if (!private_mounts()) GTEST_SKIP() << "root, but cannot make a private mount namespace";
    ASSERT_EQ(::mount(folder.c_str(), folder.c_str(), nullptr, MS_BIND, nullptr), 0)
        << std::strerror(errno);
    ASSERT_EQ(::mount(nullptr, folder.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr),
              0)
        << std::strerror(errno);
  } else {
    fs::permissions(db_, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    fs::permissions(folder, fs::perms::owner_read | fs::perms::owner_exec);
  }
  const std::string run = tmp_.path() + "/run";
  const std::string path = write_job("run", job(run, 2));
  auto r = worker({"train", path});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(db_), std::string::npos) << r.err;
  EXPECT_TRUE(r.err.find("is read-only") != std::string::npos ||
              r.err.find("is not writable") != std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("writable"), std::string::npos) << r.err;
  EXPECT_TRUE(*read_file(db_) == before) << "runs.db is unchanged";
  if (mounted) {
    ASSERT_EQ(::umount2(folder.c_str(), 0), 0) << std::strerror(errno);
  } else {
    fs::permissions(folder, fs::perms::owner_all);
    fs::permissions(db_, fs::perms::owner_read | fs::perms::owner_write);
  }

  // The file alone read-only, in a writable folder (immutable as root, where the filesystem has the
  // flag; else its permissions).
  bool file_read_only = false;
  if (::geteuid() == 0) {
    file_read_only = testing::set_immutable(db_, true);
  } else {
    fs::permissions(db_, fs::perms::owner_read);
    file_read_only = true;
  }
  if (file_read_only) {
    r = worker({"train", path});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(db_ + " is read-only (attempt to write a readonly database): make it, its "
                               "folder and the -wal and -shm files beside it writable"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(*read_file(db_) == before) << "runs.db is unchanged";
    if (::geteuid() == 0)
      testing::set_immutable(db_, false);
    else  // SQLite made its -wal and -shm with the database's permissions: read-only too
      for (const std::string& f : {db_, db_ + "-wal", db_ + "-shm"})
        if (fs::exists(f)) fs::permissions(f, fs::perms::owner_read | fs::perms::owner_write);
  }
  r = worker({"train", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(statuses()["completed"], 2);
}

// Two workers given one run folder: the second is refused before it writes there, naming the run
// and worker that hold it; the first trains on, its events.jsonl holds only its own run, and it
// stops cleanly with its checkpoint.
TEST_F(FaultMatrix, TwoWorkersOnOneRunFolder) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run = tmp_.path() + "/run";
  pid_t a = testing::spawn_worker({"train", write_job("a", job(run, 100000, 0))}, env_,
                                  tmp_.path() + "/a.out", tmp_.path() + "/a.err");
  ASSERT_GT(a, 0);
  auto steps = [&] {
    return fs::exists(run + "/events.jsonl") ? of_type(read_events(run), "step").size() : 0u;
  };
  for (int i = 0; i < 6000 && steps() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(steps(), 2u) << testing::slurp(tmp_.path() + "/a.err");
  const std::string a_id = of_type(read_events(run), "state").front()["run_id"];

  auto r = worker({"train", write_job("b", job(run, 4))});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("the run folder " + run + " is in use by another worker (run " + a_id +
                       ", worker process " + std::to_string(a) +
                       "): stop that run or wait for it to end, or choose another output.run_dir"),
            std::string::npos)
      << r.err;
  const size_t at = steps();
  for (int i = 0; i < 6000 && steps() < at + 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(steps(), at + 2) << "the first worker trains on";
  kill(a, SIGTERM);
  EXPECT_EQ(testing::wait_exit(a), 0) << testing::slurp(tmp_.path() + "/a.err");
  for (const auto& e : of_type(read_events(run), "state"))
    if (e.contains("run_id")) EXPECT_EQ(e["run_id"], a_id);
  const auto ckpts = list_run_checkpoints(run);
  ASSERT_EQ(ckpts.size(), 1u);
  expect_checkpoint_readable(ckpts.back());
  auto s = store();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->get_run(a_id)->status, RunStatus::kStopped);
  int refused = 0;  // the second worker's start, failed with its message
  const std::vector<RunInfo> runs = s->list_runs().value();
  for (const RunInfo& info : runs)
    refused += info.status == RunStatus::kFailed &&
               info.error_message.find("is in use by another worker") != std::string::npos;
  EXPECT_EQ(refused, 1);
}

// The engine's pinned host memory refused (the CPU backend's allocator failing, as cudaHostAlloc
// does when the host cannot pin more): the run stops before training with a message that says
// what to do, History has it as failed, a resume refused the same way leaves the checkpoint as it
// was, and resumes once memory is there.
TEST_F(FaultMatrix, PinnedMemoryRefused) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run = tmp_.path() + "/run";
  const std::string path = write_job("run", job(run, 4));
  auto r = worker({"train", path}, "host.alloc=fail");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("out of memory: host pool: pinned host memory (cpu) could not provide"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("free host memory, or lower micro_batch_size or seq_len"), std::string::npos)
      << r.err;
  expect_one_failed_run("could not provide");
  json two = job(run, 4);
  two["train"]["steps"] = 2;
  ASSERT_EQ(worker({"train", write_job("two", two)}).exit_code, 0);
  const std::string ckpt = run + "/checkpoints/step-000002";
  const std::string weights = *read_file(ckpt + "/model.safetensors");
  r = worker({"train", path, "--resume", ckpt}, "host.alloc=fail");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("could not provide"), std::string::npos) << r.err;
  EXPECT_TRUE(*read_file(ckpt + "/model.safetensors") == weights);
  r = worker({"train", path, "--resume", ckpt});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_checkpoint_readable(run + "/checkpoints/step-000004");
}

// A data-parallel collective that fails mid-run (NCCL's error on a GPU; here the CPU ranks' group,
// failed by the fail point in step 3): the run stops with one line naming the rank and what
// happened, within the step, and is recorded as failed; step 2's checkpoint stands and resumes on
// another number of devices (one, with the same global batch).
TEST_F(FaultMatrix, ACollectiveFailsMidRun) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run = tmp_.path() + "/run";
  json two = job(run, 4);
  two["train"]["micro_batch_size"] = 2;
  two["placement"]["devices"] = 2;
  // stories260K has 7 blocks: 14 reduce-scatters a step over 2 ranks; the 33rd is in step 3.
  auto r = worker({"train", write_job("two", two)}, "collective.fail=fail@33");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("CPU rank"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reduce-scatter failed: injected by SPILLWAY_FAIL_POINTS"),
            std::string::npos)
      << r.err;
  expect_one_failed_run("injected");
  const std::string ckpt = run + "/checkpoints/step-000002";
  expect_checkpoint_readable(ckpt);
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step-000004"));
  json one = two;
  one["placement"]["devices"] = 1;
  one["train"]["grad_accum"] = 2;
  r = worker({"train", write_job("one", one), "--resume", ckpt});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_checkpoint_readable(run + "/checkpoints/step-000004");
}

// More memory than the machine has: `plan` and `train` refuse a 70B model's 1.1 TB of state in
// DRAM before allocating anything (and say what to change); when the plan's figure is wrong
// anyway (a limit on the process that /proc/meminfo does not show: ulimit -v here), the worker
// reports the refused allocation instead of crashing. (A cap set in the job:
// WorkerTest.DivergedOrUnfitRunsStopWithClearErrors.)
TEST_F(FaultMatrix, MoreMemoryThanTheMachineHas) {
  SPILLWAY_REQUIRE_DATA();
  json big = {
      {"name", "big"},
      {"model", {{"init", "llama-70b"}, {"tokenizer", "builtin:bytes"}}},
      {"data",
       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 64}}},
      {"train", {{"steps", 2}, {"micro_batch_size", 1}}},
      {"placement", {{"backend", "cpu"}}},
      {"output", {{"run_dir", tmp_.path() + "/big"}}}};
  auto r = worker({"plan", write_job("big", big)});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("does not fit: DRAM: needs 1117.56 GB but "), std::string::npos) << r.err;
  r = worker({"train", tmp_.path() + "/big.json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the job does not fit: DRAM: needs 1117.56 GB but "), std::string::npos)
      << r.err;
  // Not "put the moments on the SSD": without them DRAM still cannot hold the master weights and
  // gradients (560 GB), so no placement of the optimizer would do.
  EXPECT_NE(r.err.find("what remains is the gradients and the weights the device streams: a "
                       "smaller model or more DRAM"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/big"));

#ifdef SPILLWAY_SANITIZED
  GTEST_SKIP() << "ulimit -v: a sanitizer build reserves terabytes of address space for its shadow "
                  "memory, so the worker cannot start under an address-space limit";
#endif
  // llama-50m needs about 1.2 GB; the process may have 500 MB of address space.
  json mid = big;
  mid["model"]["init"] = "llama-50m";
  mid["output"]["run_dir"] = tmp_.path() + "/mid";
  const std::string mid_path = write_job("mid", mid);
  auto env = env_;
  const std::string out = tmp_.path() + "/mid.out", err = tmp_.path() + "/mid.err";
  pid_t pid = testing::spawn_process(
      "/bin/sh",
      {"-c", "ulimit -v 500000 && exec \"$0\" train \"$1\"", SPILLWAY_WORKER_BINARY, mid_path}, env,
      out, err);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(testing::wait_exit(pid), 1);
  const std::string message = testing::slurp(err);
  EXPECT_NE(message.find("out of memory: the host refused "), std::string::npos) << message;
  EXPECT_NE(message.find("a limit on this process such as ulimit -v"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("terminate called"), std::string::npos) << message;
  auto s = store();
  ASSERT_TRUE(s);
  const std::vector<RunInfo> runs = s->list_runs().value();
  for (const RunInfo& info : runs) EXPECT_NE(info.status, RunStatus::kRunning);
}

}  // namespace
}  // namespace spillway
