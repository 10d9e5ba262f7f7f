// Every case of ../shared/data/golden/tokenizers/*.json: exact ids against Hugging Face
// `tokenizers` (add_special_tokens=False), and decode(encode(x)) == x where the tokenizer is
// lossless.
#include <gtest/gtest.h>

#include "tokenizer-test-util.h"

namespace spillway::testing {
namespace {

class GoldenTokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTokenizerTest, MatchesHuggingFaceIds) {
  SPILLWAY_REQUIRE_DATA();
  const GoldenFile g = read_golden(GetParam());
  ASSERT_FALSE(g.cases.empty()) << "golden file for " << GetParam() << " not readable";
  std::string err;
  const Tokenizer* tok = shared_tokenizer(g.tokenizer_file, &err);
  ASSERT_NE(tok, nullptr) << err;
  int failures = 0;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const auto ids = *tok->encode(g.cases[i].text);
    if (ids != g.cases[i].ids && ++failures <= 5) {
      ADD_FAILURE() << GetParam() << " case " << i
                    << " text=" << nlohmann::json(g.cases[i].text).dump()
                    << "\n  got:      " << ids_str(ids)
                    << "\n  expected: " << ids_str(g.cases[i].ids);
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << g.cases.size() << " cases differ";
}

TEST_P(GoldenTokenizerTest, DecodeRoundTrips) {
  SPILLWAY_REQUIRE_DATA();
  const GoldenFile g = read_golden(GetParam());
  ASSERT_FALSE(g.cases.empty());
  const Tokenizer* tok = shared_tokenizer(g.tokenizer_file);
  ASSERT_NE(tok, nullptr);
  // Qwen's NFC normalizer makes it lossy in general (lossless() is false), but every golden
  // text is already in NFC, so the round trip must hold for all of them.
  int failures = 0;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const std::string back = *tok->decode(g.cases[i].ids);
    if (back != g.cases[i].text && ++failures <= 3)
      ADD_FAILURE() << GetParam() << " case " << i
                    << "\n  decoded:  " << nlohmann::json(back).dump()
                    << "\n  original: " << nlohmann::json(g.cases[i].text).dump();
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(All, GoldenTokenizerTest,
                         ::testing::Values("stories260K", "llama2", "llama3", "qwen2.5", "qwen3",
                                           "gpt2", "mistral-7b-v0.1"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(GoldenTokenizer, LosslessFlags) {
  SPILLWAY_REQUIRE_DATA();
  for (const char* rel :
       {"tokenizers/gpt2/tokenizer.json", "tokenizers/llama3/tokenizer.json",
        "tokenizers/llama2/tokenizer.json", "tokenizers/mistral-7b-v0.1/tokenizer.json",
        "models/stories260K/tokenizer.json"}) {
    const Tokenizer* tok = shared_tokenizer(rel);
    ASSERT_NE(tok, nullptr) << rel;
    EXPECT_TRUE(tok->lossless()) << rel;
  }
  // NFC normalization cannot be undone.
  const Tokenizer* qwen = shared_tokenizer("tokenizers/qwen2.5/tokenizer.json");
  ASSERT_NE(qwen, nullptr);
  EXPECT_FALSE(qwen->lossless());
}

}  // namespace
}  // namespace spillway::testing
