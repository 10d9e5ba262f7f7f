// tokenizer.model through libsentencepiece: stories260K's model must give the same ids as its
// tokenizer.json (and so as HF) on every golden text; plus BOS/EOS, decode and load dispatch.
#include <gtest/gtest.h>

#include "data/sentencepiece-tokenizer.h"
#include "tokenizer-test-util.h"

namespace spillway::testing {
namespace {

TEST(SentencePieceTokenizer, Stories260KMatchesTokenizerJsonOnGoldenTexts) {
  SPILLWAY_REQUIRE_DATA();
  std::string err;
  const Tokenizer* sp = shared_tokenizer("models/stories260K/tokenizer.model", &err);
  ASSERT_NE(sp, nullptr) << err;
  ASSERT_NE(dynamic_cast<const SentencePieceTokenizer*>(sp), nullptr);
  const Tokenizer* js = shared_tokenizer("models/stories260K/tokenizer.json", &err);
  ASSERT_NE(js, nullptr) << err;
  EXPECT_EQ(sp->vocab_size(), js->vocab_size());
  const GoldenFile g = read_golden("stories260K");
  ASSERT_EQ(g.cases.size(), 275u);
  int failures = 0;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const auto ids = *sp->encode(g.cases[i].text);
    if (ids != g.cases[i].ids && ++failures <= 5)
      ADD_FAILURE() << "case " << i << " " << nlohmann::json(g.cases[i].text).dump()
                    << "\n  sentencepiece: " << ids_str(ids)
                    << "\n  HF golden:     " << ids_str(g.cases[i].ids);
    EXPECT_EQ(*sp->decode(ids), g.cases[i].text) << "case " << i;
  }
  EXPECT_EQ(failures, 0);
}

TEST(SentencePieceTokenizer, SpecialTokensAndVocabulary) {
  SPILLWAY_REQUIRE_DATA();
  const Tokenizer* sp = shared_tokenizer("models/stories260K/tokenizer.model");
  ASSERT_NE(sp, nullptr);
  EXPECT_EQ(sp->vocab_size(), 512);
  EXPECT_EQ(sp->bos_id(), 1);
  EXPECT_EQ(sp->eos_id(), 2);
  EXPECT_EQ(sp->token_to_id("<s>"), 1);
  EXPECT_EQ(sp->token_to_id("<unk>"), 0);
  EXPECT_EQ(sp->token_to_id("no-such-piece"), std::nullopt);
  EXPECT_EQ(sp->id_to_token(1), "<s>");
  EXPECT_EQ(sp->id_to_token(99999), "");
  EXPECT_TRUE(sp->lossless());

  // encode_with_special: BOS (add_bos_token=true in tokenizer_config.json), no EOS — as HF.
  const Tokenizer* js = shared_tokenizer("models/stories260K/tokenizer.json");
  ASSERT_NE(js, nullptr);
  const std::string text = "Once upon a time, there was a little girl.";
  const auto with = *sp->encode_with_special(text);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with.front(), 1);
  EXPECT_EQ(with, *js->encode_with_special(text));
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), *sp->encode(text));

  // Control tokens render as their text unless skipped, with the following space kept.
  std::vector<int32_t> ids = with;
  ids.push_back(2);
  EXPECT_EQ(*sp->decode(ids, /*skip_special=*/true), text);
  EXPECT_EQ(*sp->decode(ids), "<s> " + text + "</s>");
  EXPECT_EQ(*js->decode(ids), "<s> " + text + "</s>");
  EXPECT_EQ(*js->decode(ids, true), text);
}

// A tokenizer.model whose pieces libsentencepiece's trie builder cannot index (one is a NUL byte):
// Darts throws from inside LoadFromSerializedProto, which ended the worker in std::terminate with
// no message. The input is the one the tokenizer-model fuzz target found (2026-11-26, 141 bytes).
TEST(SentencePieceTokenizer, PiecesTheTrieCannotIndexAreAClearError) {
  static const char kModel[] =
      "\x0a\x0e\x0a\x05\x3c\x75\x6e\x6b\x3e\x15\x00\x00\x00\x00\x18\x02"
      "\x0a\x0c\x0a\x03\x3c\x73\x3e\x15\x00\x00\x00\x00\x18\x03\x0a\x0d"
      "\x0a\x04\x3c\x2f\x73\x3e\x15\x00\x00\x00\x00\x18\x03\x0a\x08\x0a"
      "\x01\x00\x15\x00\x00\x53\xc3\x0a\x08\x0a\x01\x55\x15\x00\x5d\x5d"
      "\x5d\x5d\x5d\x5d\x5d\x5d\x30\x5d\x5d\x5d\x5d\x08\x0a\x35\x31\x32"
      "\x18\x02\x20\x80\x04\x30\x00\x3a\x04\x74\x65\x78\x74\x55\x00\x00"
      "\x80\x3f\x80\x01\x14\xc8\x01\x01\xd0\x01\x01\x98\x02\x01\xe2\x02"
      "\x0e\x20\x5c\x33\x34\x32\x5c\x32\x30\x31\x5c\x32\x30\x37\x20\x1a"
      "\x0c\x0a\x08\x69\x64\x00\x9a\x74\x69\x74\x79\x12\x00";
  TempDir dir;
  const std::string path = dir.file("tokenizer.model");
  ASSERT_TRUE(write_file_atomic(path, std::string(kModel, sizeof(kModel) - 1)).ok());
  auto t = Tokenizer::load(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), ErrorCode::kCorrupt) << t.status().to_string();
  EXPECT_NE(
      t.status().message().find(path + ": not a SentencePiece model: its pieces cannot be indexed"),
      std::string::npos)
      << t.status().to_string();
}

TEST(SentencePieceTokenizer, FolderPrefersTokenizerJson) {
  SPILLWAY_REQUIRE_DATA();
  auto t = Tokenizer::load(data_path("models/stories260K"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(dynamic_cast<const SentencePieceTokenizer*>(t->get()), nullptr);
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->eos_id(), 2);
  EXPECT_EQ((*t)->pad_id(), std::nullopt);

  // A folder with only tokenizer.model (and the config beside it) uses libsentencepiece.
  TempDir dir;
  auto model = read_file(data_path("models/stories260K/tokenizer.model"));
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(write_file_atomic(dir.file("tokenizer.model"), *model).ok());
  auto sp = Tokenizer::load(dir.path());
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
  EXPECT_NE(dynamic_cast<const SentencePieceTokenizer*>(sp->get()), nullptr);
  EXPECT_EQ(*(*sp)->encode("Hello world"), *(*t)->encode("Hello world"));
}

TEST(SentencePieceTokenizer, CorruptModelIsAClearError) {
  TempDir dir;
  ASSERT_TRUE(
      write_file_atomic(dir.file("tokenizer.model"), "this is not a protobuf \x01\x02\x03").ok());
  auto t = Tokenizer::load(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(t.status().message().find("tokenizer.model"), std::string::npos)
      << t.status().to_string();
}

}  // namespace
}  // namespace spillway::testing
