// Tokenizer behaviour on small synthetic tokenizer.json files (added-token flags, merge forms,
// ignore_merges, unk/byte fallback, post-processors, decoders, tokenizer_config.json) and on
// the real files for special tokens, invalid input and threads; plus the load errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include "data/dataset.h"
#include "tokenizer-test-util.h"

namespace spillway::testing {
namespace {

using nlohmann::json;

// A tiny BPE over the characters ' ', a, b, c, x, y with merges a+b, ab+c, b+c.
json tiny_model(json merges = json::array({"a b", "ab c", "b c"})) {
  return {{"type", "BPE"},
          {"vocab",
           {{" ", 0},
            {"a", 1},
            {"b", 2},
            {"c", 3},
            {"ab", 4},
            {"abc", 5},
            {"bc", 6},
            {"<unk>", 7},
            {"x", 8},
            {"y", 9}}},
          {"merges", merges},
          {"unk_token", "<unk>"}};
}

json tiny_tokenizer(json model = tiny_model()) {
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model", model}};
}

json added(int id, const std::string& content, bool special, json flags = json::object()) {
  json t = {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
            {"rstrip", false}, {"normalized", false}, {"special", special}};
  for (auto it = flags.begin(); it != flags.end(); ++it) t[it.key()] = it.value();
  return t;
}

// Writes `j` as tokenizer.json (and `config` as tokenizer_config.json when given) and loads it.
std::unique_ptr<Tokenizer> load_json(const TempDir& dir, const json& j,
                                     const json& config = nullptr) {
  EXPECT_TRUE(write_file_atomic(dir.file("tokenizer.json"), j.dump()).ok());
  if (!config.is_null()) {
    EXPECT_TRUE(write_file_atomic(dir.file("tokenizer_config.json"), config.dump()).ok());
  }
  auto t = Tokenizer::load(dir.path());
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

Status load_error(const TempDir& dir, const std::string& text) {
  EXPECT_TRUE(write_file_atomic(dir.file("tokenizer.json"), text).ok());
  auto t = Tokenizer::load(dir.file("tokenizer.json"));
  return t.ok() ? Status() : t.status();
}

using Ids = std::vector<int32_t>;

TEST(TokenizerBpe, MergesApplyInRankOrder) {
  TempDir dir;
  auto t = load_json(dir, tiny_tokenizer());
  ASSERT_TRUE(t);
  EXPECT_EQ(*t->encode("abc"), (Ids{5}));  // a+b (rank 0), then ab+c
  EXPECT_EQ(*t->encode("bca"), (Ids{6, 1}));
  EXPECT_EQ(*t->encode(""), Ids{});
  // b+c ranked first: "abc" -> a, bc, and no merge joins them.
  TempDir dir2;
  auto t2 = load_json(dir2, tiny_tokenizer(tiny_model(json::array({"b c", "a b", "ab c"}))));
  ASSERT_TRUE(t2);
  EXPECT_EQ(*t2->encode("abc"), (Ids{1, 6}));
}

TEST(TokenizerBpe, MergesAsPairsEqualMergesAsStrings) {
  TempDir d1, d2;
  auto s = load_json(d1, tiny_tokenizer());
  auto p = load_json(
      d2, tiny_tokenizer(tiny_model(json::array(
              {json::array({"a", "b"}), json::array({"ab", "c"}), json::array({"b", "c"})}))));
  ASSERT_TRUE(s && p);
  for (const char* text : {"abc", "cab", "abcabc", "bbcc a"})
    EXPECT_EQ(*s->encode(text), *p->encode(text)) << text;
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  // "abc" is in the vocabulary but no merge reaches it when only b+c exists.
  json model = tiny_model(json::array({"b c"}));
  TempDir d1, d2;
  auto off = load_json(d1, tiny_tokenizer(model));
  model["ignore_merges"] = true;
  auto on = load_json(d2, tiny_tokenizer(model));
  ASSERT_TRUE(off && on);
  EXPECT_EQ(*off->encode("abc"), (Ids{1, 6}));
  EXPECT_EQ(*on->encode("abc"), (Ids{5}));
  EXPECT_EQ(*on->encode("abca"), (Ids{1, 6, 1}));  // not a vocabulary word: merges as usual
}

TEST(TokenizerBpe, UnknownCharactersFuseOrNot) {
  json model = tiny_model();
  TempDir d1, d2;
  auto plain = load_json(d1, tiny_tokenizer(model));
  model["fuse_unk"] = true;
  auto fused = load_json(d2, tiny_tokenizer(model));
  ASSERT_TRUE(plain && fused);
  EXPECT_EQ(*plain->encode("a\xC3\xA9\xC3\xA9z"), (Ids{1, 7, 7, 7}));
  EXPECT_EQ(*fused->encode("a\xC3\xA9\xC3\xA9z"), (Ids{1, 7}));
}

TEST(TokenizerBpe, ByteFallbackUsesHexTokens) {
  json model = tiny_model();
  model["byte_fallback"] = true;
  model["vocab"]["<0xC3>"] = 20;
  model["vocab"]["<0xA9>"] = 21;
  json j = tiny_tokenizer(model);
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
  TempDir dir;
  auto t = load_json(dir, j);
  ASSERT_TRUE(t);
  const Ids ids = *t->encode("a\xC3\xA9z");  // é as bytes, z unknown
  EXPECT_EQ(ids, (Ids{1, 20, 21, 7}));
  EXPECT_EQ(*t->decode(Ids{1, 20, 21}), "a\xC3\xA9");
  // A lone continuation byte decodes to U+FFFD, one per byte.
  EXPECT_EQ(*t->decode(Ids{21, 1}),
            "\xEF\xBF\xBD"
            "a");
}

TEST(TokenizerAddedTokens, LstripRstripSingleWordAndNormalized) {
  json j = tiny_tokenizer();
  j["normalizer"] = {{"type", "Lowercase"}};
  j["added_tokens"] = json::array({
      added(10, "<x>", true, {{"lstrip", true}}),
      added(11, "<y>", true, {{"rstrip", true}}),
      added(12, "ab", false, {{"single_word", true}}),
      added(13, "Y", false, {{"normalized", true}}),
  });
  TempDir dir;
  auto t = load_json(dir, j);
  ASSERT_TRUE(t);
  // lstrip swallows the space before <x>; rstrip the space after <y>.
  EXPECT_EQ(*t->encode("a <x> b"), (Ids{1, 10, 0, 2}));
  EXPECT_EQ(*t->encode("a <y> b"), (Ids{1, 0, 11, 2}));
  // single_word: only where no word character touches it.
  EXPECT_EQ(*t->encode("ab c"), (Ids{12, 0, 3}));
  EXPECT_EQ(*t->encode("abc"), (Ids{5}));
  EXPECT_EQ(*t->encode("c ab"), (Ids{3, 0, 12}));
  // normalized=true: matched after normalization, so "y" and "Y" both hit the pattern "y".
  EXPECT_EQ(*t->encode("yY"), (Ids{13, 13}));
  // Raw tokens are matched before normalization: "<X>" is not "<x>".
  EXPECT_NE(*t->encode("<X>"), (Ids{10}));
  // Leftmost-longest: "<x>" wins over nothing, adjacent tokens split cleanly.
  EXPECT_EQ(*t->encode("<x><y>"), (Ids{10, 11}));
  EXPECT_EQ(t->token_to_id("<x>"), 10);
  EXPECT_EQ(t->id_to_token(13), "Y");
  EXPECT_EQ(t->vocab_size(), 14);
  // No decoder: tokens joined by ' ' (HF); skip_special drops <x> but keeps non-special "ab".
  EXPECT_EQ(*t->decode(Ids{1, 10, 12}), "a <x> ab");
  EXPECT_EQ(*t->decode(Ids{1, 10, 12}, true), "a ab");
}

TEST(TokenizerAddedTokens, RealSpecialTokens) {
  SPILLWAY_REQUIRE_DATA();
  const Tokenizer* llama3 = shared_tokenizer("tokenizers/llama3/tokenizer.json");
  ASSERT_NE(llama3, nullptr);
  const Ids ids = *llama3->encode("<|begin_of_text|>Hello<|eot_id|>");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(ids[2], *llama3->token_to_id("<|eot_id|>"));
  EXPECT_EQ(*llama3->decode(ids), "<|begin_of_text|>Hello<|eot_id|>");
  EXPECT_EQ(*llama3->decode(ids, true), "Hello");
  EXPECT_EQ(llama3->bos_id(), 128000);
  EXPECT_EQ(llama3->eos_id(), 128001);
  EXPECT_NE(llama3->chat_template().find("start_header_id"), std::string::npos);
  EXPECT_EQ(llama3->vocab_size(), 128256);

  const Tokenizer* qwen3 = shared_tokenizer("tokenizers/qwen3/tokenizer.json");
  ASSERT_NE(qwen3, nullptr);
  const Ids q = *qwen3->encode("<think>hi</think>");
  EXPECT_EQ(q.front(), 151667);
  // <think> is not special: skip_special keeps it.
  EXPECT_EQ(*qwen3->decode(q, true), "<think>hi</think>");
  EXPECT_EQ(qwen3->bos_id(), std::nullopt);
  EXPECT_EQ(qwen3->eos_id(), *qwen3->token_to_id("<|im_end|>"));
  EXPECT_EQ(qwen3->pad_id(), *qwen3->token_to_id("<|endoftext|>"));

  // llama2: "</s>" in the text is split out; the Prepend normalizer runs per piece, as HF does.
  const Tokenizer* llama2 = shared_tokenizer("tokenizers/llama2/tokenizer.json");
  ASSERT_NE(llama2, nullptr);
  const Ids l = *llama2->encode("Hi</s>there");
  EXPECT_EQ(l, (Ids{6324, 2, 727}));  // "▁Hi", </s>, "▁there"
}

TEST(TokenizerPostProcessor, EncodeWithSpecial) {
  SPILLWAY_REQUIRE_DATA();
  const Tokenizer* llama2 = shared_tokenizer("tokenizers/llama2/tokenizer.json");
  const Tokenizer* gpt2 = shared_tokenizer("tokenizers/gpt2/tokenizer.json");
  const Tokenizer* qwen = shared_tokenizer("tokenizers/qwen2.5/tokenizer.json");
  ASSERT_TRUE(llama2 && gpt2 && qwen);
  const std::string text = "Hello world";
  Ids expect = {1};
  const Ids body = *llama2->encode(text);
  expect.insert(expect.end(), body.begin(), body.end());
  EXPECT_EQ(*llama2->encode_with_special(text), expect);
  // ByteLevel post-processors add nothing.
  EXPECT_EQ(*gpt2->encode_with_special(text), *gpt2->encode(text));
  EXPECT_EQ(*qwen->encode_with_special(text), *qwen->encode(text));

  // TemplateProcessing with BOS and EOS, and RobertaProcessing.
  json j = tiny_tokenizer();
  j["added_tokens"] = json::array({added(10, "<s>", true), added(11, "</s>", true)});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", {10}}, {"tokens", {"<s>"}}}},
        {"</s>", {{"id", "</s>"}, {"ids", {11}}, {"tokens", {"</s>"}}}}}}};
  TempDir d1;
  auto t = load_json(d1, j);
  ASSERT_TRUE(t);
  EXPECT_EQ(*t->encode_with_special("abc"), (Ids{10, 5, 11}));
  EXPECT_EQ(t->bos_id(), 10);  // no config: the template's leading special token
  j["post_processor"] = {{"type", "RobertaProcessing"},
                         {"sep", {"</s>", 11}},
                         {"cls", {"<s>", 10}},
                         {"trim_offsets", true},
                         {"add_prefix_space", false}};
  TempDir d2;
  auto r = load_json(d2, j);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r->encode_with_special("ab"), (Ids{10, 4, 11}));
}

TEST(TokenizerConfig, SpecialTokensAndChatTemplate) {
  json j = tiny_tokenizer();
  j["added_tokens"] =
      json::array({added(10, "<s>", true), added(11, "</s>", true), added(12, "<pad>", true)});
  TempDir dir;
  auto t = load_json(dir, j,
                     {{"bos_token", {{"content", "<s>"}, {"__type", "AddedToken"}}},
                      {"eos_token", "</s>"},
                      {"pad_token", "<pad>"},
                      {"add_bos_token", true},
                      {"add_eos_token", true},
                      {"tokenizer_class", "LlamaTokenizer"},
                      {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                     {{"name", "default"}, {"template", "D"}}})}});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bos_id(), 10);
  EXPECT_EQ(t->eos_id(), 11);
  EXPECT_EQ(t->pad_id(), 12);
  EXPECT_EQ(t->chat_template(), "D");
  // Llama tokenizer classes build the template from add_bos_token / add_eos_token.
  EXPECT_EQ(*t->encode_with_special("ab"), (Ids{10, 4, 11}));
}

TEST(TokenizerDecoder, MetaspaceRoundTrip) {
  json j = tiny_tokenizer();
  j["model"]["vocab"]["\xE2\x96\x81"] = 30;
  j["model"]["vocab"]
   ["\xE2\x96\x81"
    "a"] = 31;
  j["model"]["merges"].push_back("\xE2\x96\x81 a");
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\xE2\x96\x81"},
                        {"prepend_scheme", "always"},
                        {"split", true}};
  j["decoder"] = {
      {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}};
  TempDir dir;
  auto t = load_json(dir, j);
  ASSERT_TRUE(t);
  // "▁a▁ab" splits before each '▁'; in "▁ab" the merge a+b outranks ▁+a.
  EXPECT_EQ(*t->encode("a ab"), (Ids{31, 30, 4}));
  EXPECT_EQ(*t->decode(*t->encode("a ab")), "a ab");
  // Text that already starts with the replacement gets no second one.
  EXPECT_EQ(*t->encode(" a"), (Ids{31}));
}

TEST(TokenizerInput, InvalidUtf8IsRepairedNotFatal) {
  SPILLWAY_REQUIRE_DATA();
  const Tokenizer* gpt2 = shared_tokenizer("tokenizers/gpt2/tokenizer.json");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(*gpt2->encode("a\xFF"
                          "b"),
            *gpt2->encode("a\xEF\xBF\xBD"
                          "b"));
  EXPECT_EQ(*gpt2->encode("\xE2\x82"), *gpt2->encode("\xEF\xBF\xBD"));  // truncated sequence
  // Decoding ids that split a multi-byte character yields U+FFFD, never invalid UTF-8.
  const Ids ids = *gpt2->encode("\xF0\x9F\xA6\x99");  // 🦙, several byte tokens
  ASSERT_GT(ids.size(), 1u);
  EXPECT_EQ(gpt2->decode(Ids(ids.begin(), ids.begin() + 1))->find("\xEF\xBF\xBD"), 0u);
}

TEST(TokenizerThreads, ConcurrentEncodesAgree) {
  SPILLWAY_REQUIRE_DATA();
  const Tokenizer* tok = shared_tokenizer("tokenizers/llama3/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  const GoldenFile g = read_golden("llama3");
  ASSERT_FALSE(g.cases.empty());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (size_t i = k; i < g.cases.size(); i += 2)
        if (*tok->encode(g.cases[i].text) != g.cases[i].ids) ++mismatches;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TokenizerLoad, ClearErrors) {
  // Missing path and an empty folder: kNotFound naming what was looked for.
  auto missing = Tokenizer::load("/nonexistent/spillway/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/spillway"), std::string::npos);
  TempDir empty;
  auto none = Tokenizer::load(empty.path());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(none.status().message().find("tokenizer.json"), std::string::npos);
  EXPECT_NE(none.status().message().find("tokenizer.model"), std::string::npos);

  TempDir dir;
  // Truncated JSON.
  Status s = load_error(dir, tiny_tokenizer().dump().substr(0, 60));
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt);
  EXPECT_NE(s.message().find("tokenizer.json"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("JSON"), std::string::npos) << s.to_string();
  // No model.
  json j = tiny_tokenizer();
  j.erase("model");
  s = load_error(dir, j.dump());
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt);
  EXPECT_NE(s.message().find("model"), std::string::npos);
  // A merge whose part is not in the vocabulary.
  s = load_error(dir, tiny_tokenizer(tiny_model(json::array({"a q"}))).dump());
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt);
  EXPECT_NE(s.message().find("merges[0]"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("'q'"), std::string::npos) << s.to_string();
  // A merge that is not "a b".
  s = load_error(dir, tiny_tokenizer(tiny_model(json::array({"abc"}))).dump());
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt);
  EXPECT_NE(s.message().find("merges[0] \"abc\" is not \"a b\""), std::string::npos)
      << s.to_string();
  // One id far past the rest sized the id table by it: 1,111,111,199 among ten tokens asked for
  // 35 GB (found by fuzzing). Refused before anything is allocated.
  json holes = tiny_model();
  holes["vocab"]["y"] = 1111111199;
  s = load_error(dir, tiny_tokenizer(holes).dump());
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt);
  EXPECT_NE(s.message().find(
                "model.vocab: id 1111111199 of \"y\" leaves most ids unused (the vocabulary has "
                "10 tokens)"),
            std::string::npos)
      << s.to_string();
  // Gaps a real vocabulary may have still load.
  json gaps = tiny_model();
  gaps["vocab"]["y"] = 5000;
  EXPECT_TRUE(load_error(dir, tiny_tokenizer(gaps).dump()).ok());
  // Another model type.
  json uni = tiny_tokenizer();
  uni["model"] = {{"type", "Unigram"}, {"vocab", json::array()}};
  s = load_error(dir, uni.dump());
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("Unigram"), std::string::npos);
  // Unknown pre-tokenizer and a regex that does not compile.
  json pre = tiny_tokenizer();
  pre["pre_tokenizer"] = {{"type", "NoSuchThing"}};
  s = load_error(dir, pre.dump());
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("NoSuchThing"), std::string::npos);
  pre["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  s = load_error(dir, pre.dump());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(unclosed"), std::string::npos) << s.to_string();
  // Bad tokenizer_config.json beside a good tokenizer.json.
  ASSERT_TRUE(write_file_atomic(dir.file("tokenizer.json"), tiny_tokenizer().dump()).ok());
  ASSERT_TRUE(write_file_atomic(dir.file("tokenizer_config.json"), "{not json").ok());
  auto bad_cfg = Tokenizer::load(dir.path());
  ASSERT_FALSE(bad_cfg.ok());
  EXPECT_EQ(bad_cfg.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(bad_cfg.status().message().find("tokenizer_config.json"), std::string::npos);
}

}  // namespace
}  // namespace spillway::testing

namespace spillway::testing {
namespace {

// Pathological inputs: one huge "word", a huge whitespace run (the \s+(?!\S) look-ahead), a long
// run of CJK without spaces. Each must finish quickly and round-trip.
TEST(TokenizerInput, LongRunsStayFastAndExact) {
  SPILLWAY_REQUIRE_DATA();
  for (const char* rel : {"tokenizers/llama3/tokenizer.json", "tokenizers/llama2/tokenizer.json"}) {
    const Tokenizer* tok = shared_tokenizer(rel);
    ASSERT_NE(tok, nullptr) << rel;
    std::string cjk;
    for (int i = 0; i < 20000; ++i) cjk += "\xE4\xB8\xAD\xE6\x96\x87";  // 中文
    for (const std::string& text : {std::string(200000, 'a'), std::string(200000, ' ') + "x",
                                    std::string(100000, '\n'), cjk}) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = *tok->encode(text);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_LT(s, 5.0 * kTimeScale) << rel << " took " << s << " s on " << text.size() << " bytes";
      EXPECT_FALSE(ids.empty());
      EXPECT_EQ(*tok->decode(ids), text) << rel;
    }
  }
}

// A tokenizer.json or tokenizer_config.json with a field of the wrong type (a flag that is null, a
// number where an object or a string belongs) is a clear error naming the file, never an uncaught
// nlohmann::json exception (which aborted the worker: 78 cases of a fuzzing campaign).
TEST(TokenizerLoad, FieldsOfTheWrongTypeAreClearErrors) {
  SPILLWAY_REQUIRE_DATA();
  auto original = read_file(data_path("tokenizers/llama2/tokenizer.json"));
  auto original_config = read_file(data_path("tokenizers/llama2/tokenizer_config.json"));
  ASSERT_TRUE(original.ok() && original_config.ok());
  const nlohmann::json tok = nlohmann::json::parse(*original),
                       cfg = nlohmann::json::parse(*original_config);
  struct Mutation {
    const char* what;
    bool in_config;
    std::function<void(nlohmann::json&)> apply;
  };
  const std::vector<Mutation> mutations = {
      {"added token's special flag null", false,
       [](nlohmann::json& j) { j["added_tokens"][0]["special"] = nullptr; }},
      {"added token's id a string", false,
       [](nlohmann::json& j) { j["added_tokens"][1]["id"] = "one"; }},
      {"normalizer a number", false, [](nlohmann::json& j) { j["normalizer"] = 5; }},
      {"normalizer type a number", false,
       [](nlohmann::json& j) { j["normalizer"]["normalizers"][0]["type"] = 5; }},
      {"decoder's decoders null", false,
       [](nlohmann::json& j) { j["decoder"]["decoders"] = nullptr; }},
      {"model's byte_fallback a string", false,
       [](nlohmann::json& j) { j["model"]["byte_fallback"] = "yes"; }},
      {"model's vocab an array", false,
       [](nlohmann::json& j) {
         j["model"]["vocab"] = nlohmann::json::array({1, 2});
       }},
      {"post_processor's single a number", false,
       [](nlohmann::json& j) { j["post_processor"]["single"] = 3; }},
      {"add_bos_token a number", true, [](nlohmann::json& j) { j["add_bos_token"] = 7; }},
      {"bos_token a number", true, [](nlohmann::json& j) { j["bos_token"] = 1; }},
      {"chat_template an object", true,
       [](nlohmann::json& j) {
         j["chat_template"] = {{"a", 1}};
       }},
  };
  for (const Mutation& m : mutations) {
    SCOPED_TRACE(m.what);
    TempDir dir;
    nlohmann::json t = tok, c = cfg;
    m.apply(m.in_config ? c : t);
    std::ofstream(dir.path() + "/tokenizer.json") << t.dump();
    std::ofstream(dir.path() + "/tokenizer_config.json") << c.dump();
    Result<std::unique_ptr<Tokenizer>> r = unsupported("not run");
    ASSERT_NO_THROW(r = Tokenizer::load(dir.path()));
    ASSERT_FALSE(r.ok());
    const std::string& msg = r.status().message();
    EXPECT_NE(msg.find(m.in_config ? "tokenizer_config.json" : "tokenizer.json"), std::string::npos)
        << msg;
  }
}

// A regex that backtracks catastrophically on a text makes PCRE2 give up at its match limit; that
// used to leave the piece unsplit and the ids silently different (issue 15). Now every path that
// runs a tokenizer regex (pre-tokenizer, normalizer, decoder) returns an error naming the file,
// the part and the pattern, and a dataset record that hits it is a bad record "FILE:LINE: ...".
TEST(TokenizerRegexLimit, MatchLimitIsAnErrorNotAnUnsplitText) {
  const std::string evil = "(a+)+b";
  const std::string text = std::string(40, 'a') + "!b";
  json pre = tiny_tokenizer();
  pre["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", evil}}}, {"behavior", "Isolated"}};
  json norm = tiny_tokenizer();
  norm["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", evil}}}, {"content", "x"}};
  json dec = tiny_tokenizer();
  dec["model"]["vocab"][text] = 30;
  dec["decoder"] = {{"type", "Replace"}, {"pattern", {{"Regex", evil}}}, {"content", "x"}};
  TempDir d1, d2, d3;
  auto split = load_json(d1, pre), replace = load_json(d2, norm), decoder = load_json(d3, dec);
  ASSERT_TRUE(split && replace && decoder);

  // Ordinary text still splits and encodes.
  EXPECT_EQ(*split->encode("ab c"), (Ids{4, 0, 3}));
  EXPECT_EQ(*replace->encode("ab c"), (Ids{8, 0, 3}));
  EXPECT_EQ(*decoder->decode(Ids{3, 0, 1}), "c a");

  for (const auto& [tok, part] :
       {std::pair{split.get(), "pre_tokenizer"}, std::pair{replace.get(), "normalizer"}}) {
    auto ids = tok->encode("ab " + text + " c");
    ASSERT_FALSE(ids.ok()) << part;
    EXPECT_EQ(ids.status().code(), ErrorCode::kInvalidArgument);
    const std::string& m = ids.status().message();
    EXPECT_NE(m.find("tokenizer.json: " + std::string(part)), std::string::npos) << m;
    EXPECT_NE(m.find("'" + evil + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("match limit"), std::string::npos) << m;
    EXPECT_FALSE(tok->encode_with_special(text).ok()) << part;
  }
  auto back = decoder->decode(Ids{30});
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("tokenizer.json: decoder"), std::string::npos)
      << back.status().message();

  // In a dataset: a bad record at its line, or skipped and counted.
  DatasetRecords records;
  records.format = DatasetFormat::kText;
  records.records.push_back({1, "ab c", {}, {}, {}});
  records.records.push_back({2, text, {}, {}, {}});
  DatasetOptions o;
  o.seq_len = 8;
  auto strict = Dataset::from_records(records, "data.txt", *split, o);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("data.txt:2: "), std::string::npos)
      << strict.status().message();
  o.read.skip_bad_records = true;
  auto skipping = Dataset::from_records(records, "data.txt", *split, o);
  ASSERT_TRUE(skipping.ok()) << skipping.status().to_string();
  EXPECT_EQ(skipping->stats().records, 1);
}

}  // namespace
}  // namespace spillway::testing
