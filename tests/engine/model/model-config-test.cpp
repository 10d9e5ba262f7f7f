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
  EXPECT_EQ(c->sliding_window, 0);  // absent: none
  auto back = ModelConfig::from_json(c->to_json());
  ASSERT_TRUE(back.ok());
  EXPECT_FLOAT_EQ(back->rope_scaling_factor, 8.0f);
  EXPECT_EQ(back->architecture, "MistralForCausalLM");
  // Mistral-7B-v0.1's window applies to every layer, as MistralModel's mask does.
  j["sliding_window"] = 4096;
  c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->layer_window(0), 4096);
  EXPECT_EQ(c->layer_window(1), 4096);
  EXPECT_EQ(ModelConfig::from_json(c->to_json())->sliding_window, 4096);
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

// microsoft/Phi-3-mini-4k-instruct's config.json (transformers 4.x keys): plain RoPE, a sliding
// window of 2047.
nlohmann::json phi3_mini_4k() {
  return nlohmann::json::parse(R"({
    "architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
    "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "original_max_position_embeddings": 4096, "pad_token_id": 32000,
    "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
    "sliding_window": 2047, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_cache": true, "attention_bias": false, "vocab_size": 32064})");
}

// microsoft/Phi-4-mini-instruct's shape: LongRoPE, partial_rotary_factor 0.75, tied; the factors
// shortened to simple values (48 of each, as its rotary dim of 96 needs).
nlohmann::json phi4_mini() {
  auto j = phi3_mini_4k();
  j["vocab_size"] = 200064;
  j["num_attention_heads"] = 24;
  j["num_key_value_heads"] = 8;
  j["max_position_embeddings"] = 131072;
  j["partial_rotary_factor"] = 0.75;
  j["sliding_window"] = 262144;
  j["tie_word_embeddings"] = true;
  std::vector<double> short_f(48), long_f(48);
  for (int i = 0; i < 48; ++i) short_f[i] = 1.0 + 0.01 * i, long_f[i] = 1.0 + 0.5 * i;
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", short_f}, {"long_factor", long_f}};
  return j;
}

TEST(ModelConfig, Phi3FusedProjectionsAndSlidingWindow) {
  auto c = ModelConfig::from_json(phi3_mini_4k());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "Phi3ForCausalLM");
  EXPECT_EQ(c->family(), "Phi-3 / Phi-4");
  EXPECT_TRUE(c->fused_projections);
  EXPECT_EQ(c->qk_norm, QkNorm::kNone);
  EXPECT_EQ(c->head_dim, 96);
  EXPECT_EQ(c->rotary_dim(), 96);
  EXPECT_FALSE(c->longrope());
  EXPECT_EQ(c->sliding_window, 2047);
  EXPECT_EQ(c->rope_original_max_position, 4096);
  // transformers masks key j for query i when i − j >= 2047, on every layer.
  for (int layer : {0, c->num_layers - 1}) EXPECT_EQ(c->layer_window(layer), 2047) << layer;
  const nlohmann::json j = c->to_json();
  EXPECT_EQ(j["sliding_window"], 2047);
  EXPECT_EQ(j["pad_token_id"], 32000);  // else Phi3Config's default (32000) stands for any vocab
  auto no_pad = phi3_mini_4k();
  no_pad.erase("pad_token_id");  // Phi3Config's default: 32000
  EXPECT_EQ(ModelConfig::from_json(no_pad)->pad_token_id, 32000);
  no_pad["pad_token_id"] = nullptr;  // none
  EXPECT_EQ(ModelConfig::from_json(no_pad)->pad_token_id, -1);
  EXPECT_FALSE(j.contains("attention_bias"));
  auto back = ModelConfig::from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_json(), j);
  EXPECT_TRUE(back->fused_projections);
}

TEST(ModelConfig, Phi4LongRopeAndPartialRotation) {
  auto c = ModelConfig::from_json(phi4_mini());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rotary_dim(), 96);
  ASSERT_TRUE(c->longrope());
  EXPECT_EQ(c->rope_short_factor.size(), 48u);
  EXPECT_FLOAT_EQ(c->rope_long_factor[47], 24.5f);
  // transformers' attention factor: sqrt(1 + ln(131072 / 4096) / ln 4096) = 1.1902380714238083.
  EXPECT_FLOAT_EQ(c->rope_attention_factor, 1.1902380714238083f);
  EXPECT_FALSE(c->rope_attention_factor_given);
  // short_factor up to original_max_position_embeddings tokens, long_factor beyond.
  EXPECT_EQ(&c->rope_factors(4096), &c->rope_short_factor);
  EXPECT_EQ(&c->rope_factors(4097), &c->rope_long_factor);
  auto back = ModelConfig::from_json(c->to_json());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->rope_long_factor, c->rope_long_factor);
  EXPECT_EQ(back->partial_rotary_factor, 0.75);
  EXPECT_EQ(back->rope_attention_factor, c->rope_attention_factor);
  // The older name "su", transformers v5's rope_parameters, and an explicit attention_factor.
  auto j = phi4_mini();
  j["rope_scaling"]["type"] = "su";
  j["rope_scaling"]["attention_factor"] = 1.5;
  c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FLOAT_EQ(c->rope_attention_factor, 1.5f);
  EXPECT_EQ(c->to_json()["rope_scaling"]["attention_factor"], 1.5);
  j = phi4_mini();
  j["rope_parameters"] = j["rope_scaling"];
  j["rope_parameters"]["rope_type"] = "longrope";
  j["rope_parameters"]["rope_theta"] = 250000.0;
  j.erase("rope_scaling");
  c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->longrope());
  EXPECT_FLOAT_EQ(c->rope_theta, 250000.0f);
  // Factors that do not match the rotary dim are named.
  j = phi4_mini();
  j["rope_scaling"]["short_factor"] = {1.0, 2.0};
  c = ModelConfig::from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(
      c.status().message().find("short_factor has 2 values; the rotary dimension 96 needs 48"),
      std::string::npos)
      << c.status().message();
  // Other scalings, and partial rotation outside Phi-3, are refused.
  j = phi4_mini();
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_EQ(ModelConfig::from_json(j).status().code(), ErrorCode::kUnsupported);
  j = base();
  j["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(ModelConfig::from_json(j).status().code(), ErrorCode::kUnsupported);
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

// gemma-3-1b's config.json as the Hub has it (transformers 4.x keys).
nlohmann::json gemma3_1b() {
  return nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "attention_bias": false, "attn_logit_softcapping": null, "final_logit_softcapping": null,
    "bos_token_id": 2, "eos_token_id": [1, 106], "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
    "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 26,
    "num_key_value_heads": 1, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144,
    "torch_dtype": "bfloat16"})");
}

TEST(ModelConfig, Gemma3TextFromTheHubsKeys) {
  auto c = ModelConfig::from_json(gemma3_1b());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->q_dim(), 1024);
  EXPECT_TRUE(c->tie_word_embeddings);  // Gemma3TextConfig's default
  EXPECT_EQ(c->qk_norm, QkNorm::kRms);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_TRUE(c->scale_embeddings);
  EXPECT_EQ(c->mlp_activation, MlpActivation::kGeluTanh);
  EXPECT_FLOAT_EQ(c->norm_weight_offset, 1.0f);
  EXPECT_FLOAT_EQ(c->attention_scale(), 1.0f / 16.0f);
  EXPECT_EQ(c->sliding_window, 512);
  // sliding_window_pattern 6: layers 5, 11, 17, 23 are global.
  for (int i = 0; i < 26; ++i) EXPECT_EQ(c->is_sliding(i), (i + 1) % 6 != 0) << i;
  EXPECT_EQ(c->layer_window(0), 512);
  EXPECT_EQ(c->layer_window(5), 0);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rope_local_theta, 1e4f);
  EXPECT_FLOAT_EQ(c->rope_linear_factor, 0.0f);  // 1B: no scaling
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_EQ(c->eos_token_id, 1);
  // A query at position 1024 attends 512 keys on the 22 local layers and 1024 on the 4 global.
  EXPECT_DOUBLE_EQ(c->attended_keys(1024), 22 * 512.0 + 4 * 1024.0);
  EXPECT_DOUBLE_EQ(c->attention_scores(4), 26 * 10.0);  // a window longer than the sequence
  EXPECT_DOUBLE_EQ(c->attention_scores(1024),
                   22 * (512 * 513 / 2.0 + 512.0 * 512) + 4 * (1024 * 1025 / 2.0));
  // What export writes reads back as the same model.
  auto back = ModelConfig::from_json(c->to_json());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->model_type, "gemma3_text");
  EXPECT_EQ(back->sliding_layers, c->sliding_layers);
  EXPECT_EQ(back->sliding_window, 512);
  EXPECT_FLOAT_EQ(back->query_pre_attn_scalar, 256.0f);
  EXPECT_FLOAT_EQ(back->rope_local_theta, 1e4f);
  EXPECT_EQ(back->to_json(), c->to_json());
  // transformers 5's Gemma3TextConfig refuses a float query_pre_attn_scalar (256.0).
  EXPECT_TRUE(c->to_json()["query_pre_attn_scalar"].is_number_integer());
}

// The 4B+ models' linear scaling of the global layers, and transformers v5's keys (rope_parameters
// per layer type, layer_types), as save_pretrained writes them.
TEST(ModelConfig, Gemma3LinearScalingAndTransformersV5Keys) {
  auto j = gemma3_1b();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  auto c = ModelConfig::from_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FLOAT_EQ(c->rope_linear_factor, 8.0f);

  auto v5 = nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 32, "intermediate_size": 64,
    "num_attention_heads": 2, "num_hidden_layers": 3, "num_key_value_heads": 1,
    "query_pre_attn_scalar": 64, "sliding_window": 8, "vocab_size": 256,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    "sliding_window_pattern": 2,
    "rope_parameters": {
      "full_attention": {"factor": 8.0, "rope_theta": 1000000.0, "rope_type": "linear"},
      "sliding_attention": {"rope_theta": 20000.0, "rope_type": "default"}},
    "tie_word_embeddings": true})");
  c = ModelConfig::from_json(v5);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->sliding_layers, (std::vector<bool>{true, false, true}));  // layer_types wins
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rope_local_theta, 2e4f);
  EXPECT_FLOAT_EQ(c->rope_linear_factor, 8.0f);
  EXPECT_FLOAT_EQ(c->attention_scale(), 0.125f);
  auto back = ModelConfig::from_json(c->to_json());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->sliding_layers, c->sliding_layers);
  EXPECT_FLOAT_EQ(back->rope_linear_factor, 8.0f);
  EXPECT_FLOAT_EQ(back->rope_local_theta, 2e4f);
}

TEST(ModelConfig, Gemma3RefusesWhatItDoesNotImplement) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* says;
  };
  for (const Case& k : {Case{"final_logit_softcapping", 30.0, "final_logit_softcapping"},
                        Case{"attn_logit_softcapping", 50.0, "attn_logit_softcapping"},
                        Case{"use_bidirectional_attention", true, "bidirectional"},
                        Case{"hidden_activation", "gelu", "gelu_pytorch_tanh"},
                        Case{"attention_bias", true, "attention_bias"}}) {
    auto j = gemma3_1b();
    j[k.key] = k.value;
    auto c = ModelConfig::from_json(j);
    ASSERT_FALSE(c.ok()) << k.key;
    EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported) << k.key;
    EXPECT_NE(c.status().message().find(k.says), std::string::npos) << c.status().message();
  }
  auto j = gemma3_1b();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}};
  EXPECT_EQ(ModelConfig::from_json(j).status().code(), ErrorCode::kUnsupported);
  j = gemma3_1b();
  j["layer_types"] = {"sliding_attention"};  // not one per layer
  EXPECT_EQ(ModelConfig::from_json(j).status().code(), ErrorCode::kInvalidArgument);
}

// The multimodal checkpoints (gemma-3-4b-it and up) are another model: refused by name.
TEST(ModelConfig, Gemma3MultimodalIsRefusedWithTheReason) {
  auto j = nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "model_type": "gemma3_text"},
    "vision_config": {"model_type": "siglip_vision_model"}})");
  auto c = ModelConfig::from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(c.status().message().find("multimodal"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("Gemma3ForCausalLM"), std::string::npos);
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
