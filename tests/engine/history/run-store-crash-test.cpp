// A worker that is SIGKILLed mid-run must show up as 'interrupted' with everything it wrote intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "history/run-store.h"
#include "test-data.h"

namespace spillway {
namespace {

// Forks a child that opens the store, creates a running run, writes `steps` metrics, reports the
// run id on a pipe and then sleeps until killed. Returns the child's pid and the id.
std::pair<pid_t, std::string> start_worker(const std::string& db_path, int steps) {
  int fds[2];
  if (pipe(fds) != 0) return {-1, ""};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    auto store = RunStore::open(db_path);
    if (!store.ok()) _exit(2);
    RunInfo info;
    info.name = "doomed";
    auto id = (*store)->create_run(info);
    if (!id.ok()) _exit(3);
    for (int s = 1; s <= steps; ++s) {
      MetricRow m;
      m.step = s;
      m.loss = 10.0 / s;
      m.t_s = s;
      if (!(*store)->add_metric(*id, m).ok()) _exit(4);
    }
    if (!(*store)->add_event(*id, 1.0, "state", R"({"state":"training"})").ok()) _exit(5);
    std::string msg = *id + "\n";
    if (write(fds[1], msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) _exit(6);
    for (;;) pause();
  }
  close(fds[1]);
  std::string id;
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') id += c;
  close(fds[0]);
  return {pid, id};
}

TEST(RunStoreCrash, SigkilledWorkerIsInterruptedWithMetricsIntact) {
  testing::TempDir dir;
  std::string db = dir.file("runs.db");
  auto [pid, id] = start_worker(db, 5);
  ASSERT_GT(pid, 0);
  ASSERT_FALSE(id.empty()) << "child failed before reporting its run";

  // While the worker lives, another process (the GUI) sees the run as running.
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    EXPECT_EQ((*store)->get_run(id)->status, RunStatus::kRunning);
  }

  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));

  auto store = RunStore::open(db);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto run = (*store)->get_run(id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kInterrupted);
  EXPECT_TRUE(run->ended_at.has_value());
  EXPECT_NE(run->error_message.find("worker process " + std::to_string(pid)), std::string::npos)
      << run->error_message;
  auto metrics = (*store)->metrics(id);
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->size(), 5u);
  EXPECT_DOUBLE_EQ(*(*metrics)[4].loss, 2.0);
  EXPECT_EQ((*store)->events(id, "state")->size(), 1u);
  // Reconciling again changes nothing.
  EXPECT_EQ(*(*store)->reconcile(), 0);
}

TEST(RunStoreCrash, UnreapedZombieCountsAsGone) {
  testing::TempDir dir;
  std::string db = dir.file("runs.db");
  auto [pid, id] = start_worker(db, 1);
  ASSERT_GT(pid, 0);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  // Wait for the death without reaping: the child stays a zombie.
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);

  auto store = RunStore::open(db);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->get_run(id)->status, RunStatus::kInterrupted);
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace
}  // namespace spillway
