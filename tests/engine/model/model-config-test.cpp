#include "model/model-config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test-data.h"

namespace spillway {
namespace {

TEST(ModelConfig, Stories260K) {
  SPILLWAY_REQUIRE_DATA();
  auto c = ModelConfig::load(testing::data_path("models/stories260K"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_layers, 5);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->intermediate_size, 172);
  EXPECT_EQ(c->vocab_size, 512);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->eos_token_id, 2);
}

TEST(ModelConfig, Qwen2ImpliesBiasAndReadsRopeParameters) {
  SPILLWAY_REQUIRE_DATA();
  auto c = ModelConfig::load(testing::data_path("models/qwen2-tiny/config.json"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
}

TEST(ModelConfig, LlamaMha) {
  SPILLWAY_REQUIRE_DATA();
  auto c = ModelConfig::load(testing::data_path("models/llama-mha-tiny"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->num_heads, c->num_kv_heads);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_FLOAT_EQ(c->rope_theta, 5e5f);
}

nlohmann::json base() {
  return {{"architectures", {"MistralForCausalLM"}},
          {"vocab_size", 100},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2}};
}

TEST(ModelConfig, MistralDefaultsAndLlama3Scaling) {
  auto j = base();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  auto c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "mistral");
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_FLOAT_EQ(c->rope_scaling_factor, 8.0f);
  EXPECT_EQ(c->rope_original_max_position, 8192);
  auto back = ModelConfig::from_json(c->to_json());
  ASSERT_TRUE(back.ok());
  EXPECT_FLOAT_EQ(back->rope_scaling_factor, 8.0f);
  EXPECT_EQ(back->architecture, "MistralForCausalLM");
}

// Qwen3-0.6B's config.json (Hugging Face, Qwen/Qwen3-0.6B), as the tests' Qwen3.
nlohmann::json qwen3_0_6b() {
  return nlohmann::json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

TEST(ModelConfig, Qwen3HasQkNormAndItsOwnHeadDim) {
  auto c = ModelConfig::from_json(qwen3_0_6b());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c->model_type, "qwen3");
  EXPECT_EQ(c->family(), "Qwen3");
  EXPECT_EQ(c->qk_norm, QkNorm::kRms);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->q_dim(), 2048);  // not hidden_size: attention is wider than the residual stream
  EXPECT_EQ(c->kv_dim(), 1024);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->o_proj_bias());
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_EQ(c->eos_token_id, 151645);
  EXPECT_EQ(c->sliding_window, 0);
  // What export writes reads back the same.
  const nlohmann::json j = c->to_json();
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_EQ(j["head_dim"], 128);
  auto back = ModelConfig::from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->qk_norm, QkNorm::kRms);
  EXPECT_EQ(back->head_dim, 128);
  EXPECT_EQ(back->to_json(), j);
  // Qwen3Config's head_dim defaults to 128, not hidden_size / heads.
  auto no_head_dim = qwen3_0_6b();
  no_head_dim.erase("head_dim");
  no_head_dim["hidden_size"] = 512;
  auto d = ModelConfig::from_json(no_head_dim);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->head_dim, 128);
  // attention_bias gives o_proj a bias too (Qwen3Attention), unlike Qwen2.
  auto biased = qwen3_0_6b();
  biased["attention_bias"] = true;
  auto b = ModelConfig::from_json(biased);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->o_proj_bias());
}

TEST(ModelConfig, SlidingWindowAttentionIsRefused) {
  auto j = qwen3_0_6b();
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  auto c = ModelConfig::from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(c.status().message().find("use_sliding_window = true is not supported"),
            std::string::npos)
      << c.status().message();
}

TEST(ModelConfig, MistralHasNoBiasesWhateverTheConfigSays) {
  auto j = base();
  j["attention_bias"] = true;  // MistralAttention's projections have bias=False
  auto c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->attention_bias);
  j["architectures"] = {"LlamaForCausalLM"};
  c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->o_proj_bias());  // LlamaAttention: o_proj bias=config.attention_bias
}

TEST(ModelConfig, UnsupportedArchitectureNamesTheClosest) {
  auto j = qwen3_0_6b();
  j["architectures"] = {"Qwen3MoeForCausalLM"};
  j["model_type"] = "qwen3_moe";
  auto c = ModelConfig::from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(c.status().message(),
            "config.json: architecture 'Qwen3MoeForCausalLM' is not supported; supported: " +
                supported_architectures() + "; closest: Qwen3ForCausalLM (no mixture of experts)");
  j = base();
  j.erase("architectures");
  j["model_type"] = "qwen2_vl";
  c = ModelConfig::from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'qwen2_vl' is not supported"), std::string::npos);
  EXPECT_NE(c.status().message().find("closest: Qwen2ForCausalLM (text only: no vision tower)"),
            std::string::npos)
      << c.status().message();
}

TEST(ModelConfig, UnsupportedArchitectureListsSupported) {
  auto j = base();
  j["architectures"] = {"GPT2LMHeadModel"};
  auto c = ModelConfig::from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(c.status().message().find("GPT2LMHeadModel"), std::string::npos);
  EXPECT_NE(c.status().message().find("Qwen2ForCausalLM"), std::string::npos);
  EXPECT_NE(c.status().message().find("Qwen3ForCausalLM"), std::string::npos);
  EXPECT_NE(c.status().message().find("closest: "), std::string::npos);
}

TEST(ModelConfig, BadFieldsAreNamed) {
  auto j = base();
  j.erase("hidden_size");
  auto c = ModelConfig::from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("hidden_size"), std::string::npos);
  j = base();
  j["num_key_value_heads"] = 3;
  c = ModelConfig::from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("num_key_value_heads"), std::string::npos);
  j = base();
  j["vocab_size"] = "many";
  EXPECT_FALSE(ModelConfig::from_json(j).ok());
}

// Numbers that used to be truncated or wrap (issue 15): each is an error naming the field.
TEST(ModelConfig, NumbersAreNeitherTruncatedNorWrapped) {
  const std::pair<const char*, nlohmann::json> bad[] = {
      {"num_hidden_layers", 5.9},           // was read as 5 layers
      {"num_hidden_layers", 4294967301.0},  // wrapped to 5
      {"num_hidden_layers", 2147483648LL},  // past int
      {"num_hidden_layers", 1000000},       // a million-layer loop until memory runs out
      {"vocab_size", 1e300},
      {"hidden_size", -64},
      {"head_dim", 1 << 16},
      {"rms_norm_eps", 1e300},  // infinite as a float
  };
  for (const auto& [key, value] : bad) {
    auto j = base();
    j[key] = value;
    auto c = ModelConfig::from_json(j);
    ASSERT_FALSE(c.ok()) << key << " = " << value.dump();
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status().message();
  }
  auto j = base();
  j["num_attention_heads"] = j["num_key_value_heads"] = 4096;
  j["head_dim"] = 1024;  // each within bounds, their product (the q projection's rows) not
  auto too_wide = ModelConfig::from_json(j);
  ASSERT_FALSE(too_wide.ok());
  EXPECT_NE(too_wide.status().message().find("num_attention_heads x head_dim"), std::string::npos)
      << too_wide.status().message();

  j = base();
  j["num_hidden_layers"] = 4.0;  // a whole number written as a float is fine
  auto c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->num_layers, 4);
}

TEST(ModelConfig, MissingFolderSaysWhatIsNeeded) {
  auto c = ModelConfig::load("/nonexistent/model");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(c.status().message().find("config.json"), std::string::npos);
}

TEST(ModelConfig, Presets) {
  auto p = model_preset("llama-50m");
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->validate().ok());
  EXPECT_FALSE(model_preset("nope").ok());
}

}  // namespace
}  // namespace spillway
