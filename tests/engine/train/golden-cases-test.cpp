// The golden cases themselves (testing::golden_case in golden-util.h): a name resolves to the
// repository's tests/golden/<name> when there is one, else to ../shared/data; and every
// repository case is complete and consistent, so that a golden test that names it reads what it
// expects. These hold before the engine supports a case's model family: they read config.json as
// JSON, not through ModelConfig.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file-util.h"
#include "golden-util.h"
#include "test-data.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> repo_case_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(testing::repo_golden_dir()))
    if (e.is_directory()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(GoldenCases, SharedCasesResolveToTheSharedData) {
  const testing::GoldenCase c = testing::golden_case("qwen2-tiny");
  EXPECT_EQ(c.dir, testing::data_path("golden/qwen2-tiny"));
  EXPECT_EQ(c.model, testing::data_path("models/qwen2-tiny"));
  EXPECT_EQ(c.file("meta.json"), testing::data_path("golden/qwen2-tiny/meta.json"));
}

TEST(GoldenCases, RepositoryCasesResolveToTheirFolder) {
  const std::vector<std::string> names = repo_case_names();
  // tests/golden/README.md's cases (issue 27's families, issue 25's long sequence).
  EXPECT_EQ(names, (std::vector<std::string>{"gemma3-tiny", "llama-long", "phi3-longrope",
                                             "phi3-tiny", "qwen3-tiny"}));
  for (const std::string& name : names) {
    const testing::GoldenCase c = testing::golden_case(name);
    EXPECT_EQ(c.dir, testing::repo_golden_dir() + "/" + name);
    EXPECT_EQ(c.model, c.dir + "/model");
  }
}

std::vector<int64_t> shape_of(const TensorStore& s, const std::string& name) {
  const TensorInfo* t = s.find(name);
  return t ? t->shape : std::vector<int64_t>{};
}

// Every parameter of the model folder has its gradient and its value after the steps, of the same
// shape; the batches are [B, T] int32 token ids in the vocabulary with -100 among the labels; the
// logits are [B, T, vocab_size]; meta.json has what the golden tests read.
TEST(GoldenCases, RepositoryCasesAreComplete) {
  for (const std::string& name : repo_case_names()) {
    SCOPED_TRACE(name);
    const testing::GoldenCase c = testing::golden_case(name);
    auto meta_text = read_file(c.file("meta.json"));
    ASSERT_TRUE(meta_text.ok()) << meta_text.status().to_string();
    const auto meta = nlohmann::json::parse(*meta_text);
    auto config_text = read_file(c.model + "/config.json");
    ASSERT_TRUE(config_text.ok()) << config_text.status().to_string();
    const auto config = nlohmann::json::parse(*config_text);
    const int64_t B = meta.at("B"), T = meta.at("T"), V = config.at("vocab_size");
    const int steps = meta.at("adamw").at("steps");
    EXPECT_EQ(meta.at("step_losses").size(), size_t(steps));
    EXPECT_EQ(meta.at("step_grad_norms_before_clip").size(), size_t(steps));
    EXPECT_DOUBLE_EQ(meta.at("step_losses")[0].get<double>(), meta.at("loss").get<double>());
    for (const char* key : {"lr", "beta1", "beta2", "eps", "weight_decay", "clip_grad_norm"})
      EXPECT_TRUE(meta.at("adamw").contains(key)) << key;

    auto model = TensorStore::open(c.model);
    auto fb = TensorStore::open(c.file("forward_backward.safetensors"));
    auto traj = TensorStore::open(c.file("adamw_trajectory.safetensors"));
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    ASSERT_TRUE(fb.ok()) << fb.status().to_string();
    ASSERT_TRUE(traj.ok()) << traj.status().to_string();

    size_t parameters = 0;
    for (const TensorInfo* t : model->tensors()) {
      EXPECT_EQ(t->dtype, DType::kF32) << t->name;
      EXPECT_EQ(shape_of(*fb, "grad." + t->name), t->shape) << t->name;
      EXPECT_EQ(shape_of(*traj, t->name), t->shape) << t->name;
      ++parameters;
    }
    const std::vector<int64_t> bt = {B, T};
    EXPECT_EQ(shape_of(*fb, "logits"), (std::vector<int64_t>{B, T, V}));
    EXPECT_EQ(fb->tensors().size(), parameters + 3);  // grads, input_ids, labels, logits
    EXPECT_EQ(traj->tensors().size(), parameters + 2 * size_t(steps + 1));

    for (int s = 0; s <= steps; ++s) {
      const std::string b = "batch" + std::to_string(s);
      for (const std::string& n : {b + ".input_ids", b + ".labels"}) {
        ASSERT_NE(traj->find(n), nullptr) << n;
        EXPECT_EQ(traj->find(n)->dtype, DType::kI32) << n;
        EXPECT_EQ(traj->find(n)->shape, bt) << n;
      }
      const auto ids = testing::read_i32(*traj, b + ".input_ids");
      const auto labels = testing::read_i32(*traj, b + ".labels");
      int ignored = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_TRUE(ids[i] >= 0 && ids[i] < V) << b << " id " << ids[i];
        EXPECT_TRUE(labels[i] == -100 || (labels[i] >= 0 && labels[i] < V)) << labels[i];
        ignored += labels[i] == -100;
      }
      EXPECT_GT(ignored, 0) << b;
      EXPECT_LT(ignored, int(ids.size())) << b;
    }
    // forward_backward is batch 0 of the trajectory.
    EXPECT_EQ(testing::read_i32(*fb, "input_ids"), testing::read_i32(*traj, "batch0.input_ids"));
    EXPECT_EQ(testing::read_i32(*fb, "labels"), testing::read_i32(*traj, "batch0.labels"));
  }
}

}  // namespace
}  // namespace spillway
