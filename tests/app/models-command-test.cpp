// `spillway-worker models`: the Hugging Face cache as New run lists it, run in-process.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test-data.h"
#include "worker/commands.h"

namespace spillway::testing {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// A hub cache laid out as huggingface_hub writes it: snapshot files are links into blobs/ (here
// straight to the shared model's files, read in place).
void add_snapshot(const std::string& hub, const std::string& repo_folder,
                  const std::string& model) {
  const fs::path snap = fs::path(hub) / repo_folder / "snapshots" / "rev1";
  fs::create_directories(snap);
  for (const auto& f : fs::directory_iterator(data_path("models/" + model)))
    fs::create_symlink(f.path(), snap / f.path().filename());
  fs::create_directories(fs::path(hub) / repo_folder / "refs");
  std::ofstream(fs::path(hub) / repo_folder / "refs" / "main") << "rev1";
}

std::vector<json> lines(const std::string& out) {
  std::vector<json> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

TEST(ModelsCommand, ListsTheCacheWithFamilySizeAndWhetherItFits) {
  SPILLWAY_REQUIRE_DATA();
  TempDir hub;
  add_snapshot(hub.path(), "models--karpathy--stories260K", "stories260K");
  add_snapshot(hub.path(), "models--org--qwen2-tiny", "qwen2-tiny");
  // An architecture Spillway does not train, and a download that stopped before the weights.
  fs::create_directories(hub.path() + "/models--openai--gpt2/snapshots/r");
  std::ofstream(hub.path() + "/models--openai--gpt2/snapshots/r/config.json")
      << R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})";
  fs::create_directories(hub.path() + "/models--org--partial/snapshots/r");
  fs::copy_file(data_path("models/qwen2-tiny/config.json"),
                hub.path() + "/models--org--partial/snapshots/r/config.json");

  std::istringstream in;
  std::ostringstream out, err;
  ASSERT_EQ(worker::run_worker({"models", "--hub", hub.path(), "--backend", "cpu", "--json"},
                               {in, out, err}),
            0)
      << err.str();
  const std::vector<json> rows = lines(out.str());
  ASSERT_EQ(rows.size(), 4u) << out.str();
  EXPECT_EQ(rows[0]["repo"], "karpathy/stories260K");
  EXPECT_EQ(rows[0]["family"], "Llama");
  EXPECT_EQ(rows[0]["parameters"], 260032);  // transformers' count of stories260K
  EXPECT_EQ(rows[0]["dtype"], "F32");
  EXPECT_TRUE(rows[0]["usable"]);
  EXPECT_TRUE(rows[0]["fits"]);  // 260K parameters fit any machine that runs the tests
  EXPECT_GT(rows[0]["tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(rows[1]["repo"], "openai/gpt2");
  EXPECT_FALSE(rows[1]["usable"]);
  EXPECT_NE(rows[1]["why"].get<std::string>().find("GPT2LMHeadModel"), std::string::npos);
  EXPECT_EQ(rows[2]["repo"], "org/partial");
  EXPECT_FALSE(rows[2]["usable"]);
  EXPECT_EQ(rows[2]["why"].get<std::string>().rfind("no model.safetensors", 0), 0u)
      << rows[2]["why"];  // the reason without the folder in front
  EXPECT_EQ(rows[3]["family"], "Qwen2");
  EXPECT_TRUE(rows[3]["fits"]);

  // A job that cannot fit names why: a sequence past the model's positions.
  TempDir dir;
  std::ofstream(dir.file("job.json"))
      << R"({"name": "long", "model": {"init": "llama-tiny"}, "data": {"train": "x.txt", "seq_len": 100000}})";
  out.str("");
  ASSERT_EQ(worker::run_worker({"models", "--hub", hub.path(), "--backend", "cpu", "--job",
                                dir.file("job.json"), "--json"},
                               {in, out, err}),
            0)
      << err.str();
  const std::vector<json> long_rows = lines(out.str());
  ASSERT_EQ(long_rows.size(), 4u);
  EXPECT_FALSE(long_rows[0]["fits"]);
  EXPECT_NE(long_rows[0]["why"].get<std::string>().find("100000"), std::string::npos)
      << long_rows[0]["why"];
}

TEST(ModelsCommand, AnEmptyOrMissingCacheListsNothing) {
  TempDir hub;
  std::istringstream in;
  std::ostringstream out, err;
  ASSERT_EQ(worker::run_worker({"models", "--hub", hub.path() + "/none"}, {in, out, err}), 0);
  EXPECT_EQ(out.str(), "Hugging Face cache " + hub.path() + "/none: 0 models\n");
  EXPECT_EQ(worker::run_worker({"models", "extra"}, {in, out, err}), 2);
}

}  // namespace
}  // namespace spillway::testing
