#include "model/parameter-layout.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test-data.h"

namespace spillway {
namespace {

struct Case {
  const char* name;
  uint64_t parameters;  // as transformers' model.num_parameters()
  size_t tensors;
};

class AllModels : public ::testing::TestWithParam<Case> {};

TEST_P(AllModels, ParseAndLoadEveryTensor) {
  SPILLWAY_REQUIRE_DATA();
  const Case& k = GetParam();
  std::string dir = testing::data_path(std::string("models/") + k.name);
  auto config = ModelConfig::load(dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto store = TensorStore::open(dir);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ(store->tensors().size(), k.tensors);
  ParameterLayout layout = ParameterLayout::build(*config);
  ASSERT_TRUE(layout.check(*store).ok()) << layout.check(*store).to_string();
  EXPECT_EQ(layout.parameter_count(), k.parameters);
  EXPECT_EQ(layout.num_blocks(), static_cast<size_t>(config->num_layers + 2));
  for (size_t b = 0; b < layout.num_blocks(); ++b) {
    std::vector<float> block(layout.blocks()[b].numel);
    ASSERT_TRUE(layout.load_block(*store, b, block.data()).ok());
    for (const auto& p : layout.blocks()[b].params) {
      const TensorInfo* t = store->find(p.name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->shape, p.shape) << p.name;
      EXPECT_EQ(t->dtype, DType::kF32);
      const float* src = reinterpret_cast<const float*>(store->data(*t));
      EXPECT_EQ(block[p.offset], src[0]) << p.name;
      EXPECT_EQ(block[p.offset + p.numel - 1], src[p.numel - 1]) << p.name;
      EXPECT_EQ(p.offset % kParamAlignment, 0u);
    }
  }
  ModelSummary s = summarize(layout, &*store);
  EXPECT_EQ(s.parameters, k.parameters);
  EXPECT_EQ(s.dtype, "F32");
  EXPECT_EQ(s.bytes_on_disk, k.parameters * 4);
}

// stories260K: 512·64 + 5·(2·64 + 64·64 + 2·32·64 + 64·64 + 3·172·64) + 64
INSTANTIATE_TEST_SUITE_P(
    Models, AllModels,
    ::testing::Values(
        Case{"stories260K", 512 * 64 + 5 * (2 * 64 + 2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64) + 64,
             47},
        Case{"qwen2-tiny",
             2 * 1000 * 96 + 3 * (2 * 96 + 2 * 96 * 96 + 96 + 2 * (32 * 96 + 32) + 3 * 224 * 96) +
                 96,
             39},
        Case{"llama-mha-tiny", 2 * 700 * 128 + 2 * (2 * 128 + 4 * 128 * 128 + 3 * 344 * 128) + 128,
             21}),
    [](const auto& info) {
      std::string n = info.param.name;
      for (char& c : n)
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
      return n;
    });

TEST(ParameterLayout, WrongConfigNamesTheTensor) {
  SPILLWAY_REQUIRE_DATA();
  auto config = ModelConfig::load(testing::data_path("models/stories260K"));
  ASSERT_TRUE(config.ok());
  auto store = TensorStore::open(testing::data_path("models/stories260K"));
  ASSERT_TRUE(store.ok());
  ModelConfig wrong = *config;
  wrong.num_layers = 6;  // one more layer than the file has
  Status st = ParameterLayout::build(wrong).check(*store);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing tensor 'model.layers.5."), std::string::npos)
      << st.message();
  wrong = *config;
  wrong.intermediate_size = 100;
  st = ParameterLayout::build(wrong).check(*store);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mlp.down_proj.weight' has shape [64, 172]"), std::string::npos)
      << st.message();
  wrong = *config;
  wrong.tie_word_embeddings = false;
  st = ParameterLayout::build(wrong).check(*store);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing tensor 'lm_head.weight'"), std::string::npos);
}

}  // namespace
}  // namespace spillway
