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

TEST(ModelConfig, UnsupportedArchitectureListsSupported) {
  auto j = base();
  j["architectures"] = {"GPT2LMHeadModel"};
  auto c = ModelConfig::from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(c.status().message().find("GPT2LMHeadModel"), std::string::npos);
  EXPECT_NE(c.status().message().find("Qwen2ForCausalLM"), std::string::npos);
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
