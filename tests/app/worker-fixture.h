// WorkerTest: a fixture for tests that run the built spillway-worker as a user does, each in a
// temporary folder of its own with its own XDG_DATA_HOME (so no test touches the user's runs.db).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file-util.h"
#include "test-data.h"
#include "worker-process.h"

namespace spillway::testing {

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = {"XDG_DATA_HOME=" + tmp_.path() + "/xdg", "OPENBLAS_THREAD_TIMEOUT=4"};
  }
  std::string write_job(const std::string& name, const nlohmann::json& job) {
    std::string path = tmp_.path() + "/" + name + ".json";
    std::ofstream(path) << job.dump(2);
    return path;
  }
  ProcessResult worker(const std::vector<std::string>& args) {
    return run_worker_process(args, env_, tmp_.path());
  }
  // stories260K on tiny Shakespeare in sequences of 64 tokens, shuffled with `data_seed`, trained
  // as `train` says, placed as `placement` says, into `run_dir`.
  static nlohmann::json stories_job(const std::string& name, const std::string& run_dir,
                                    int data_seed, const nlohmann::json& train,
                                    const nlohmann::json& placement) {
    return nlohmann::json{{"name", name},
                          {"model", {{"path", data_path("models/stories260K")}}},
                          {"data",
                           {{"train", data_path("datasets/tinyshakespeare/input.txt")},
                            {"seq_len", 64},
                            {"seed", data_seed}}},
                          {"train", train},
                          {"placement", placement},
                          {"output", {{"run_dir", run_dir}}}};
  }
  // Two checkpoint folders hold the same weights and AdamW state, byte for byte.
  static void same_files(const std::string& a, const std::string& b, const std::string& what) {
    for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
      auto x = read_file(a + "/" + f), y = read_file(b + "/" + f);
      ASSERT_TRUE(x.ok() && y.ok()) << what << " " << f;
      EXPECT_TRUE(*x == *y) << what << ": " << f << " differs";
    }
  }
  TempDir tmp_;
  std::vector<std::string> env_;
};

}  // namespace spillway::testing
