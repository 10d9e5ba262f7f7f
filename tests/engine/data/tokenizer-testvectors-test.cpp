// llama.cpp's tokenizer test vectors (../shared/data/tokenizers/testvectors): each .inp holds
// strings separated by "\n__ggml_vocab_test__\n", each .out one line of ids per string.
//
// Convention: llama.cpp wrote these ids with add_special=false, so no BOS appears, and its SPM
// path adds the same leading "▁" as the HF Prepend normalizer (" " -> "▁▁" = 259, "\n" ->
// "▁" 29871 then <0x0A> 13); the ids are therefore compared with encode() unchanged, with no
// BOS stripped or added, for all four vocabularies.
#include <gtest/gtest.h>

#include <sstream>

#include "tokenizer-test-util.h"

namespace spillway::testing {
namespace {

struct VectorCase {
  std::string vocab;          // llama.cpp name
  std::string tokenizer_rel;  // our tokenizer.json
};

std::vector<std::string> split_inputs(const std::string& raw) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t f = raw.find(sep, pos);
    if (f == std::string::npos) {
      out.push_back(raw.substr(pos));
      break;
    }
    out.push_back(raw.substr(pos, f - pos));
    pos = f + sep.size();
  }
  return out;
}

class TestVectors : public ::testing::TestWithParam<VectorCase> {};

TEST_P(TestVectors, MatchLlamaCpp) {
  SPILLWAY_REQUIRE_DATA();
  const std::string base =
      data_path("tokenizers/testvectors/ggml-vocab-" + GetParam().vocab + ".gguf");
  auto inp = read_file(base + ".inp");
  auto out = read_file(base + ".out");
  ASSERT_TRUE(inp.ok() && out.ok()) << base;
  const auto texts = split_inputs(*inp);
  std::vector<std::vector<int32_t>> expected;
  std::istringstream lines(*out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<int32_t> ids;
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) ids.push_back(id);
    expected.push_back(std::move(ids));
  }
  // The .inp ends with a separator, the .out with a newline: both have a trailing empty entry.
  if (expected.size() + 1 == texts.size()) expected.emplace_back();
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GT(texts.size(), 40u);

  std::string err;
  const Tokenizer* tok = shared_tokenizer(GetParam().tokenizer_rel, &err);
  ASSERT_NE(tok, nullptr) << err;
  int failures = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = *tok->encode(texts[i]);
    if (ids != expected[i]) {
      ++failures;
      ADD_FAILURE() << GetParam().vocab << " string " << i << " " << nlohmann::json(texts[i]).dump()
                    << "\n  got:      " << ids_str(ids) << "\n  expected: " << ids_str(expected[i]);
    }
    if (tok->lossless()) {
      EXPECT_EQ(*tok->decode(ids), texts[i]) << GetParam().vocab << " string " << i;
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(
    All, TestVectors,
    ::testing::Values(VectorCase{"llama-spm", "tokenizers/llama2/tokenizer.json"},
                      VectorCase{"llama-bpe", "tokenizers/llama3/tokenizer.json"},
                      VectorCase{"qwen2", "tokenizers/qwen2.5/tokenizer.json"},
                      VectorCase{"gpt-2", "tokenizers/gpt2/tokenizer.json"}),
    [](const auto& info) {
      std::string n = info.param.vocab;
      for (char& c : n)
        if (c == '-') c = '_';
      return n;
    });

}  // namespace
}  // namespace spillway::testing
