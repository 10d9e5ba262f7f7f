// The tokenizer half of GGUF export (data/gguf-vocab) on real tokenizers: SentencePiece
// (stories260K's tokenizer.model) and byte-level BPE (Qwen2.5, Llama 3, GPT-2), against what
// llama.cpp's convert_hf_to_gguf.py derives from the same files. The pre-tokenizer hashes below are
// convert's get_vocab_base_pre run with transformers on these folders.
#include "data/gguf-vocab.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "data/tokenizer.h"
#include "gguf-reader.h"
#include "test-data.h"

namespace spillway {
namespace {
using nlohmann::json;

void fs_copy(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

testing::GgufFile vocab_of(const std::string& arch, const json& hp, const std::string& path,
                           GgufVocabInfo* info) {
  testing::TempDir tmp;
  GgufWriter w;
  auto r = set_gguf_vocab(arch, hp, path, w);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (r.ok()) *info = *r;
  std::string bytes;
  EXPECT_TRUE(w.write([&](const void* p, size_t n) {
                 bytes.append(static_cast<const char*>(p), n);
                 return Status();
               }).ok());
  const std::string file = tmp.path() + "/v.gguf";
  std::ofstream(file, std::ios::binary) << bytes;
  return testing::read_gguf(file);
}

TEST(GgufVocabTest, PreTokenizerHashesAreConverts) {
  SPILLWAY_REQUIRE_DATA();
  // transformers' tokenizer.encode(chktxt) hashed by convert: qwen2.5 and qwen3 e636dc30...
  // ("qwen2"), llama3 c136ed14... ("smaug-bpe"), gpt2 3ce83efd... ("gpt-2").
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"qwen2.5", "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "qwen2"},
      {"qwen3", "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "qwen2"},
      {"llama3", "c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d", "smaug-bpe"},
      {"gpt2", "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454", "gpt-2"}};
  for (const auto& [name, hash, pre] : cases) {
    auto tok = Tokenizer::load(testing::data_path("tokenizers/" + name + "/tokenizer.json"));
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    auto ids = (*tok)->encode_with_special(gguf_pre_tokenizer_check_text());
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(gguf_pre_tokenizer_hash(*ids), hash) << name;
    EXPECT_EQ(gguf_pre_tokenizer_name(hash), pre) << name;
  }
  EXPECT_EQ(gguf_pre_tokenizer_name("0000"), "");
}

TEST(GgufVocabTest, SentencePieceVocabulary) {
  SPILLWAY_REQUIRE_DATA();
  GgufVocabInfo info;
  const json hp = {{"vocab_size", 512}, {"bos_token_id", 1}, {"eos_token_id", 2}};
  auto f = vocab_of("llama", hp, testing::data_path("models/stories260K"), &info);
  EXPECT_EQ(info.model, "llama");
  EXPECT_EQ(f.kv.at("tokenizer.ggml.model").s(), "llama");
  EXPECT_EQ(f.kv.at("tokenizer.ggml.pre").s(), "default");
  const auto& tokens = f.kv.at("tokenizer.ggml.tokens").array;
  const auto& types = f.kv.at("tokenizer.ggml.token_type").array;
  const auto& scores = f.kv.at("tokenizer.ggml.scores").array;
  ASSERT_EQ(tokens.size(), 512u);
  ASSERT_EQ(types.size(), 512u);
  ASSERT_EQ(scores.size(), 512u);
  EXPECT_EQ(tokens[0].s(), "<unk>");
  EXPECT_EQ(types[0].i(), 3);  // added_tokens_decoder marks it special: CONTROL, as convert
  EXPECT_EQ(tokens[1].s(), "<s>");
  EXPECT_EQ(types[1].i(), 3);
  EXPECT_EQ(scores[1].f(), -1000.0);
  EXPECT_EQ(tokens[3].s(), "<0x00>");
  EXPECT_EQ(types[3].i(), 6);  // BYTE
  EXPECT_EQ(types[300].i(), 1);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.bos_token_id").u(), 1u);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.eos_token_id").u(), 2u);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.unknown_token_id").u(), 0u);
  EXPECT_TRUE(f.kv.at("tokenizer.ggml.add_bos_token").b());
  EXPECT_FALSE(f.kv.at("tokenizer.ggml.add_eos_token").b());
  EXPECT_EQ(f.kv.count("tokenizer.ggml.merges"), 0u);
  EXPECT_EQ(f.kv.count("tokenizer.chat_template"), 0u);
  EXPECT_EQ(info.stop, (std::vector<std::string>{"</s>"}));
}

// Gemma3Model.set_vocab writes add_space_prefix false, true of Gemma's own tokenizer.model but
// not of Llama 2's on a Gemma model: llama.cpp then tokenized "Once upon" as [1, 26222 "Once",
// 2501] where Spillway and transformers give [1, 9038 "U+2581 Once", 2501]. The key is the model's
// own add_dummy_prefix.
TEST(GgufVocabTest, GemmaSpacePrefixIsTheTokenizerModels) {
  SPILLWAY_REQUIRE_DATA();
  const json hp = {{"vocab_size", 32000}, {"bos_token_id", 1}, {"eos_token_id", 2}};
  GgufVocabInfo info;
  auto f = vocab_of("gemma3", hp, testing::data_path("tokenizers/llama2"), &info);
  ASSERT_EQ(f.kv.count("tokenizer.ggml.add_space_prefix"), 1u);
  EXPECT_TRUE(f.kv.at("tokenizer.ggml.add_space_prefix").b());
  EXPECT_EQ(f.kv.at("tokenizer.ggml.tokens").array[9038].s(), "\xe2\x96\x81Once");
}

TEST(GgufVocabTest, ByteLevelBpeVocabulary) {
  SPILLWAY_REQUIRE_DATA();
  GgufVocabInfo info;
  // A model whose embedding is larger than the tokenizer (Qwen2.5's 151936 rows, 151665 tokens).
  const json hp = {{"vocab_size", 151936}, {"bos_token_id", nullptr}, {"eos_token_id", 151645}};
  auto f = vocab_of("qwen2", hp, testing::data_path("tokenizers/qwen2.5"), &info);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.model").s(), "gpt2");
  EXPECT_EQ(f.kv.at("tokenizer.ggml.pre").s(), "qwen2");
  EXPECT_TRUE(info.notes.empty());
  const auto& tokens = f.kv.at("tokenizer.ggml.tokens").array;
  const auto& types = f.kv.at("tokenizer.ggml.token_type").array;
  ASSERT_EQ(tokens.size(), 151936u);
  EXPECT_EQ(tokens[0].s(), "!");
  EXPECT_EQ(tokens[220].s(), "\xc4\xa0");  // "Ġ", the byte-level space
  EXPECT_EQ(tokens[151643].s(), "<|endoftext|>");
  EXPECT_EQ(types[151643].i(), 3);
  EXPECT_EQ(tokens[151645].s(), "<|im_end|>");
  EXPECT_EQ(tokens[151665].s(), "[PAD151665]");
  EXPECT_EQ(types[151665].i(), 5);
  EXPECT_EQ(f.kv.count("tokenizer.ggml.scores"), 0u);
  const auto& merges = f.kv.at("tokenizer.ggml.merges").array;
  EXPECT_EQ(merges.size(), 151387u);
  EXPECT_EQ(merges[0].s(), "\xc4\xa0 \xc4\xa0");
  // tokenizer_config.json (the instruct tokenizer): eos <|im_end|> and pad <|endoftext|> by
  // content; no bos; post-processor ByteLevel: add_bos false.
  EXPECT_EQ(f.kv.at("tokenizer.ggml.eos_token_id").u(), 151645u);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.padding_token_id").u(), 151643u);
  EXPECT_EQ(f.kv.count("tokenizer.ggml.bos_token_id"), 0u);
  EXPECT_FALSE(f.kv.at("tokenizer.ggml.add_bos_token").b());
  EXPECT_NE(f.kv.at("tokenizer.chat_template").s().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(info.stop, (std::vector<std::string>{"<|im_end|>"}));
}

// A pre-tokenizer convert's table does not know (GPT-2's with a prefix space added): written as
// "default", and the note says so, with the hash to look up.
TEST(GgufVocabTest, AnUnknownPreTokenizerIsWrittenAsDefaultWithANote) {
  SPILLWAY_REQUIRE_DATA();
  testing::TempDir tmp;
  auto text = read_file(testing::data_path("tokenizers/gpt2/tokenizer.json"));
  ASSERT_TRUE(text.ok());
  json tj = json::parse(*text);
  tj["pre_tokenizer"]["add_prefix_space"] = true;
  std::ofstream(tmp.path() + "/tokenizer.json") << tj.dump();
  GgufVocabInfo info;
  auto f = vocab_of("llama", json{{"vocab_size", 50257}}, tmp.path(), &info);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.model").s(), "gpt2");
  EXPECT_EQ(f.kv.at("tokenizer.ggml.pre").s(), "default");
  ASSERT_EQ(info.notes.size(), 1u);
  EXPECT_NE(info.notes[0].find("pre-tokenizer is not one llama.cpp's converter knows"),
            std::string::npos)
      << info.notes[0];
  EXPECT_NE(info.notes[0].find("may split text differently"), std::string::npos);
}

TEST(GgufVocabTest, AMalformedTokenizerConfigIsCorruptNotACrash) {
  SPILLWAY_REQUIRE_DATA();
  testing::TempDir tmp;
  fs_copy(testing::data_path("models/stories260K/tokenizer.model"),
          tmp.path() + "/tokenizer.model");
  std::ofstream(tmp.path() + "/tokenizer_config.json")
      << R"({"added_tokens_decoder": {"one": {"content": "<x>"}}})";
  GgufWriter w;
  auto r = set_gguf_vocab("llama", json{{"vocab_size", 512}}, tmp.path(), w);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("tokenizer_config.json"), std::string::npos)
      << r.status().message();
}

TEST(GgufVocabTest, NoTokenizerOrAByteFallbackJsonAreClearErrors) {
  SPILLWAY_REQUIRE_DATA();
  testing::TempDir tmp;
  GgufWriter w;
  auto none = set_gguf_vocab("llama", json::object(), tmp.path(), w);
  EXPECT_EQ(none.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(none.status().message().find("tokenizer.json or tokenizer.model"), std::string::npos);
  // Mistral 7B v0.1 ships a byte-fallback tokenizer.json; without tokenizer.model convert reads it
  // through transformers, which Spillway does not.
  auto bf = set_gguf_vocab("llama", json{{"vocab_size", 32000}},
                           testing::data_path("tokenizers/mistral-7b-v0.1"), w);
  EXPECT_EQ(bf.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(bf.status().message().find("tokenizer.model"), std::string::npos);
}

}  // namespace
}  // namespace spillway
