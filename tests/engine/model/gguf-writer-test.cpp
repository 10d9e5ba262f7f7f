// GgufWriter against an independent reader (tests/gguf-reader.h): header, metadata values,
// tensor infos, alignment, and each tensor type's values; the family mapping of model/gguf-arch
// (names, transformations, hyperparameter keys) for every family GGUF export writes.
#include "model/gguf-writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "core/dtype.h"
#include "core/sha256.h"
#include "gguf-reader.h"
#include "model/gguf-arch.h"
#include "test-data.h"

namespace spillway {
namespace {
using nlohmann::json;

std::vector<float> random_values(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::string write_to_file(const GgufWriter& w, const std::string& path) {
  std::string bytes;
  Status st = w.write([&](const void* p, size_t n) {
    bytes.append(static_cast<const char*>(p), n);
    return Status();
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(GgufWriterTest, HeaderMetadataTensorInfosAndAlignment) {
  testing::TempDir tmp;
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 5);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "\xe2\x96\x81the", ""});
  w.set_f32_array("tokenizer.ggml.scores", {0.0f, -1.5f, -1000.0f});
  w.set_i32_array("tokenizer.ggml.token_type", {2, 1, 5});
  w.set_u32("llama.block_count", 6);  // replaced in place, not added twice
  const std::vector<float> a = random_values(3, 1), b = random_values(8, 2),
                           c = random_values(6, 3), q = random_values(64 * 3, 4, 0.05f);
  ASSERT_TRUE(w.add_tensor("a.weight", {3}, GgmlType::kF32, [&] { return a; }).ok());
  ASSERT_TRUE(w.add_tensor("b.weight", {4, 2}, GgmlType::kF16, [&] { return b; }).ok());
  ASSERT_TRUE(w.add_tensor("c.weight", {3, 2}, GgmlType::kBF16, [&] { return c; }).ok());
  ASSERT_TRUE(w.add_tensor("q.weight", {64, 3}, GgmlType::kQ8_0, [&] { return q; }).ok());
  const auto f = testing::read_gguf(write_to_file(w, tmp.path() + "/m.gguf"));

  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.keys,
            (std::vector<std::string>{"general.architecture", "llama.block_count",
                                      "llama.attention.layer_norm_rms_epsilon",
                                      "tokenizer.ggml.add_bos_token", "tokenizer.ggml.tokens",
                                      "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}));
  EXPECT_EQ(f.kv.at("general.architecture").type, 8u);
  EXPECT_EQ(f.kv.at("general.architecture").s(), "llama");
  EXPECT_EQ(f.kv.at("llama.block_count").type, 4u);
  EXPECT_EQ(f.kv.at("llama.block_count").u(), 6u);
  EXPECT_EQ(f.kv.at("llama.attention.layer_norm_rms_epsilon").type, 6u);
  EXPECT_EQ(f.kv.at("llama.attention.layer_norm_rms_epsilon").f(), double{1e-5f});
  EXPECT_TRUE(f.kv.at("tokenizer.ggml.add_bos_token").b());
  const auto& tokens = f.kv.at("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.element_type, 8u);
  ASSERT_EQ(tokens.array.size(), 3u);
  EXPECT_EQ(tokens.array[1].s(), "\xe2\x96\x81the");
  EXPECT_EQ(tokens.array[2].s(), "");
  EXPECT_EQ(f.kv.at("tokenizer.ggml.scores").element_type, 6u);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.scores").array[1].f(), -1.5);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.token_type").element_type, 5u);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.token_type").array[2].i(), 5);

  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.data_start % 32, 0u);
  const std::vector<std::tuple<std::string, std::vector<uint64_t>, uint32_t, uint64_t>> want = {
      {"a.weight", {3}, 0, 12},
      {"b.weight", {4, 2}, 1, 16},
      {"c.weight", {3, 2}, 30, 12},
      {"q.weight", {64, 3}, 8, 6 * 34}};
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& t = f.tensors[i];
    EXPECT_EQ(t.name, std::get<0>(want[i]));
    EXPECT_EQ(t.ne, std::get<1>(want[i]));
    EXPECT_EQ(t.type, std::get<2>(want[i]));
    EXPECT_EQ(t.offset, expected_offset) << t.name;
    EXPECT_EQ(t.offset % 32, 0u);
    expected_offset += (std::get<3>(want[i]) + 31) / 32 * 32;
  }
  EXPECT_EQ(f.bytes.size(), f.data_start + expected_offset);

  // F32 exact; F16 and BF16 within half an ulp of their mantissas (11 and 8 bits).
  for (int i = 0; i < 3; ++i) {
    float x;
    std::memcpy(&x, f.data(f.tensor("a.weight")) + 4 * i, 4);
    EXPECT_EQ(x, a[i]);
  }
  for (int i = 0; i < 8; ++i) {
    uint16_t h;
    std::memcpy(&h, f.data(f.tensor("b.weight")) + 2 * i, 2);
    EXPECT_LE(std::fabs(testing::test_f16_to_f32(h) - b[i]), std::ldexp(std::fabs(b[i]), -11));
  }
  for (int i = 0; i < 6; ++i) {
    uint16_t h;
    std::memcpy(&h, f.data(f.tensor("c.weight")) + 2 * i, 2);
    uint32_t bits = uint32_t{h} << 16;
    float x;
    std::memcpy(&x, &bits, 4);
    EXPECT_LE(std::fabs(x - c[i]), std::ldexp(std::fabs(c[i]), -8));
  }
  // Q8_0: each block's scale is amax / 127 (as fp16) and every value within half a step of it.
  const char* qd = f.data(f.tensor("q.weight"));
  for (int blk = 0; blk < 6; ++blk) {
    uint16_t dh;
    std::memcpy(&dh, qd + 34 * blk, 2);
    const float d = testing::test_f16_to_f32(dh);
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(q[32 * blk + j]));
    EXPECT_NEAR(d, amax / 127, amax / 127 * std::ldexp(1.0f, -11));
    for (int j = 0; j < 32; ++j) {
      const float x = q[32 * blk + j];
      const int8_t qs = static_cast<int8_t>(qd[34 * blk + 2 + j]);
      EXPECT_EQ(qs, static_cast<int8_t>(std::roundf(x / (amax / 127)))) << blk << "," << j;
      // d's fp16 rounding adds up to 127 · d · 2^-11 to the step's half.
      EXPECT_LE(std::fabs(qs * d - x), d / 2 + 127 * d * std::ldexp(1.0f, -11) + 1e-7f);
    }
  }
}

TEST(GgufWriterTest, Q8_0IsGgmlsReferenceOnTies) {
  // x = 1.5 · d rounds half away from zero (roundf), as quantize_row_q8_0_ref.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1
  x[1] = 2.5f, x[2] = -2.5f, x[3] = 0.49f;
  uint8_t out[34];
  quantize_q8_0(x.data(), 32, out);
  uint16_t dh;
  std::memcpy(&dh, out, 2);
  EXPECT_EQ(dh, f32_to_f16(1.0f));
  EXPECT_EQ(static_cast<int8_t>(out[2 + 1]), 3);
  EXPECT_EQ(static_cast<int8_t>(out[2 + 2]), -3);
  EXPECT_EQ(static_cast<int8_t>(out[2 + 3]), 0);
  // An all-zero block has d = 0 and zeros, not NaN.
  std::vector<float> z(32, 0.0f);
  quantize_q8_0(z.data(), 32, out);
  for (int i = 0; i < 34; ++i) EXPECT_EQ(out[i], 0);
}

TEST(GgufWriterTest, RejectsWhatGgmlCannotLoad) {
  GgufWriter w;
  auto v = [] { return std::vector<float>(66, 0.0f); };
  Status st = w.add_tensor("odd.weight", {33, 2}, GgmlType::kQ8_0, v);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("multiple of 32"), std::string::npos) << st.message();
  st = w.add_tensor(std::string(64, 'n'), {2}, GgmlType::kF32, v);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(w.add_tensor("x.weight", {2}, GgmlType::kF32, v).ok());
  EXPECT_EQ(w.add_tensor("x.weight", {2}, GgmlType::kF32, v).code(), ErrorCode::kInvalidArgument);
  // A callback giving the wrong number of values stops the write.
  Status written = w.write([](const void*, size_t) { return Status(); });
  EXPECT_EQ(written.code(), ErrorCode::kInternal);
}

TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first tail block.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// Hugging Face names of one layer, and what llama.cpp calls them (gguf-py tensor_mapping.py).
TEST(GgufArchTest, TensorNamesPerFamily) {
  const json llama = {{"num_attention_heads", 8}, {"num_key_value_heads", 4}};
  auto name = [](const std::string& arch, const json& hp, const std::string& hf) {
    auto r = gguf_tensor_name(arch, hp, hf);
    EXPECT_TRUE(r.ok()) << hf << ": " << r.status().to_string();
    return r.ok() ? *r : GgufTensorName{};
  };
  EXPECT_EQ(name("llama", llama, "model.embed_tokens.weight").name, "token_embd.weight");
  EXPECT_EQ(name("llama", llama, "model.norm.weight").name, "output_norm.weight");
  EXPECT_EQ(name("llama", llama, "lm_head.weight").name, "output.weight");
  EXPECT_EQ(name("llama", llama, "model.layers.12.input_layernorm.weight").name,
            "blk.12.attn_norm.weight");
  EXPECT_EQ(name("llama", llama, "model.layers.0.self_attn.o_proj.weight").name,
            "blk.0.attn_output.weight");
  EXPECT_EQ(name("llama", llama, "model.layers.0.post_attention_layernorm.weight").name,
            "blk.0.ffn_norm.weight");
  EXPECT_EQ(name("llama", llama, "model.layers.0.mlp.gate_proj.weight").name,
            "blk.0.ffn_gate.weight");
  EXPECT_EQ(name("llama", llama, "model.layers.0.mlp.up_proj.weight").name, "blk.0.ffn_up.weight");
  EXPECT_EQ(name("llama", llama, "model.layers.0.mlp.down_proj.weight").name,
            "blk.0.ffn_down.weight");
  // Llama's q and k are permuted, over the query heads and the kv heads; v is not.
  GgufTensorName q = name("llama", llama, "model.layers.1.self_attn.q_proj.weight");
  GgufTensorName k = name("llama", llama, "model.layers.1.self_attn.k_proj.bias");
  EXPECT_EQ(q.name, "blk.1.attn_q.weight");
  EXPECT_EQ(q.transform, GgufTransform::kRopePermute);
  EXPECT_EQ(q.permute_heads, 8);
  EXPECT_EQ(k.name, "blk.1.attn_k.bias");
  EXPECT_EQ(k.permute_heads, 4);
  EXPECT_EQ(name("llama", llama, "model.layers.1.self_attn.v_proj.weight").transform,
            GgufTransform::kNone);
  // Qwen2 (biases) and Qwen3 (q/k norms) keep Hugging Face's layout: llama.cpp runs them NeoX.
  GgufTensorName qb = name("qwen2", llama, "model.layers.2.self_attn.q_proj.bias");
  EXPECT_EQ(qb.name, "blk.2.attn_q.bias");
  EXPECT_EQ(qb.transform, GgufTransform::kNone);
  EXPECT_EQ(name("qwen3", llama, "model.layers.2.self_attn.q_norm.weight").name,
            "blk.2.attn_q_norm.weight");
  EXPECT_EQ(name("qwen3", llama, "model.layers.2.self_attn.k_norm.weight").name,
            "blk.2.attn_k_norm.weight");
  EXPECT_EQ(name("qwen3", llama, "model.layers.2.self_attn.k_proj.weight").transform,
            GgufTransform::kNone);
  // Gemma 3: four norms per layer, each + 1, and q/k norms + 1 too; projections untouched.
  const std::vector<std::pair<std::string, std::string>> gemma = {
      {"input_layernorm", "attn_norm"},
      {"post_attention_layernorm", "post_attention_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"}};
  for (const auto& [hf, gg] : gemma) {
    GgufTensorName n = name("gemma3", llama, "model.layers.3." + hf + ".weight");
    EXPECT_EQ(n.name, "blk.3." + gg + ".weight");
    EXPECT_EQ(n.transform, GgufTransform::kAddOne) << hf;
  }
  EXPECT_EQ(name("gemma3", llama, "model.norm.weight").transform, GgufTransform::kAddOne);
  EXPECT_EQ(name("gemma3", llama, "model.layers.3.self_attn.q_proj.weight").transform,
            GgufTransform::kNone);
  // Phi-3: fused qkv and gate_up, as llama.cpp's phi3 reads them.
  EXPECT_EQ(name("phi3", llama, "model.layers.4.self_attn.qkv_proj.weight").name,
            "blk.4.attn_qkv.weight");
  EXPECT_EQ(name("phi3", llama, "model.layers.4.mlp.gate_up_proj.weight").name,
            "blk.4.ffn_up.weight");
  EXPECT_EQ(name("phi3", llama, "model.layers.4.post_attention_layernorm.weight").name,
            "blk.4.ffn_norm.weight");
  // A tensor llama.cpp has no place for is an error that names it.
  auto bad = gguf_tensor_name("llama", llama, "model.layers.0.mlp.experts.0.weight");
  EXPECT_EQ(bad.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(bad.status().message().find("mlp.experts.0"), std::string::npos);
}

TEST(GgufArchTest, ArchitecturesAndF32Tensors) {
  EXPECT_EQ(*gguf_architecture("LlamaForCausalLM"), "llama");
  EXPECT_EQ(*gguf_architecture("MistralForCausalLM"), "llama");
  EXPECT_EQ(*gguf_architecture("Qwen2ForCausalLM"), "qwen2");
  EXPECT_EQ(*gguf_architecture("Qwen3ForCausalLM"), "qwen3");
  EXPECT_EQ(*gguf_architecture("Gemma3ForCausalLM"), "gemma3");
  EXPECT_EQ(*gguf_architecture("Phi3ForCausalLM"), "phi3");
  auto bad = gguf_architecture("GPTNeoXForCausalLM");
  EXPECT_EQ(bad.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(bad.status().message().find("Qwen3ForCausalLM"), std::string::npos);
  EXPECT_TRUE(gguf_keeps_f32("blk.0.attn_norm.weight", 1));
  EXPECT_TRUE(gguf_keeps_f32("blk.0.attn_q.bias", 1));
  EXPECT_TRUE(gguf_keeps_f32("blk.0.attn_q_norm.weight", 1));
  EXPECT_FALSE(gguf_keeps_f32("blk.0.attn_q.weight", 2));
  EXPECT_FALSE(gguf_keeps_f32("token_embd.weight", 2));
}

// convert's LlamaModel.permute: reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2).
TEST(GgufArchTest, RopePermuteMatchesConvert) {
  const int heads = 2, rows = 8, cols = 3;  // 4 rows per head: halves [0,1] and [2,3]
  std::vector<float> w(rows * cols);
  for (int i = 0; i < rows * cols; ++i) w[i] = static_cast<float>(i);
  std::vector<float> p = rope_permute(w, rows, cols, heads);
  // Per head, rows interleave the two halves: 0, 2, 1, 3.
  const int order[rows] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) EXPECT_EQ(p[r * cols + c], w[order[r] * cols + c]);
}

testing::GgufFile hparams_of(const std::string& arch, const json& hp) {
  testing::TempDir tmp;
  GgufWriter w;
  Status st = set_gguf_hparams(arch, hp, GgufFileType::kMostlyF16, w);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return testing::read_gguf(write_to_file(w, tmp.path() + "/h.gguf"));
}

TEST(GgufArchTest, HyperparameterKeysPerFamily) {
  const json base = {{"num_hidden_layers", 2},   {"max_position_embeddings", 512},
                     {"hidden_size", 64},        {"intermediate_size", 128},
                     {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                     {"rms_norm_eps", 1e-6},     {"rope_theta", 1e6},
                     {"vocab_size", 1000},       {"head_dim", 32}};
  auto llama = hparams_of("llama", base);
  EXPECT_EQ(llama.kv.at("llama.block_count").u(), 2u);
  EXPECT_EQ(llama.kv.at("llama.context_length").u(), 512u);
  EXPECT_EQ(llama.kv.at("llama.embedding_length").u(), 64u);
  EXPECT_EQ(llama.kv.at("llama.feed_forward_length").u(), 128u);
  EXPECT_EQ(llama.kv.at("llama.attention.head_count").u(), 4u);
  EXPECT_EQ(llama.kv.at("llama.attention.head_count_kv").u(), 2u);
  EXPECT_EQ(llama.kv.at("llama.rope.freq_base").f(), 1e6);
  EXPECT_EQ(llama.kv.at("llama.attention.layer_norm_rms_epsilon").f(), double{1e-6f});
  EXPECT_EQ(llama.kv.at("llama.attention.key_length").u(), 32u);  // head_dim != hidden / heads
  EXPECT_EQ(llama.kv.at("llama.vocab_size").u(), 1000u);
  EXPECT_EQ(llama.kv.at("llama.rope.dimension_count").u(), 32u);
  EXPECT_EQ(llama.kv.at("general.file_type").u(), 1u);
  // Qwen2/Qwen3 write neither vocab_size nor rope.dimension_count (Qwen2Model has no such lines).
  auto qwen3 = hparams_of("qwen3", base);
  EXPECT_EQ(qwen3.kv.count("qwen3.vocab_size"), 0u);
  EXPECT_EQ(qwen3.kv.at("qwen3.attention.value_length").u(), 32u);
  // Linear and YaRN rope scaling.
  json yarn = base;
  yarn["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  auto qy = hparams_of("qwen2", yarn);
  EXPECT_EQ(qy.kv.at("qwen2.rope.scaling.type").s(), "yarn");
  EXPECT_EQ(qy.kv.at("qwen2.rope.scaling.factor").f(), 4.0);
  EXPECT_EQ(qy.kv.at("qwen2.rope.scaling.original_context_length").u(), 32768u);
  // Gemma 3: the sliding window, the local layers' RoPE base, and its defaults.
  json gemma = base;
  gemma.erase("max_position_embeddings");
  gemma["sliding_window"] = 512;
  gemma["rope_local_base_freq"] = 10000.0;
  gemma["head_dim"] = 256;
  auto g = hparams_of("gemma3", gemma);
  EXPECT_EQ(g.kv.at("gemma3.context_length").u(), 131072u);
  EXPECT_EQ(g.kv.at("gemma3.attention.sliding_window").u(), 512u);
  EXPECT_EQ(g.kv.at("gemma3.rope.freq_base_swa").f(), 10000.0);
  EXPECT_EQ(g.kv.at("gemma3.rope.freq_base").f(), 1e6);
  EXPECT_EQ(g.kv.at("gemma3.attention.key_length").u(), 256u);
  // Phi-3: its own keys, original context and no key_length.
  json phi = base;
  phi["original_max_position_embeddings"] = 4096;
  phi["sliding_window"] = 2047;
  auto p = hparams_of("phi3", phi);
  EXPECT_EQ(p.kv.at("phi3.rope.scaling.original_context_length").u(), 4096u);
  EXPECT_EQ(p.kv.at("phi3.rope.dimension_count").u(), 16u);  // hidden / heads
  EXPECT_EQ(p.kv.at("phi3.attention.sliding_window").u(), 2047u);
  EXPECT_EQ(p.kv.count("phi3.attention.key_length"), 0u);
}

// llama.cpp's gemma3 takes every sixth layer as global (il % 6 == 5) unless the file has
// attention.sliding_window_pattern; convert never writes it. A Gemma 3 whose layer_types differ
// (gemma3-tiny's [sliding, full, sliding]) ran its global layer windowed in llama.cpp: prompt
// logits 0.22 rel L2 from Spillway's and transformers'. Such a file names every layer.
TEST(GgufArchTest, GemmaLayerTypesThatAreNotEverySixthAreWritten) {
  const json base = {{"num_hidden_layers", 3},   {"hidden_size", 64},
                     {"intermediate_size", 128}, {"num_attention_heads", 2},
                     {"num_key_value_heads", 1}, {"head_dim", 32},
                     {"sliding_window", 8},      {"rms_norm_eps", 1e-6}};
  json tiny = base;
  tiny["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  auto t = hparams_of("gemma3", tiny);
  ASSERT_EQ(t.kv.count("gemma3.attention.sliding_window_pattern"), 1u);
  const testing::GgufValue& pattern = t.kv.at("gemma3.attention.sliding_window_pattern");
  EXPECT_EQ(pattern.element_type, 7u);  // bool, as convert's add_sliding_window_pattern
  ASSERT_EQ(pattern.array.size(), 3u);
  EXPECT_TRUE(pattern.array[0].b());
  EXPECT_FALSE(pattern.array[1].b());
  EXPECT_TRUE(pattern.array[2].b());
  // sliding_window_pattern 2 without layer_types: transformers' (il + 1) % 2 != 0.
  json every_second = base;
  every_second["sliding_window_pattern"] = 2;
  auto e = hparams_of("gemma3", every_second);
  const auto& p2 = e.kv.at("gemma3.attention.sliding_window_pattern").array;
  ASSERT_EQ(p2.size(), 3u);
  EXPECT_TRUE(p2[0].b());
  EXPECT_FALSE(p2[1].b());
  EXPECT_TRUE(p2[2].b());
  // Gemma 3's own: every sixth layer global, as llama.cpp assumes; no key, as convert writes.
  json published = base;
  published["num_hidden_layers"] = 7;
  published["layer_types"] = json::array();
  for (int il = 0; il < 7; ++il)
    published["layer_types"].push_back(il % 6 == 5 ? "full_attention" : "sliding_attention");
  EXPECT_EQ(hparams_of("gemma3", published).kv.count("gemma3.attention.sliding_window_pattern"),
            0u);
  EXPECT_EQ(hparams_of("gemma3", base).kv.count("gemma3.attention.sliding_window_pattern"), 0u);
}

TEST(GgufArchTest, AValueOfTheWrongTypeIsAClearError) {
  GgufWriter w;
  const json hp = {{"num_hidden_layers", "two"}, {"hidden_size", 64}};
  Status st = set_gguf_hparams("qwen2", hp, GgufFileType::kMostlyF16, w);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("config.json"), std::string::npos) << st.message();
  auto name = gguf_tensor_name("llama", json{{"num_attention_heads", "8"}},
                               "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(name.status().code(), ErrorCode::kInvalidArgument);
  const json phi = {{"hidden_size", 64},        {"num_attention_heads", 4},
                    {"num_key_value_heads", 4}, {"max_position_embeddings", 4096},
                    {"intermediate_size", 128}, {"num_hidden_layers", 2},
                    {"rms_norm_eps", 1e-5}};
  st = set_gguf_hparams("phi3", phi, GgufFileType::kMostlyF16, w);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("original_max_position_embeddings"), std::string::npos);
}

TEST(GgufArchTest, Llama3RopeFreqs) {
  // rope_freqs of Llama 3.2 1B's rope_scaling (factor 32), as convert's generate_extra_tensors.
  const json hp = {{"hidden_size", 64},
                   {"num_attention_heads", 4},
                   {"head_dim", 16},
                   {"rope_theta", 500000.0},
                   {"rope_scaling",
                    {{"rope_type", "llama3"},
                     {"factor", 32.0},
                     {"low_freq_factor", 1.0},
                     {"high_freq_factor", 4.0},
                     {"original_max_position_embeddings", 8192}}}};
  GgufWriter w;
  auto extra = gguf_extra_tensors("llama", hp, w);
  ASSERT_TRUE(extra.ok());
  ASSERT_EQ(extra->size(), 1u);
  const auto& f = (*extra)[0];
  EXPECT_EQ(f.name, "rope_freqs.weight");
  ASSERT_EQ(f.values.size(), 8u);
  // convert's values, read from its output for this config (torch float32 arithmetic): high
  // frequencies kept, low ones divided by the factor, one smoothed between.
  const std::vector<float> want = {1, 1, 1, 1, 3.2922627925872803f, 32, 32, 32};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(f.values[i], want[i]) << i;  // bit for bit
}

}  // namespace
}  // namespace spillway
