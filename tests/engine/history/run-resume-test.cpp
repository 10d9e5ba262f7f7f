// A resumed run is the same run (issue 13 point 2), and a run folder has one name (issue 12 point
// 4): the folder naming of history/run-folder.h, RunRecorder::create with a ResumePoint (one row,
// its metrics up to the checkpoint kept and the rest replaced, its tags and notes kept, a branch
// into another folder a new run with its parent, a run still going refused), and migration 3, which
// merges the second rows that resumes of older releases inserted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "history/process-liveness.h"
#include "history/run-folder.h"
#include "history/run-recorder.h"
#include "history/schema.h"
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
namespace fs = std::filesystem;

// Sets an environment variable for the scope of a test and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::vector<int64_t> steps_of(RunStore& store, const std::string& id) {
  std::vector<int64_t> out;
  const auto metrics = store.metrics(id);
  for (const MetricRow& m : *metrics) out.push_back(m.step);
  return out;
}

TEST(RunFolder, OneNamingByRunId) {
  testing::TempDir dir;
  ScopedEnv xdg("XDG_DATA_HOME", dir.file("xdg data"));
  EXPECT_EQ(run_folder("/data/runs", "20261125-230102-abcdef"),
            "/data/runs/20261125-230102-abcdef");
  auto folder = default_run_folder("20261125-230102-abcdef");
  ASSERT_TRUE(folder.ok()) << folder.status().to_string();
  EXPECT_EQ(*folder, dir.file("xdg data/spillway/runs/20261125-230102-abcdef"));

  // A run records its folder under that name when its job names none.
  RunRecorderOptions o;
  o.db_path = dir.file("runs.db");
  auto rec = RunRecorder::create(RunInfo{}, o);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ((*rec)->dir(), *default_run_folder((*rec)->id()));
  EXPECT_TRUE(fs::is_directory((*rec)->dir()));
  EXPECT_FALSE((*rec)->resumed());
}

TEST(RunFolder, CheckpointsNameTheirRunAndFoldersCompareCanonically) {
  testing::TempDir dir;
  const std::string run = dir.file("a run");
  fs::create_directories(run + "/checkpoints/step-000003");
  EXPECT_EQ(run_folder_of_checkpoint(run + "/checkpoints/step-000003"), run);
  EXPECT_EQ(run_folder_of_checkpoint(run + "/checkpoints/step-000003/"), run);
  EXPECT_EQ(run_folder_of_checkpoint(run + "/checkpoints/../checkpoints/step-000003"), run);
  EXPECT_EQ(run_folder_of_checkpoint(dir.file("kept/step-000003")), "");  // not in a run folder
  EXPECT_EQ(run_folder_of_checkpoint(run + "/checkpoints/latest"), "");
  EXPECT_EQ(run_folder_of_checkpoint(""), "");

  EXPECT_TRUE(same_folder(run, run + "/"));
  EXPECT_TRUE(same_folder(run, run + "/checkpoints/.."));
  fs::create_directory_symlink(run, dir.file("link"));
  EXPECT_TRUE(same_folder(dir.file("link"), run));
  EXPECT_TRUE(same_folder(dir.file("never/made"), dir.file("never/./made/")));
  EXPECT_FALSE(same_folder(run, dir.file("other")));
  EXPECT_FALSE(same_folder(run, ""));
}

class RunResume : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.db_path = dir_.file("runs.db");
    run_dir_ = dir_.file("runs/first run");
  }
  // A run that trained steps 1..6, kept checkpoints at 3 and 6, evaluated at 3 and 6, was tagged
  // and noted by the user, and was stopped.
  std::string first_run() {
    RunInfo info;
    info.name = "shakespeare";
    info.run_dir = run_dir_;
    auto rec = RunRecorder::create(info, options_);
    EXPECT_TRUE(rec.ok()) << rec.status().to_string();
    RunRecorder& r = **rec;
    for (int s = 1; s <= 6; ++s) {
      r.step(step_event(s, 3.0 - 0.1 * s), MetricRow{s, 3.0 - 0.1 * s});
      if (s % 3 == 0) {
        const std::string ckpt = run_dir_ + "/checkpoints/step-00000" + std::to_string(s);
        fs::create_directories(ckpt);
        EXPECT_TRUE(r.checkpoint(s, ckpt, 100, 0.1).ok());
        r.eval(EvalEvent{s, 2.9, 0, std::nullopt}, EvalRow{s, 2.9 - 0.01 * s});
      }
    }
    FinalFigures f;
    f.final_step = 6;
    EXPECT_TRUE(r.finish(RunStatus::kStopped, f).ok());
    auto store = RunStore::open(options_.db_path);
    EXPECT_TRUE((*store)->set_tags(r.id(), {"baseline", "tiny"}).ok());
    EXPECT_TRUE((*store)->set_notes(r.id(), "lr too high?").ok());
    return r.id();
  }
  testing::TempDir dir_;
  RunRecorderOptions options_;
  std::string run_dir_;
};

TEST_F(RunResume, FromItsCheckpointIsTheSameRunWithOneRow) {
  const std::string id = first_run();
  // Resumed as a terminal user does: the job names no folder, the checkpoint is the run's.
  RunInfo again;
  again.name = "shakespeare (job name)";
  again.job_json = R"({"train":{"steps":8}})";
  auto rec =
      RunRecorder::create(again, options_, ResumePoint{run_dir_ + "/checkpoints/step-000003", 3});
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  RunRecorder& r = **rec;
  EXPECT_TRUE(r.resumed());
  EXPECT_EQ(r.id(), id);
  EXPECT_EQ(r.dir(), run_dir_);

  auto store = RunStore::open(options_.db_path);
  ASSERT_TRUE(store.ok());
  ASSERT_EQ((*store)->list_runs()->size(), 1u) << "a resume adds no row";
  RunInfo row = *(*store)->get_run(id);
  EXPECT_EQ(row.status, RunStatus::kRunning);
  EXPECT_FALSE(row.ended_at.has_value());
  EXPECT_EQ(row.pid, static_cast<int64_t>(getpid()));
  EXPECT_EQ(row.name, "shakespeare");  // the run's name stays (the user may have renamed it)
  EXPECT_EQ(row.job_json, again.job_json);
  EXPECT_EQ(row.tags, (std::vector<std::string>{"baseline", "tiny"}));
  EXPECT_EQ(row.notes, "lr too high?");
  // Steps 4..6 of the abandoned trajectory go; steps 1..3 stay: one curve from step 1.
  EXPECT_EQ(steps_of(**store, id), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_EQ((*store)->evals(id)->size(), 1u);
  EXPECT_EQ((*store)->evals(id)->at(0).step, 3);
  EXPECT_EQ((*store)->checkpoints(id)->size(), 2u) << "checkpoint rows name files, which stay";
  // The abandoned step 6's checkpoint is kept, out of the rotation and of History's Resume.
  EXPECT_EQ(list_run_checkpoints(run_dir_),
            std::vector<std::string>{run_dir_ + "/checkpoints/step-000003"});
  std::vector<std::string> aside;
  for (const auto& e : fs::directory_iterator(run_dir_ + "/checkpoints"))
    if (e.path().filename().string().starts_with("replaced-")) aside.push_back(e.path().string());
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_TRUE(fs::is_directory(aside[0] + "/step-000006"));

  r.step(step_event(4, 1.5), MetricRow{4, 1.5});
  r.step(step_event(5, 1.4), MetricRow{5, 1.4});
  FinalFigures f;
  f.final_step = 5;
  f.final_loss = 1.4;
  ASSERT_TRUE(r.finish(RunStatus::kCompleted, f).ok());
  row = *(*store)->get_run(id);
  EXPECT_EQ(row.status, RunStatus::kCompleted);
  EXPECT_EQ(row.final_step, 5);
  const auto metrics = *(*store)->metrics(id);
  ASSERT_EQ(metrics.size(), 5u);
  EXPECT_DOUBLE_EQ(*metrics[2].loss, 2.7);  // before the resume
  EXPECT_DOUBLE_EQ(*metrics[3].loss, 1.5);  // the resumed run's, not the abandoned 2.6
}

TEST_F(RunResume, AnInterruptedRunResumedLosesItsInterruptionMessage) {
  const std::string id = first_run();
  auto store = RunStore::open(options_.db_path);
  ASSERT_TRUE((*store)
                  ->finish_run(id, RunStatus::kInterrupted,
                               {std::nullopt, std::nullopt, std::nullopt,
                                "worker process 1 ended without finishing the run"})
                  .ok());
  RunInfo again;
  again.id = id;  // as History's Resume names it
  auto rec =
      RunRecorder::create(again, options_, ResumePoint{run_dir_ + "/checkpoints/step-000006", 6});
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ((*rec)->id(), id);
  const RunInfo row = *(*store)->get_run(id);
  EXPECT_EQ(row.status, RunStatus::kRunning);
  EXPECT_EQ(row.error_message, "");
  EXPECT_EQ(steps_of(**store, id), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST_F(RunResume, ARunStillGoingIsNotResumedTwice) {
  const std::string id = first_run();
  auto store = RunStore::open(options_.db_path);
  // Its worker: this test's parent process, alive.
  const ProcessIdentity parent{getppid(), process_start_ticks(getppid()), current_boot_id(),
                               current_host_name()};
  ASSERT_TRUE((*store)->update_status(id, RunStatus::kRunning).ok());
  RunInfo worker;
  worker.pid = parent.pid;
  if (parent.start_ticks) worker.pid_start_ticks = static_cast<int64_t>(*parent.start_ticks);
  worker.boot_id = parent.boot_id;
  worker.host = parent.host;
  ASSERT_TRUE((*store)->resume_run(id, worker, 6).ok());
  auto rec = RunRecorder::create(RunInfo{}, options_,
                                 ResumePoint{run_dir_ + "/checkpoints/step-000006", 6});
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(rec.status().message().find("run " + id + " in " + run_dir_ +
                                        " is still running (worker " + std::to_string(parent.pid)),
            std::string::npos)
      << rec.status().to_string();
  EXPECT_EQ((*store)->get_run(id)->pid, parent.pid) << "its row is left to its worker";
}

TEST_F(RunResume, IntoAnotherFolderIsANewRunWithItsParent) {
  const std::string id = first_run();
  RunInfo branch;
  branch.run_dir = dir_.file("runs/branch");
  auto rec =
      RunRecorder::create(branch, options_, ResumePoint{run_dir_ + "/checkpoints/step-000003", 3});
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_FALSE((*rec)->resumed());
  EXPECT_NE((*rec)->id(), id);
  EXPECT_EQ((*rec)->dir(), dir_.file("runs/branch"));
  auto store = RunStore::open(options_.db_path);
  EXPECT_EQ((*store)->list_runs()->size(), 2u);
  EXPECT_EQ((*store)->get_run((*rec)->id())->parent_id, id);
  EXPECT_EQ(steps_of(**store, id).size(), 6u) << "the parent keeps its steps";

  // The run id of one run with the folder of another is refused.
  RunInfo mixed;
  mixed.id = id;
  mixed.run_dir = dir_.file("runs/branch");
  auto bad =
      RunRecorder::create(mixed, options_, ResumePoint{run_dir_ + "/checkpoints/step-000003", 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("run " + id + " has its folder in " + run_dir_),
            std::string::npos)
      << bad.status().to_string();
}

TEST_F(RunResume, ARunHistoryDoesNotKnowContinuesInItsCheckpointsFolder) {
  // A run folder from another database (or copied from another machine).
  fs::create_directories(run_dir_ + "/checkpoints/step-000003");
  auto rec = RunRecorder::create(RunInfo{}, options_,
                                 ResumePoint{run_dir_ + "/checkpoints/step-000003", 3});
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_FALSE((*rec)->resumed());
  EXPECT_EQ((*rec)->dir(), run_dir_);
  auto store = RunStore::open(options_.db_path);
  ASSERT_EQ((*store)->list_runs()->size(), 1u);
  EXPECT_EQ((*store)->list_runs()->at(0).run_dir, run_dir_);
}

// Databases written before this change hold a second row for each resume; migration 3 merges it
// into the run it resumed.
TEST(Schema, ResumedRowsOfOlderReleasesAreMergedIntoTheirRun) {
  testing::TempDir dir;
  const std::string path = dir.file("runs.db");
  {
    auto db = SqliteDb::open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(apply_migrations(*db, run_store_migrations().first(2)).ok());
    // Folder A: a run stopped at step 6 (checkpoint 3), resumed from step 3 to 10 (the old
    // release's second row), then resumed again from 10 to 12 (a third row). A run trained afresh
    // into the same folder later (starts at step 1) stays its own run, and so does a row without
    // steps. Folder B: a run never resumed.
    ASSERT_TRUE(db->exec(R"sql(
      INSERT INTO runs (id, name, status, created_at, run_dir, tags, notes, final_step, error_message)
        VALUES ('r1', 'shakespeare', 'stopped', 1, '/runs/A', '["baseline"]', 'first try', 6, ''),
               ('r2', 'shakespeare', 'interrupted', 2, '/runs/A', '["tiny","baseline"]', 'resumed once', 10,
                'worker process 7 ended without finishing the run'),
               ('r3', 'shakespeare', 'completed', 3, '/runs/A', '[]', '', 12, ''),
               ('failed', 'shakespeare', 'failed', 4, '/runs/A', '[]', '', NULL, 'no model'),
               ('fresh', 'again', 'completed', 5, '/runs/A', '[]', '', 2, ''),
               ('other', 'other', 'completed', 6, '/runs/B', '[]', '', 2, ''),
               ('child', 'clone', 'completed', 7, '/runs/C', '[]', '', 1, '');
      UPDATE runs SET parent_id = 'r2' WHERE id = 'child';
      INSERT INTO metrics (run_id, step, loss) VALUES
        ('r1', 1, 3.0), ('r1', 2, 2.9), ('r1', 3, 2.8), ('r1', 4, 2.7), ('r1', 5, 2.6), ('r1', 6, 2.5),
        ('r2', 4, 1.7), ('r2', 5, 1.6), ('r2', 6, 1.5), ('r2', 7, 1.4), ('r2', 8, 1.3), ('r2', 9, 1.2),
        ('r2', 10, 1.1), ('r3', 11, 1.0), ('r3', 12, 0.9),
        ('fresh', 1, 3.1), ('fresh', 2, 3.0), ('other', 1, 3.3), ('other', 2, 3.2), ('child', 1, 3.0);
      INSERT INTO evals (run_id, step, loss) VALUES ('r1', 3, 2.85), ('r1', 6, 2.55), ('r2', 9, 1.25);
      INSERT INTO checkpoints (run_id, step, path, created_at) VALUES
        ('r1', 3, '/runs/A/checkpoints/step-000003', 1), ('r1', 6, '/runs/A/checkpoints/step-000006', 1),
        ('r2', 6, '/runs/A/checkpoints/step-000006', 2), ('r2', 10, '/runs/A/checkpoints/step-000010', 2);
      INSERT INTO samples (run_id, t_s, json) VALUES ('r1', 1, '{}'), ('r2', 20, '{}'), ('r3', 40, '{}');
    )sql")
                    .ok());
  }
  RunStoreOptions o;
  o.reconcile_on_open = false;
  auto store = RunStore::open(path, o);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ(*(*store)->schema_version(), 3);
  std::vector<std::string> ids;
  const auto runs = (*store)->list_runs();
  for (const RunInfo& r : *runs) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"child", "other", "fresh", "failed", "r1"}));

  const RunInfo run = *(*store)->get_run("r1");
  EXPECT_EQ(run.status, RunStatus::kCompleted);  // the last resume's state
  EXPECT_EQ(run.final_step, 12);
  EXPECT_EQ(run.error_message, "");
  EXPECT_EQ(run.created_at, 1);
  EXPECT_EQ(run.tags, (std::vector<std::string>{"baseline", "tiny"}));
  EXPECT_EQ(run.notes, "first try\n\nresumed once");
  // One curve: steps 1..3 of the first row, 4..10 of the first resume, 11..12 of the second.
  const auto metrics = *(*store)->metrics("r1");
  ASSERT_EQ(metrics.size(), 12u);
  for (size_t i = 0; i < metrics.size(); ++i)
    EXPECT_EQ(metrics[i].step, static_cast<int64_t>(i + 1));
  EXPECT_DOUBLE_EQ(*metrics[2].loss, 2.8);
  EXPECT_DOUBLE_EQ(*metrics[3].loss, 1.7);
  EXPECT_DOUBLE_EQ(*metrics[11].loss, 0.9);
  const auto evals = *(*store)->evals("r1");
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0].step, 3);
  EXPECT_EQ(evals[1].step, 9);
  const auto ckpts = *(*store)->checkpoints("r1");
  ASSERT_EQ(ckpts.size(), 3u);
  EXPECT_EQ(ckpts[1].created_at, 2) << "step 6: the resume's checkpoint";
  EXPECT_EQ((*store)->samples("r1")->size(), 3u);
  EXPECT_EQ((*store)->get_run("child")->parent_id, "r1");
  EXPECT_EQ(steps_of(**store, "fresh"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(steps_of(**store, "other"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ((*store)->get_run("failed")->error_message, "no model");
}

}  // namespace
}  // namespace spillway
