// SIGKILL at random moments of a worker run whose AdamW state and master weights live on the SSD
// tier, then resume from the newest checkpoint — again and again until the run completes: the final
// parameters and moments are bit-identical to an uninterrupted run's. A checkpoint every step
// means kills land in the forward, the backward, the optimizer's SSD pipeline, and mid-checkpoint.
// Also: killed runs' SSD working folders and half-written checkpoint folders are collected.
//
// The kill delays come from SPILLWAY_TEST_SEED when set (else a random seed, printed on failure).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/file-util.h"
#include "run-files.h"
#include "test-data.h"
#include "train/checkpoint.h"
#include "worker-process.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using testing::checkpoint_files;

constexpr int kSteps = 8;

class SsdResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = {"XDG_DATA_HOME=" + tmp_.path() + "/xdg", "OPENBLAS_THREAD_TIMEOUT=4"};
  }

  // The job for run folder `name`, state on the SSD under tmp/ssd.
  std::string job(const std::string& name) {
    json j = {{"name", name},
              {"model", {{"path", testing::data_path("models/stories260K")}}},
              {"data",
               {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")},
                {"seq_len", 64},
                {"seed", 7}}},
              {"train",
               {{"steps", kSteps},
                {"micro_batch_size", 4},
                {"grad_accum", 2},
                {"lr", 2e-3},
                {"schedule", "cosine"},
                {"warmup_steps", 2},
                {"weight_decay", 0.1},
                {"checkpoint_every", 1},
                {"keep_checkpoints", 2},
                {"log_every", 0}}},
              {"placement",
               {{"backend", "cpu"},
                {"optimizer", "ssd"},
                {"master", "ssd"},
                {"ssd_dir", tmp_.path() + "/ssd"}}},
              {"output", {{"run_dir", tmp_.path() + "/" + name}}}};
    const std::string path = tmp_.path() + "/" + name + ".json";
    std::ofstream(path) << j.dump(2);
    return path;
  }

  // Starts `train job [--resume ckpt]`; returns the pid.
  pid_t start(const std::string& job_path, const std::string& resume) {
    std::vector<std::string> args = {"train", job_path};
    if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
    return testing::spawn_worker(args, env_, tmp_.path() + "/out.txt", tmp_.path() + "/err.txt");
  }

  testing::TempDir tmp_;
  std::vector<std::string> env_;
};

TEST_F(SsdResumeTest, RepeatedSigkillThenResumeIsBitExact) {
  SPILLWAY_REQUIRE_DATA();
  const char* seed_env = std::getenv("SPILLWAY_TEST_SEED");
  const unsigned seed = seed_env ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10))
                                 : std::random_device()();
  SCOPED_TRACE("SPILLWAY_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);

  // The uninterrupted run, timed: kills are spread over a run's length.
  const auto t0 = Clock::now();
  const pid_t straight = start(job("straight"), "");
  ASSERT_EQ(testing::wait_exit(straight), 0) << testing::slurp(tmp_.path() + "/err.txt");
  const double run_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string straight_final =
      tmp_.path() + "/straight/checkpoints/step-00000" + std::to_string(kSteps);
  ASSERT_TRUE(fs::exists(straight_final));

  // A run is a start-up (loading, no events yet) and a body of kSteps steps; a run resumed from
  // step k has (kSteps - k) of them left. Kills are drawn over the part of a run that is left.
  double body_s = 0;
  {
    std::ifstream f(tmp_.path() + "/straight/events.jsonl");
    for (std::string line; std::getline(f, line);)
      body_s = std::max(body_s, json::parse(line)["t"].get<double>());
  }
  const double startup_s = std::max(0.0, run_s - body_s);

  const std::string killed_job = job("killed");
  const std::string checkpoints = tmp_.path() + "/killed/checkpoints";
  std::string log;
  int kills = 0;
  bool completed = false;
  constexpr int kLastKilledAttempt = 12;
  for (int attempt = 0; attempt < 16 && !completed; ++attempt) {
    auto all = list_checkpoints(checkpoints);
    const std::string resume = all.empty() ? "" : all.back();
    const int done = resume.empty() ? 0 : std::stoi(fs::path(resume).filename().string().substr(5));
    const double left_s = startup_s + body_s * (kSteps - done) / kSteps;
    const pid_t pid = start(killed_job, resume);
    // The first attempt dies before its end; later ones may outlive the kill (then the kill is a
    // no-op on a finished process), more likely as attempts go on, so that the loop ends.
    const double frac = std::uniform_real_distribution<double>(0.0, attempt == 0  ? 0.8
                                                                    : attempt < 8 ? 1.1
                                                                                  : 3.0)(rng);
    if (attempt == 0) {
      // The first attempt must die mid-run whatever the machine's load (timed from the straight
      // run alone, a loaded machine let it finish first): wait for its first checkpoint, then
      // kill within the next few steps.
      for (const auto until = Clock::now() + std::chrono::duration<double>(10 * left_s + 30);
           list_checkpoints(checkpoints).empty() && Clock::now() < until;)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::this_thread::sleep_for(std::chrono::duration<double>(frac * body_s / kSteps));
    } else if (attempt < kLastKilledAttempt) {
      std::this_thread::sleep_for(std::chrono::duration<double>(frac * left_s));
    }
    // The last attempts run to the end: on a machine loaded past the straight run's pace (the
    // sanitizer suite, two tests at once) every timed kill could land before the end.
    if (attempt < kLastKilledAttempt) kill(pid, SIGKILL);
    const int code = testing::wait_exit(pid);
    log += "attempt " + std::to_string(attempt) + " from " +
           (resume.empty() ? "scratch" : fs::path(resume).filename().string()) +
           (attempt < kLastKilledAttempt ? ": kill at " + std::to_string(frac) + " of what was left"
                                         : std::string(": no kill")) +
           " -> exit " + std::to_string(code) + "\n";
    if (code == 0)
      completed = true;
    else if (code == 128 + SIGKILL)
      ++kills;
    else
      FAIL() << "worker failed:\n" << log << testing::slurp(tmp_.path() + "/err.txt");
  }
  SCOPED_TRACE(log);
  ASSERT_TRUE(completed) << "no attempt finished";
  EXPECT_GE(kills, 1);
  std::printf("%d SIGKILLs before the run completed\n%s", kills, log.c_str());

  const std::string final_dir = checkpoints + "/step-00000" + std::to_string(kSteps);
  const auto files = checkpoint_files(straight_final);
  ASSERT_EQ(checkpoint_files(final_dir), files);
  // The weights and the moments, streamed off the SSD into one file as a DRAM run writes it.
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors", "optimizer.safetensors"}));
  for (const std::string& f : files) {
    auto a = read_file(straight_final + "/" + f);
    auto b = read_file(final_dir + "/" + f);
    ASSERT_TRUE(a.ok() && b.ok()) << f;
    EXPECT_TRUE(*a == *b) << f << " differs after " << kills << " SIGKILLs and resumes";
  }
  // Nothing left behind: every SSD working folder (the killed runs' included) and every
  // half-written checkpoint folder has been removed by the runs that followed.
  std::string left;  // everything left in the SSD folder, for the failure message
  for (const auto& e : fs::recursive_directory_iterator(tmp_.path() + "/ssd"))
    left += e.path().string() + "\n";
  EXPECT_TRUE(left.empty()) << left;
  for (const auto& e : fs::directory_iterator(checkpoints))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace spillway
