#include "model/parameter-layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

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

// gemma-3-1b's layout against transformers' Gemma3ForCausalLM of the same config: every tensor of
// a layer with its Hugging Face name and shape, and model.num_parameters() (999,885,952 with the
// tied head).
TEST(ParameterLayout, Gemma3MatchesTransformers) {
  auto config = ModelConfig::from_json(nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": 256,
    "hidden_size": 1152, "intermediate_size": 6912, "num_attention_heads": 4,
    "num_hidden_layers": 26, "num_key_value_heads": 1, "query_pre_attn_scalar": 256,
    "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144})"));
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  ParameterLayout layout = ParameterLayout::build(*config);
  EXPECT_EQ(layout.parameter_count(), 999885952u);
  const std::map<std::string, std::vector<int64_t>> want = {
      {"model.layers.0.self_attn.q_proj.weight", {1024, 1152}},
      {"model.layers.0.self_attn.k_proj.weight", {256, 1152}},
      {"model.layers.0.self_attn.v_proj.weight", {256, 1152}},
      {"model.layers.0.self_attn.o_proj.weight", {1152, 1024}},
      {"model.layers.0.self_attn.q_norm.weight", {256}},
      {"model.layers.0.self_attn.k_norm.weight", {256}},
      {"model.layers.0.mlp.gate_proj.weight", {6912, 1152}},
      {"model.layers.0.mlp.up_proj.weight", {6912, 1152}},
      {"model.layers.0.mlp.down_proj.weight", {1152, 6912}},
      {"model.layers.0.input_layernorm.weight", {1152}},
      {"model.layers.0.post_attention_layernorm.weight", {1152}},
      {"model.layers.0.pre_feedforward_layernorm.weight", {1152}},
      {"model.layers.0.post_feedforward_layernorm.weight", {1152}}};
  std::map<std::string, std::vector<int64_t>> got;
  for (const ParamView& p : layout.layer(0).params) got[p.name] = p.shape;
  EXPECT_EQ(got, want);
  // Gemma's pre_feedforward_layernorm is the norm before the MLP (Llama's
  // post_attention_layernorm); its post_attention_layernorm norms the attention's output.
  const LayerOffsets& o = layout.layer_offsets();
  EXPECT_EQ(layout.layer(0).find("model.layers.0.pre_feedforward_layernorm.weight")->offset,
            o.mlp_norm);
  EXPECT_EQ(layout.layer(0).find("model.layers.0.post_attention_layernorm.weight")->offset,
            o.post_attn_norm);
  EXPECT_EQ(layout.layer(0).find("model.layers.0.post_feedforward_layernorm.weight")->offset,
            o.post_mlp_norm);
  EXPECT_EQ(layout.layer(0).find("model.layers.0.self_attn.q_norm.weight")->offset, o.q_norm);
  EXPECT_EQ(layout.head().params.size(), 1u);  // model.norm.weight; the head is tied
  EXPECT_EQ(layout.head_lm_offset(), kNoParam);
  // inspect's summary names what sets the family apart.
  const std::string summary = summarize(layout, nullptr).to_string(*config);
  EXPECT_NE(summary.find("q/k norm"), std::string::npos) << summary;
  EXPECT_NE(summary.find("GeGLU (tanh)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("sliding window 512 on 22 of 26 layers (rope theta 10000)"),
            std::string::npos)
      << summary;
}

// The layout of a config.json against transformers' own count (model.num_parameters() of the
// model built from that config on the meta device, transformers 5.24) and the tensors' names and
// shapes.
ParameterLayout layout_of(const std::string& config_json) {
  auto c = ModelConfig::from_json(nlohmann::json::parse(config_json));
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return ParameterLayout::build(c.ok() ? *c : ModelConfig{});
}

std::vector<int64_t> shape_of(const ParameterLayout& l, int layer, const std::string& name) {
  const ParamView* p = l.layer(layer).find("model.layers." + std::to_string(layer) + "." + name);
  return p ? p->shape : std::vector<int64_t>{};
}

TEST(ParameterLayout, Qwen3) {
  // Qwen/Qwen3-0.6B's shape: heads of 128 (16 query, 8 key/value) in a 1024-wide stream, tied.
  const ParameterLayout l = layout_of(R"({"architectures": ["Qwen3ForCausalLM"],
      "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
      "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
      "tie_word_embeddings": true, "use_sliding_window": false})");
  EXPECT_EQ(l.parameter_count(), 596049920u);
  EXPECT_EQ(l.layer(0).params.size(), 11u);  // transformers: 310 tensors = 28 · 11 + 2
  EXPECT_EQ(shape_of(l, 3, "self_attn.q_proj.weight"), (std::vector<int64_t>{2048, 1024}));
  EXPECT_EQ(shape_of(l, 3, "self_attn.k_proj.weight"), (std::vector<int64_t>{1024, 1024}));
  EXPECT_EQ(shape_of(l, 3, "self_attn.o_proj.weight"), (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(shape_of(l, 3, "self_attn.q_norm.weight"), (std::vector<int64_t>{128}));
  EXPECT_EQ(shape_of(l, 3, "self_attn.k_norm.weight"), (std::vector<int64_t>{128}));
  const LayerOffsets& o = l.layer_offsets();
  EXPECT_EQ(o.q_norm, l.layer(0).find("model.layers.0.self_attn.q_norm.weight")->offset);
  EXPECT_EQ(o.k_norm, l.layer(0).find("model.layers.0.self_attn.k_norm.weight")->offset);
  EXPECT_EQ(o.bq, kNoParam);
  EXPECT_EQ(o.bo, kNoParam);
  EXPECT_FALSE(l.layer(0).find("model.layers.0.self_attn.q_norm.weight")->decay);  // 1-D: no decay
  EXPECT_NE(summarize(l, nullptr).to_string(l.config()).find("q/k norm"), std::string::npos);
  // With attention_bias, q/k/v and o_proj carry biases (Qwen3Attention).
  const ParameterLayout b = layout_of(R"({"architectures": ["Qwen3ForCausalLM"],
      "model_type": "qwen3", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 24,
      "attention_bias": true, "tie_word_embeddings": true})");
  EXPECT_EQ(b.parameter_count(), 31328u);
  EXPECT_EQ(shape_of(b, 1, "self_attn.o_proj.bias"), (std::vector<int64_t>{32}));
  EXPECT_EQ(shape_of(b, 1, "self_attn.k_proj.bias"), (std::vector<int64_t>{24}));
}

TEST(ParameterLayout, Phi3KeepsItsFusedTensors) {
  // microsoft/Phi-3-mini-4k-instruct's shape: qkv_proj [3 · 3072, 3072], gate_up_proj [2 · 8192,
  // 3072], as on disk; the maths sees q/k/v and gate/up as their row ranges.
  const ParameterLayout l = layout_of(R"({"architectures": ["Phi3ForCausalLM"],
      "model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
      "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
      "sliding_window": 2047, "tie_word_embeddings": false})");
  EXPECT_EQ(l.parameter_count(), 3821079552u);
  EXPECT_EQ(l.layer(0).params.size(), 6u);  // transformers: 195 tensors = 32 · 6 + 3
  EXPECT_EQ(shape_of(l, 31, "self_attn.qkv_proj.weight"), (std::vector<int64_t>{9216, 3072}));
  EXPECT_EQ(shape_of(l, 31, "mlp.gate_up_proj.weight"), (std::vector<int64_t>{16384, 3072}));
  EXPECT_EQ(l.layer(0).find("model.layers.0.self_attn.q_proj.weight"), nullptr);
  const LayerOffsets& o = l.layer_offsets();
  const size_t qkv = l.layer(0).find("model.layers.0.self_attn.qkv_proj.weight")->offset;
  EXPECT_EQ(o.wq, qkv);
  EXPECT_EQ(o.wk, qkv + size_t(3072) * 3072);  // rows [q_dim, q_dim + kv_dim)
  EXPECT_EQ(o.wv, qkv + size_t(2) * 3072 * 3072);
  const size_t gate_up = l.layer(0).find("model.layers.0.mlp.gate_up_proj.weight")->offset;
  EXPECT_EQ(o.w_gate, gate_up);  // gate first, as Phi3MLP's chunk(2)
  EXPECT_EQ(o.w_up, gate_up + size_t(8192) * 3072);
  EXPECT_EQ(o.bq, kNoParam);
  EXPECT_EQ(o.q_norm, kNoParam);
  // Phi-4-mini's shape: GQA 24/8, tied, rotary 96 of 128.
  const ParameterLayout m = layout_of(R"({"architectures": ["Phi3ForCausalLM"],
      "model_type": "phi3", "vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 8192,
      "num_hidden_layers": 32, "num_attention_heads": 24, "num_key_value_heads": 8,
      "partial_rotary_factor": 0.75, "tie_word_embeddings": true})");
  EXPECT_EQ(m.parameter_count(), 3836021760u);
  EXPECT_EQ(shape_of(m, 0, "self_attn.qkv_proj.weight"), (std::vector<int64_t>{5120, 3072}));
  EXPECT_NE(summarize(m, nullptr).to_string(m.config()).find("rotary 96"), std::string::npos);
}

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
