// Past one machine (issue 23, point 7), as a user launches it: one spillway-worker per machine,
// each told its rank, the number of processes and the rendezvous address. Here both processes run
// on this machine over loopback, on the CPU backend, whose collectives across processes go through
// the rendezvous (compute/cpu/cpu-communicator.h): the GPUs' schedule, with NCCL's place taken by
// TCP.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "loopback-port.h"
#include "model/safetensors.h"
#include "run-files.h"
#include "worker-fixture.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using testing::of_type;
using testing::read_events;
using testing::WorkerTest;

class ProcessesTest : public WorkerTest {
 protected:
  // stories260K with 2 micro-batches of 2 sequences on each rank and a held-out batch evaluated
  // every 2 steps; clipping off, so that the gradient norm, which one process sums over its GPUs'
  // shares in another grouping, takes no part in the update and the bits can be compared.
  json job_for(const std::string& run_dir, int devices) {
    json j = stories_job("machines", run_dir, 5,
                         {{"steps", 4},
                          {"micro_batch_size", 2},
                          {"grad_accum", 2},
                          {"lr", 2e-3},
                          {"weight_decay", 0.1},
                          {"clip_grad_norm", 0},
                          {"checkpoint_every", 2},
                          {"keep_checkpoints", 0},
                          {"eval_every", 2},
                          {"eval_batches", 1}},
                         {{"backend", "cpu"}, {"devices", devices}});
    j["data"]["eval_fraction"] = 0.05;
    return j;
  }

  // Two checkpoint or export folders hold the same tensors, bit for bit, however they are laid
  // out in files (one process's model.safetensors, two processes' parts under an index).
  static void same_tensors(const std::string& a, const std::string& b, const std::string& what,
                           bool moments = true) {
    auto open = [](const std::string& dir, const char* stem) {
      const std::string single = dir + "/" + stem + ".safetensors";
      return TensorStore::open(fs::exists(single) ? single : single + ".index.json");
    };
    for (const char* stem : {"model", "optimizer"}) {
      if (!moments && std::string(stem) == "optimizer") continue;
      auto x = open(a, stem), y = open(b, stem);
      ASSERT_TRUE(x.ok()) << what << " " << a << ": " << x.status().to_string();
      ASSERT_TRUE(y.ok()) << what << " " << b << ": " << y.status().to_string();
      const auto xs = x->tensors(), ys = y->tensors();
      ASSERT_EQ(xs.size(), ys.size()) << what << " " << stem;
      for (size_t i = 0; i < xs.size(); ++i) {
        ASSERT_EQ(xs[i]->name, ys[i]->name) << what;
        const size_t bytes = xs[i]->end - xs[i]->begin;
        ASSERT_EQ(bytes, ys[i]->end - ys[i]->begin) << what << " " << xs[i]->name;
        EXPECT_EQ(0, std::memcmp(x->data(*xs[i]), y->data(*ys[i]), bytes))
            << what << ": " << xs[i]->name << " differs";
      }
    }
  }

  struct Launched {
    pid_t pid;
    std::string out, err;
  };
  // Two processes of an endless run into `name`, launched and past their first step.
  std::pair<Launched, Launched> endless_pair(const std::string& name) {
    json j = job_for(tmp_.path() + "/" + name, 1);
    j["train"]["steps"] = 100000;
    j["train"]["checkpoint_every"] = 0;
    auto [p0, p1] = launch_pair(name, {"train", write_job(name, j)});
    const std::string events = tmp_.path() + "/" + name + "/process-1/events.jsonl";
    auto stepped = [&] {
      return testing::slurp(events).find("\"type\":\"step\"") != std::string::npos;
    };
    for (int i = 0; i < 6000 && !stepped(); ++i) usleep(10000);
    EXPECT_TRUE(stepped()) << testing::slurp(p1.err);
    return {p0, p1};
  }
  // `args` on two processes joined at a fresh loopback address (`--rank`, `--processes` and
  // `--rendezvous` appended), process 1 with `env1` over the fixture's.
  std::pair<Launched, Launched> launch_pair(const std::string& name,
                                            const std::vector<std::string>& args,
                                            const std::vector<std::string>& env1 = {}) {
    const std::string at = testing::loopback_address();
    auto as = [&](int rank) {
      std::vector<std::string> a = args;
      a.insert(a.end(), {"--rank", std::to_string(rank), "--processes", "2", "--rendezvous", at});
      return a;
    };
    Launched p0 = launch(name + "-0", as(0));
    Launched p1 = launch(name + "-1", as(1), env1);
    return {p0, p1};
  }
  // spillway-worker `args` in the background, with `env` over the fixture's.
  Launched launch(const std::string& name, const std::vector<std::string>& args,
                  const std::vector<std::string>& env = {}) {
    std::vector<std::string> all_env = env_;
    all_env.insert(all_env.end(), env.begin(), env.end());
    Launched l{-1, tmp_.path() + "/" + name + ".out", tmp_.path() + "/" + name + ".err"};
    l.pid = testing::spawn_worker(args, all_env, l.out, l.err);
    return l;
  }
};

// Two processes of one CPU rank each train and evaluate what one process with two CPU ranks
// trains and evaluates, bit for bit: the same global batch split the same way (process p's rank is
// p), the gradients summed in rank order, each block updated by the machine that holds it. Each
// writes its blocks into the checkpoints of the job's run folder, which process 0 binds, and
// process 0 exports; process 1 records its part of the run in a folder of its own in it.
TEST_F(ProcessesTest, TwoProcessesTrainTheTwoRankRunBitForBit) {
  SPILLWAY_REQUIRE_DATA();
  const std::string one = tmp_.path() + "/one-process", two = tmp_.path() + "/two-processes";
  auto r = worker({"train", write_job("one", job_for(one, 2))});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const int port = testing::free_loopback_port();
  ASSERT_GT(port, 0);
  const std::string job = write_job("two", job_for(two, 1));
  const std::string at = "127.0.0.1:" + std::to_string(port);
  // Process 1 first, through the environment a launcher sets, waiting for process 0 to serve.
  Launched p1 = launch("p1", {"train", job},
                       {"SPILLWAY_RANK=1", "SPILLWAY_PROCESSES=2", "SPILLWAY_RENDEZVOUS=" + at});
  Launched p0 = launch("p0", {"train", job, "--rank", "0", "--processes", "2", "--rendezvous", at});
  const int rc0 = testing::wait_exit(p0.pid), rc1 = testing::wait_exit(p1.pid);
  ASSERT_EQ(rc0, 0) << testing::slurp(p0.err);
  ASSERT_EQ(rc1, 0) << testing::slurp(p1.err);
  EXPECT_NE(testing::slurp(p0.out).find("process 0 of 2 (--rank/--processes)"), std::string::npos)
      << testing::slurp(p0.out);
  EXPECT_NE(testing::slurp(p1.out).find("process 1 of 2 (SPILLWAY_RANK)"), std::string::npos)
      << testing::slurp(p1.out);

  const auto a = of_type(read_events(one), "step"), b = of_type(read_events(two), "step");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]) << "step " << i + 1 << ": the same global batch";
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
  }
  // The held-out loss, which every GPU of every machine computes together (each block broadcast
  // from its owner), at steps 0, 2 and 4: one machine's bits.
  const auto ea = of_type(read_events(one), "eval"), eb = of_type(read_events(two), "eval");
  ASSERT_EQ(ea.size(), 3u);
  ASSERT_EQ(eb.size(), ea.size());
  for (size_t i = 0; i < ea.size(); ++i)
    EXPECT_EQ(ea[i]["loss"].get<double>(), eb[i]["loss"].get<double>()) << "eval " << i;
  for (const char* step : {"step-000002", "step-000004"})
    same_tensors(one + "/checkpoints/" + step, two + "/checkpoints/" + step, step);
  EXPECT_TRUE(fs::exists(two + "/checkpoints/step-000002/model-m1-00001.safetensors"));
  same_tensors(one + "/export", two + "/export", "the export", /*moments=*/false);
  EXPECT_TRUE(fs::exists(two + "/export/config.json"));
  // Process 1's record: the same steps and losses, no checkpoint and no export of its own.
  const std::string own = two + "/process-1";
  const auto c = of_type(read_events(own), "step");
  ASSERT_EQ(c.size(), 4u);
  for (size_t i = 0; i < c.size(); ++i)
    EXPECT_EQ(c[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
  EXPECT_FALSE(fs::exists(own + "/checkpoints/step-000002"));
  EXPECT_FALSE(fs::exists(own + "/export"));

  // Resumed on two processes from the first checkpoint: the uninterrupted run's bits.
  const std::string resumed = tmp_.path() + "/resumed";
  fs::copy(two, resumed, fs::copy_options::recursive);
  fs::remove_all(resumed + "/checkpoints/step-000004");
  const std::string job2 = write_job("resumed", job_for(resumed, 1));
  const std::string from = resumed + "/checkpoints/step-000002";
  auto [q0, q1] = launch_pair("q", {"train", job2, "--resume", from});
  ASSERT_EQ(testing::wait_exit(q0.pid), 0) << testing::slurp(q0.err);
  ASSERT_EQ(testing::wait_exit(q1.pid), 0) << testing::slurp(q1.err);
  same_tensors(two + "/checkpoints/step-000004", resumed + "/checkpoints/step-000004",
               "two processes resumed at step 2");
  // And on one process of two CPU ranks, from the two processes' checkpoint.
  const std::string single = tmp_.path() + "/resumed-on-one";
  auto one_resumed = worker({"train", write_job("single", job_for(single, 2)), "--resume", from});
  ASSERT_EQ(one_resumed.exit_code, 0) << one_resumed.err;
  same_tensors(one + "/checkpoints/step-000004", single + "/checkpoints/step-000004",
               "one process resumed at step 2");
}

// SIGTERM to one process (a user's Ctrl-C on one machine) stops both at the end of the same step,
// each exiting 0 as a stopped run, and both checkpoint that step for the resume.
TEST_F(ProcessesTest, ASigtermOnOneProcessStopsEveryProcessAfterTheStep) {
  SPILLWAY_REQUIRE_DATA();
  auto [p0, p1] = endless_pair("stopped");
  kill(p1.pid, SIGTERM);
  ASSERT_EQ(testing::wait_exit(p1.pid), 0) << testing::slurp(p1.err);
  ASSERT_EQ(testing::wait_exit(p0.pid), 0) << testing::slurp(p0.err);
  const auto a = of_type(read_events(tmp_.path() + "/stopped"), "step");
  const auto b = of_type(read_events(tmp_.path() + "/stopped/process-1"), "step");
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size()) << "both stop after the same step";
  char name[32];
  std::snprintf(name, sizeof(name), "step-%06d", a.back()["step"].get<int>());
  EXPECT_TRUE(
      fs::exists(tmp_.path() + "/stopped/checkpoints/" + name + "/model.safetensors.index.json"))
      << name;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/stopped/process-1/checkpoints"));
}

// SIGUSR1 to one process (Save checkpoint on one machine) checkpoints every process at the same
// step, as a stop does: the checkpoint holds both machines' parts and is kept as a manual one.
TEST_F(ProcessesTest, ASigusr1OnOneProcessCheckpointsEveryProcess) {
  SPILLWAY_REQUIRE_DATA();
  auto [p0, p1] = endless_pair("saved");
  kill(p1.pid, SIGUSR1);
  const std::string checkpoints = tmp_.path() + "/saved/checkpoints";
  auto saved = [&]() -> std::string {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(checkpoints, ec)) {
      // A finished one: not `step-N.tmp-<pid>`, which holds its manifest just before the rename.
      if (e.path().filename().string().find(".tmp-") == std::string::npos &&
          fs::exists(e.path() / "manifest.json"))
        return e.path().string();
    }
    return "";
  };
  for (int i = 0; i < 6000 && saved().empty(); ++i) usleep(10000);
  const std::string dir = saved();
  kill(p0.pid, SIGTERM);
  ASSERT_EQ(testing::wait_exit(p0.pid), 0) << testing::slurp(p0.err);
  ASSERT_EQ(testing::wait_exit(p1.pid), 0) << testing::slurp(p1.err);
  ASSERT_FALSE(dir.empty()) << testing::slurp(p1.err);
  for (const char* part : {"model-m0-00001.safetensors", "model-m1-00001.safetensors",
                           "optimizer-m0.safetensors", "optimizer-m1.safetensors"})
    EXPECT_TRUE(fs::exists(dir + "/" + part)) << dir << ": " << part;
  const auto state = json::parse(testing::slurp(dir + "/trainer_state.json"));
  EXPECT_TRUE(state["manual"].get<bool>()) << state.dump();
}

// One machine's disk fills up at the second checkpoint (checkpoint.write=fail@2 on process 1):
// both processes stop with the same line, which names the machine, the disk and the checkpoint
// kept; nothing of the failed checkpoint is left, and the first one resumes the run.
TEST_F(ProcessesTest, AFullDiskOnOneMachineFailsTheCheckpointOnEvery) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run = tmp_.path() + "/full";
  const std::string job = write_job("full", job_for(run, 1));
  auto [p0, p1] =
      launch_pair("f", {"train", job}, {"SPILLWAY_FAIL_POINTS=checkpoint.write=fail@2"});
  EXPECT_EQ(testing::wait_exit(p0.pid), 1);
  EXPECT_EQ(testing::wait_exit(p1.pid), 1);
  for (const Launched* l : {&p0, &p1}) {
    const std::string err = testing::slurp(l->err);
    EXPECT_NE(err.find("no space: checkpoint at step 4 not saved: process 1: cannot write " + run +
                       "/checkpoints/step-000004.tmp-"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("the last whole checkpoint, " + run + "/checkpoints/step-000002, is kept"),
              std::string::npos)
        << err;
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"step-000002"});
  auto [q0, q1] = launch_pair("g", {"train", job, "--resume", run + "/checkpoints/step-000002"});
  ASSERT_EQ(testing::wait_exit(q0.pid), 0) << testing::slurp(q0.err);
  ASSERT_EQ(testing::wait_exit(q1.pid), 0) << testing::slurp(q1.err);
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step-000004/manifest.json"));
}

// A process that dies mid-run (SIGKILL: a machine lost) stops the others with one line naming it,
// at once rather than at the step watchdog's limit: its connection to the rendezvous closes.
TEST_F(ProcessesTest, AProcessLostStopsTheOthersWithALineThatNamesIt) {
  SPILLWAY_REQUIRE_DATA();
  auto [p0, p1] = endless_pair("lost");
  kill(p1.pid, SIGKILL);
  EXPECT_EQ(testing::wait_exit(p1.pid), 128 + SIGKILL);
  const int rc0 = testing::wait_exit(p0.pid);
  EXPECT_NE(rc0, 0);
  const std::string err = testing::slurp(p0.err);
  EXPECT_NE(err.find("process 1 left the group"), std::string::npos) << err;
}

}  // namespace
}  // namespace spillway
