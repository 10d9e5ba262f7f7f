// Dataset end to end on the real files of ../shared/data/datasets. With the byte-level fake
// tokenizer every expected figure is computed here independently (token count = byte count);
// with the real stories260K tokenizer (once Tokenizer::load exists) counts are checked against
// direct encode() calls and pinned figures.
#include "data/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/file-util.h"
#include "core/thread-pool.h"
#include "data/batch-iterator.h"
#include "data/tokenizer.h"
#include "fake-tokenizer.h"
#include "test-data.h"

namespace spillway {
namespace {

using json = nlohmann::json;
using testing::data_path;
using testing::FakeByteTokenizer;

json load_json(const std::string& rel) {
  std::ifstream in(data_path(rel));
  return json::parse(in);
}

int64_t bytes(const json& s) {
  return static_cast<int64_t>(s.get_ref<const std::string&>().size());
}

DatasetOptions plain_options(int seq_len = 1 << 16) {
  DatasetOptions o;
  o.seq_len = seq_len;
  o.chat_template = ChatTemplateKind::kPlain;
  return o;
}

struct Expected {
  int64_t records = 0, total = 0, trained = 0;
};

// Plain template with the byte tokenizer: BOS + (user bytes + "\n") + (reply bytes + EOS) ...
Expected alpaca_expected(const json& list) {
  Expected e;
  for (const json& x : list) {
    std::string user = x["instruction"].get<std::string>();
    std::string input = x.value("input", "");
    if (!input.empty()) user += "\n\n" + input;
    int64_t reply = bytes(x["output"]);
    e.records += 1;
    e.total += 1 + static_cast<int64_t>(user.size()) + 1 + reply + 1;
    e.trained += reply + 1;
  }
  return e;
}

Expected sharegpt_expected(const json& list) {
  Expected e;
  for (const json& x : list) {
    int64_t total = 1;  // BOS
    if (x.contains("tools") && x["tools"].get<std::string>() != "" &&
        x["tools"].get<std::string>() != "[]")
      total +=
          static_cast<int64_t>(std::string("You have access to the following tools:\n").size()) +
          bytes(x["tools"]) + 2;
    for (const json& m : x["conversations"]) {
      std::string from = m["from"];
      total += bytes(m["value"]) + 1;  // "\n" after a prompt, EOS after a reply
      if (from == "gpt" || from == "function_call") e.trained += bytes(m["value"]) + 1;
    }
    e.records += 1;
    e.total += total;
  }
  return e;
}

void expect_counts(const Dataset& ds, const Expected& e) {
  const DatasetStats& st = ds.stats();
  EXPECT_EQ(st.records, e.records);
  int64_t examples = 0;  // packed (the default) or not, every conversation is in one sequence
  for (size_t i = 0; i < ds.size(); ++i) examples += ds[i].example_count();
  EXPECT_EQ(examples, e.records);
  EXPECT_LE(st.sequences, e.records);
  EXPECT_EQ(st.total_tokens, e.total);
  EXPECT_EQ(st.positions, e.total - e.records);  // n tokens give n-1 positions
  EXPECT_EQ(st.trained_tokens, e.trained);
  EXPECT_EQ(st.truncated, 0);
  EXPECT_EQ(ds.trained_count(), e.trained);
  EXPECT_EQ(static_cast<int64_t>(st.example_tokens.size()), e.records);
}

TEST(DatasetFiles, AlpacaEnDemo) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  auto ds = Dataset::load(data_path("datasets/alpaca/alpaca_en_demo.json"), tok, plain_options());
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->format(), DatasetFormat::kAlpaca);
  EXPECT_EQ(ds->size(), 999u);
  expect_counts(*ds, alpaca_expected(load_json("datasets/alpaca/alpaca_en_demo.json")));
}

TEST(DatasetFiles, AlpacaIdentityAndSeedTasks) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  auto id = Dataset::load(data_path("datasets/alpaca/identity.json"), tok, plain_options());
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(id->size(), 91u);
  expect_counts(*id, alpaca_expected(load_json("datasets/alpaca/identity.json")));

  auto seed = Dataset::load(data_path("datasets/alpaca/stanford_alpaca_seed_tasks.jsonl"), tok,
                            plain_options());
  ASSERT_TRUE(seed.ok()) << seed.status().to_string();
  EXPECT_EQ(seed->format(), DatasetFormat::kAlpaca);
  EXPECT_EQ(seed->size(), 175u);  // one instance each
  json flat = json::array();
  std::ifstream in(data_path("datasets/alpaca/stanford_alpaca_seed_tasks.jsonl"));
  for (std::string line; std::getline(in, line);) {
    json x = json::parse(line);
    for (const json& inst : x["instances"])
      flat.push_back({{"instruction", x["instruction"]},
                      {"input", inst["input"]},
                      {"output", inst["output"]}});
  }
  expect_counts(*seed, alpaca_expected(flat));
}

TEST(DatasetFiles, ShareGptFastChat) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  auto ds = Dataset::load(data_path("datasets/sharegpt/fastchat_dummy_conversation.json"), tok,
                          plain_options());
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->format(), DatasetFormat::kShareGpt);
  EXPECT_EQ(ds->size(), 500u);
  expect_counts(*ds,
                sharegpt_expected(load_json("datasets/sharegpt/fastchat_dummy_conversation.json")));
}

TEST(DatasetFiles, ShareGptGlaiveToolCalls) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  auto ds = Dataset::load(data_path("datasets/sharegpt/glaive_toolcall_en_demo.json"), tok,
                          plain_options());
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->size(), 300u);
  expect_counts(*ds,
                sharegpt_expected(load_json("datasets/sharegpt/glaive_toolcall_en_demo.json")));
}

TEST(DatasetFiles, ChatMlMasksWithByteTokenizer) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  DatasetOptions o = plain_options();
  o.chat_template = ChatTemplateKind::kChatMl;
  auto ds = Dataset::load(data_path("datasets/sharegpt/fastchat_dummy_conversation.json"), tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  // Each reply trains its bytes plus "<|im_end|>" (10 bytes with this tokenizer).
  int64_t trained = 0;
  for (const json& x : load_json("datasets/sharegpt/fastchat_dummy_conversation.json"))
    for (const json& m : x["conversations"])
      if (m["from"] == "gpt") trained += bytes(m["value"]) + 10;
  EXPECT_EQ(ds->stats().trained_tokens, trained);
  EXPECT_EQ(ds->chat_template().kind, ChatTemplateKind::kChatMl);
}

// Every data file in datasets/ reads with its format detected. A new file must be added here.
TEST(DatasetFiles, EveryFileReadsWithItsFormatDetected) {
  SPILLWAY_REQUIRE_DATA();
  struct File {
    DatasetFormat format;
    int64_t records;  // documents for text, examples otherwise
  };
  const std::map<std::string, File> files = {
      {"alpaca/alpaca_en_demo.json", {DatasetFormat::kAlpaca, 999}},
      {"alpaca/identity.json", {DatasetFormat::kAlpaca, 91}},
      {"alpaca/stanford_alpaca_seed_tasks.jsonl", {DatasetFormat::kAlpaca, 175}},
      {"sharegpt/fastchat_dummy_conversation.json", {DatasetFormat::kShareGpt, 500}},
      {"sharegpt/glaive_toolcall_en_demo.json", {DatasetFormat::kShareGpt, 300}},
      {"pretrain-text/c4_demo.jsonl", {DatasetFormat::kJsonText, 300}},
      {"pretrain-text/wiki_demo.txt", {DatasetFormat::kText, 1}},
      {"tinyshakespeare/input.txt", {DatasetFormat::kText, 1}},
      {"tinystories/TinyStories-valid.head30k.txt", {DatasetFormat::kText, 1}},
      {"tinystories/tinystories_sample.txt", {DatasetFormat::kText, 5}},  // <|endoftext|> separated
      {"wikitext-2/valid.txt", {DatasetFormat::kText, 1}},
      {"wikitext-2/test.txt", {DatasetFormat::kText, 1}},
  };
  const std::string root = data_path("datasets");
  int seen = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    std::string ext = entry.path().extension().string();
    if (ext != ".txt" && ext != ".json" && ext != ".jsonl") continue;
    std::string rel = std::filesystem::relative(entry.path(), root).string();
    auto it = files.find(rel);
    ASSERT_NE(it, files.end()) << "new dataset file " << rel << ": add it to this table";
    ++seen;
    auto format = detect_dataset_format(entry.path().string());
    ASSERT_TRUE(format.ok()) << rel << ": " << format.status().to_string();
    EXPECT_EQ(*format, it->second.format) << rel;
    auto recs = read_dataset_records(entry.path().string(), {});
    ASSERT_TRUE(recs.ok()) << rel << ": " << recs.status().to_string();
    EXPECT_EQ(static_cast<int64_t>(recs->records.size()), it->second.records) << rel;
    EXPECT_EQ(recs->skipped, 0) << rel;
  }
  EXPECT_EQ(seen, static_cast<int>(files.size()));
}

TEST(DatasetFiles, PackedTextAndTheLastTenPercent) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  DatasetOptions o;
  o.seq_len = 256;
  const std::string path = data_path("datasets/tinyshakespeare/input.txt");
  auto ds = Dataset::load(path, tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  auto text = read_file(path);
  ASSERT_TRUE(text.ok());
  const int64_t n_bytes = static_cast<int64_t>(text->size());  // 1,115,394
  const int64_t positions = n_bytes;                           // bytes + EOS, minus one
  const int64_t full = positions / 256;
  const DatasetStats& st = ds->stats();
  EXPECT_EQ(st.total_tokens, n_bytes + 1);
  EXPECT_EQ(st.positions, positions);
  EXPECT_EQ(st.trained_tokens, positions);
  EXPECT_EQ(st.sequences, full + 1);  // the tail is kept
  EXPECT_EQ(ds->size(), static_cast<size_t>(full + 1));
  // Sequence k starts at byte 256k and predicts the next byte.
  const TokenSequence& s5 = (*ds)[5];
  EXPECT_EQ(s5.input_ids[0], static_cast<unsigned char>((*text)[5 * 256]) + 3);
  EXPECT_EQ(s5.labels[255], static_cast<unsigned char>((*text)[6 * 256]) + 3);
  // The last sequence ends with the EOS target.
  EXPECT_EQ((*ds)[ds->size() - 1].labels.back(), FakeByteTokenizer::kEos);

  auto split = ds->split_tail(0.1);
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  auto& [train, eval] = *split;
  const size_t held = static_cast<size_t>(std::llround((full + 1) * 0.1));
  EXPECT_EQ(eval.size(), held);
  EXPECT_EQ(train.size() + eval.size(), ds->size());
  // Eval is the end of the file: its first position is byte 256 * train.size().
  EXPECT_EQ(eval[0].input_ids[0], static_cast<unsigned char>((*text)[256 * train.size()]) + 3);
  EXPECT_EQ(train.trained_count() + eval.trained_count(), st.trained_tokens);

  o.keep_tail = false;
  auto no_tail = Dataset::load(path, tok, o);
  ASSERT_TRUE(no_tail.ok());
  EXPECT_EQ(no_tail->size(), static_cast<size_t>(full));
  EXPECT_EQ(no_tail->stats().dropped_positions, positions - full * 256);

  EXPECT_FALSE(ds->split_tail(1.0).ok());
  EXPECT_EQ(ds->split_tail(0.0)->second.size(), 0u);
}

TEST(DatasetFiles, TextDocumentsGetEosBetweenThem) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  DatasetOptions o;
  o.seq_len = 128;
  o.add_bos = true;
  auto ds = Dataset::load(data_path("datasets/pretrain-text/c4_demo.jsonl"), tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  int64_t total = 0;
  std::ifstream in(data_path("datasets/pretrain-text/c4_demo.jsonl"));
  for (std::string line; std::getline(in, line);) total += bytes(json::parse(line)["text"]) + 2;
  EXPECT_EQ(ds->stats().records, 300);
  EXPECT_EQ(ds->stats().total_tokens, total);
  EXPECT_EQ(ds->stats().positions, total - 1);
  EXPECT_EQ((*ds)[0].input_ids[0], FakeByteTokenizer::kBos);
}

TEST(DatasetFiles, TruncationIsCounted) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  const int T = 256;
  auto ds = Dataset::load(data_path("datasets/alpaca/alpaca_en_demo.json"), tok, plain_options(T));
  ASSERT_TRUE(ds.ok());
  int64_t truncated = 0, dropped = 0;
  const json list = load_json("datasets/alpaca/alpaca_en_demo.json");
  for (const json& x : list) {
    json one = json::array({x});
    int64_t n = alpaca_expected(one).total;
    if (n > T + 1) {
      ++truncated;
      dropped += n - 1 - T;
    }
  }
  EXPECT_GT(truncated, 0);
  EXPECT_EQ(ds->stats().truncated, truncated);
  EXPECT_EQ(ds->stats().dropped_positions, dropped);
  int64_t examples = 0;
  for (size_t i = 0; i < ds->size(); ++i) {
    ASSERT_LE((*ds)[i].size(), static_cast<size_t>(T));
    examples += (*ds)[i].example_count();
  }
  EXPECT_EQ(examples, 999);
  auto h = ds->stats().histogram(10);
  int64_t sum = 0;
  for (int64_t c : h) sum += c;
  EXPECT_EQ(sum, 999);
  EXPECT_EQ(ds->stats().summary_json()["truncated"].get<int64_t>(), truncated);
}

// The packed layout (the default) holds the padded layout's examples, each whole, with positions
// restarting at 0, in nearly full sequences.
TEST(DatasetFiles, PackedInstructionLayoutHoldsThePaddedExamplesWhole) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  const int T = 2048;
  DatasetOptions o = plain_options(T);
  o.instruction_layout = InstructionLayout::kPacked;  // a job's default (data.packing)
  auto packed = Dataset::load(data_path("datasets/alpaca/alpaca_en_demo.json"), tok, o);
  o.instruction_layout = InstructionLayout::kPadded;
  auto padded = Dataset::load(data_path("datasets/alpaca/alpaca_en_demo.json"), tok, o);
  ASSERT_TRUE(packed.ok() && padded.ok());
  using Example = std::pair<std::vector<int32_t>, std::vector<int32_t>>;
  std::vector<Example> from_packed, from_padded;
  int64_t positions = 0;
  double attended = 0;  // Σ of the examples' and the padding's lengths², as attention_share
  for (size_t i = 0; i < packed->size(); ++i) {
    const TokenSequence& s = (*packed)[i];
    ASSERT_LE(s.size(), static_cast<size_t>(T));
    positions += static_cast<int64_t>(s.size());
    if (s.positions.empty()) {  // one example
      from_packed.push_back({s.input_ids, s.labels});
      attended += double(T) * T;
      continue;
    }
    const size_t first = from_packed.size();
    ASSERT_EQ(s.positions.size(), s.size());
    for (size_t t = 0; t < s.size(); ++t) {
      if (s.positions[t] == 0) from_packed.emplace_back();
      ASSERT_EQ(s.positions[t], static_cast<int32_t>(from_packed.back().first.size()));
      from_packed.back().first.push_back(s.input_ids[t]);
      from_packed.back().second.push_back(s.labels[t]);
    }
    for (size_t e = first; e < from_packed.size(); ++e)
      attended += double(from_packed[e].first.size()) * from_packed[e].first.size();
    attended += double(T - s.size()) * (T - s.size());
  }
  for (size_t i = 0; i < padded->size(); ++i)
    from_padded.push_back({(*padded)[i].input_ids, (*padded)[i].labels});
  std::sort(from_packed.begin(), from_packed.end());
  std::sort(from_padded.begin(), from_padded.end());
  EXPECT_EQ(from_packed, from_padded);
  EXPECT_EQ(packed->stats().trained_tokens, padded->stats().trained_tokens);
  EXPECT_EQ(packed->stats().truncated, padded->stats().truncated);
  // Best fit leaves little room: the sequences are over 99% full on average (999 conversations
  // of 777 bytes on average, 47 of them cut at 2048, in 380 sequences).
  EXPECT_GT(static_cast<double>(positions) / (static_cast<double>(packed->size()) * T), 0.99);
  EXPECT_LT(packed->size(), padded->size() / 2);
  // What the planner takes from the data (DataShape): the fill, and the attention packed rows
  // compute (each example's own) against padded rows' whole.
  EXPECT_DOUBLE_EQ(packed->fill(),
                   static_cast<double>(positions) / (static_cast<double>(packed->size()) * T));
  EXPECT_DOUBLE_EQ(padded->fill(), static_cast<double>(padded->position_count()) /
                                       (static_cast<double>(padded->size()) * T));
  EXPECT_LT(padded->fill(), 0.4);  // 777 bytes a conversation on average
  EXPECT_NEAR(packed->attention_share(), attended / (static_cast<double>(packed->size()) * T * T),
              1e-12);
  EXPECT_LT(packed->attention_share(), 0.7);
  EXPECT_EQ(padded->attention_share(), 1.0);
}

TEST(DatasetFiles, ParallelTokenizationMatches) {
  SPILLWAY_REQUIRE_DATA();
  FakeByteTokenizer tok;
  ThreadPool pool(2);
  DatasetOptions o = plain_options(512);
  auto serial = Dataset::load(data_path("datasets/sharegpt/glaive_toolcall_en_demo.json"), tok, o);
  o.pool = &pool;
  auto parallel =
      Dataset::load(data_path("datasets/sharegpt/glaive_toolcall_en_demo.json"), tok, o);
  ASSERT_TRUE(serial.ok() && parallel.ok());
  ASSERT_EQ(serial->size(), parallel->size());
  for (size_t i = 0; i < serial->size(); ++i) {
    ASSERT_EQ((*serial)[i].input_ids, (*parallel)[i].input_ids);
    ASSERT_EQ((*serial)[i].labels, (*parallel)[i].labels);
  }
}

TEST(Dataset, PreTokenizedOutOfVocabReportsLine) {
  testing::TempDir dir;
  std::string p = dir.file("tok.jsonl");
  ASSERT_TRUE(write_file_atomic(p,
                                "{\"input_ids\": [5, 6, 7], \"labels\": [-100, 6, 7]}\n"
                                "{\"input_ids\": [5, 600, 7]}\n"
                                "{\"input_ids\": [8, 9, 10, 11, 12]}\n")
                  .ok());
  FakeByteTokenizer tok;  // vocab 259
  DatasetOptions o;
  o.seq_len = 3;
  auto bad = Dataset::load(p, tok, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            p + ":2: 'input_ids' entry 1 = 600 is outside the vocabulary (size 259)");

  o.read.skip_bad_records = true;
  auto ds = Dataset::load(p, tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->format(), DatasetFormat::kPreTokenized);
  EXPECT_EQ(ds->stats().skipped, 1);
  ASSERT_EQ(ds->stats().issues.size(), 1u);
  EXPECT_EQ(ds->stats().issues[0].line, 2);
  ASSERT_EQ(ds->size(), 2u);  // never packed
  EXPECT_EQ((*ds)[0].input_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ((*ds)[0].labels, (std::vector<int32_t>{6, 7}));
  EXPECT_EQ((*ds)[1].input_ids, (std::vector<int32_t>{8, 9, 10}));  // cut at seq_len
  EXPECT_EQ((*ds)[1].labels, (std::vector<int32_t>{9, 10, 11}));
  EXPECT_EQ(ds->stats().truncated, 1);
}

TEST(Dataset, PreTokenizedIdsCheckedAgainstModelVocab) {
  testing::TempDir dir;
  std::string p = dir.file("tok.jsonl");
  ASSERT_TRUE(write_file_atomic(p,
                                "{\"input_ids\": [5, 300, 7], \"labels\": [-100, 300, 7]}\n"
                                "{\"input_ids\": [5, 512, 7]}\n")
                  .ok());
  DatasetOptions o;
  o.seq_len = 3;
  o.vocab_size = 512;  // the model's, larger than the tokenizer's 259
  // Without a tokenizer, and with one: the bound is the model's vocab_size either way.
  auto bare = Dataset::load(p, o);
  ASSERT_FALSE(bare.ok());
  EXPECT_EQ(bare.status().message(),
            p + ":2: 'input_ids' entry 1 = 512 is not below the model's vocab_size 512");
  FakeByteTokenizer tok;
  auto with_tok = Dataset::load(p, tok, o);
  ASSERT_FALSE(with_tok.ok());
  EXPECT_EQ(with_tok.status().message(), bare.status().message());

  o.vocab_size = 513;
  auto ds = Dataset::load(p, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  ASSERT_EQ(ds->size(), 2u);
  EXPECT_EQ((*ds)[0].input_ids, (std::vector<int32_t>{5, 300}));
  EXPECT_EQ((*ds)[0].labels, (std::vector<int32_t>{300, 7}));
  EXPECT_EQ(ds->pad_id(), 0);
  // 300 is beyond the tokenizer's 259 but within the model's vocabulary.
  EXPECT_TRUE(Dataset::load(p, tok, o).ok());
}

TEST(Dataset, WithoutTokenizerOnlyPreTokenizedData) {
  testing::TempDir dir;
  const std::string text = dir.file("a.txt"), ids = dir.file("ids.jsonl");
  ASSERT_TRUE(write_file_atomic(text, "some text\n").ok());
  ASSERT_TRUE(write_file_atomic(ids, "{\"input_ids\": [1, 2, 3]}\n").ok());
  DatasetOptions o;
  o.seq_len = 4;
  o.vocab_size = 16;
  auto t = Dataset::load(text, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(text + ": text data needs a tokenizer"), std::string::npos)
      << t.status().message();
  o.vocab_size = 0;  // nothing to check the ids against
  auto unbounded = Dataset::load(ids, o);
  ASSERT_FALSE(unbounded.ok());
  EXPECT_NE(unbounded.status().message().find("vocab_size"), std::string::npos);
}

TEST(Dataset, DefaultSystemPromptAndMissingEos) {
  DatasetRecords recs;
  recs.format = DatasetFormat::kAlpaca;
  DatasetRecord r;
  r.line = 1;
  r.messages = {{ChatRole::kUser, "q"}, {ChatRole::kAssistant, "a"}};
  recs.records.push_back(r);
  FakeByteTokenizer tok;
  DatasetOptions o = plain_options(64);
  o.default_system = "S";
  auto ds = Dataset::from_records(recs, "mem", tok, o);
  ASSERT_TRUE(ds.ok());
  // [BOS] S \n \n q \n a [EOS] -> 8 tokens, 7 positions; targets 'a' and EOS.
  EXPECT_EQ((*ds)[0].size(), 7u);
  EXPECT_EQ((*ds)[0].trained_count(), 2);
  EXPECT_EQ((*ds)[0].input_ids[1], 'S' + 3);

  FakeByteTokenizer no_specials("", /*has_bos=*/false, /*has_eos=*/false);
  auto bare = Dataset::from_records(recs, "mem", no_specials, plain_options(64));
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ((*bare)[0].size(), 2u);  // tokens q \n a: two positions
  EXPECT_EQ((*bare)[0].labels, (std::vector<int32_t>{-100, 'a' + 3}));
}

TEST(Dataset, RejectsBadSettings) {
  FakeByteTokenizer tok;
  DatasetRecords recs;
  recs.format = DatasetFormat::kJsonText;
  recs.records.push_back(DatasetRecord{1, "x", {}, {}, {}});
  DatasetOptions o;
  o.seq_len = 0;
  EXPECT_FALSE(Dataset::from_records(recs, "mem", tok, o).ok());
  o.seq_len = 8;
  FakeByteTokenizer no_eos("", true, false);
  // One byte and no EOS: a single token, no target at all.
  auto r = Dataset::from_records(recs, "mem", no_eos, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no training sequence"), std::string::npos);
}

#ifdef SPILLWAY_HAVE_TOKENIZER_LOAD
// With the real stories260K tokenizer (SentencePiece-style BPE, vocab 512, BOS 1, EOS 2).
class RealTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::have_data()) GTEST_SKIP() << "test data not found";
    auto t = Tokenizer::load(data_path("models/stories260K/tokenizer.json"));
    if (!t.ok()) GTEST_SKIP() << "Tokenizer::load not usable yet: " << t.status().to_string();
    tok_ = std::move(t).value();
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(RealTokenizer, AlpacaMasksCountReplyTokens) {
  const Tokenizer& tok = *tok_;
  auto ds = Dataset::load(data_path("datasets/alpaca/alpaca_en_demo.json"), tok, plain_options());
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  int64_t trained = 0, total = 0;
  for (const json& x : load_json("datasets/alpaca/alpaca_en_demo.json")) {
    std::string user = x["instruction"].get<std::string>();
    if (!x["input"].get<std::string>().empty()) user += "\n\n" + x["input"].get<std::string>();
    int64_t reply = static_cast<int64_t>(tok.encode(x["output"].get<std::string>())->size());
    trained += reply + 1;
    total += 1 + static_cast<int64_t>(tok.encode(user + "\n")->size()) + reply + 1;
  }
  EXPECT_EQ(ds->size(), 999u);
  EXPECT_EQ(ds->stats().trained_tokens, trained);
  EXPECT_EQ(ds->stats().total_tokens, total);
  EXPECT_EQ((*ds)[0].input_ids[0], 1);  // BOS
  // Pinned figures (plain template, stories260K): a change means the tokenizer or the template
  // changed.
  EXPECT_EQ(ds->stats().total_tokens, 485300);
  EXPECT_EQ(ds->stats().trained_tokens, 429476);
}

TEST_F(RealTokenizer, ShareGptAndPackedStories) {
  const Tokenizer& tok = *tok_;
  auto chat = Dataset::load(data_path("datasets/sharegpt/fastchat_dummy_conversation.json"), tok,
                            plain_options());
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(chat->size(), 500u);
  int64_t trained = 0;
  for (const json& x : load_json("datasets/sharegpt/fastchat_dummy_conversation.json"))
    for (const json& m : x["conversations"])
      if (m["from"] == "gpt")
        trained += static_cast<int64_t>(tok.encode(m["value"].get<std::string>())->size()) + 1;
  EXPECT_EQ(chat->stats().trained_tokens, trained);
  EXPECT_EQ(chat->stats().total_tokens, 58383);
  EXPECT_EQ(chat->stats().trained_tokens, 45475);

  DatasetOptions o;
  o.seq_len = 64;
  auto stories = Dataset::load(data_path("datasets/tinystories/tinystories_sample.txt"), tok, o);
  ASSERT_TRUE(stories.ok()) << stories.status().to_string();
  EXPECT_EQ(stories->stats().records, 5);
  EXPECT_EQ(stories->stats().positions, stories->stats().total_tokens - 1);
  auto it = BatchIterator::create(*stories, 4, 1);
  ASSERT_TRUE(it.ok());
  Batch b = it->next();
  for (int32_t id : b.input_ids) EXPECT_LT(id, tok.vocab_size());
}

// Encoding the segments one by one must give the ids that encoding the whole rendered text gives
// (what HF apply_chat_template + tokenize produce) for byte-level BPE templates whose segment
// boundaries sit at special tokens or newlines.
void expect_segmentwise_equals_whole(const Tokenizer& tok, const Dataset& ds,
                                     const std::string& rel, size_t count) {
  auto recs = read_dataset_records(data_path(rel), {});
  ASSERT_TRUE(recs.ok());
  const std::string& sys = ds.chat_template().default_system;
  for (size_t i = 0; i < count && i < recs->records.size(); ++i) {
    std::vector<ChatMessage> msgs = recs->records[i].messages;
    if (!sys.empty() && msgs.front().role != ChatRole::kSystem)
      msgs.insert(msgs.begin(), ChatMessage{ChatRole::kSystem, sys});
    auto segs = render_chat(ds.chat_template().kind, msgs);
    ASSERT_TRUE(segs.ok());
    std::string whole;
    for (const ChatSegment& g : *segs) {
      if (g.special == ChatSegment::Special::kBos)
        whole += tok.id_to_token(*tok.bos_id());
      else if (g.special == ChatSegment::Special::kEos)
        whole += tok.id_to_token(*tok.eos_id());
      else
        whole += g.text;
    }
    std::vector<int32_t> ids = *tok.encode(whole);
    const TokenSequence& s = ds[i];
    ASSERT_EQ(s.size() + 1, ids.size()) << "record " << i;
    EXPECT_TRUE(std::equal(s.input_ids.begin(), s.input_ids.end(), ids.begin())) << "record " << i;
  }
}

std::unique_ptr<Tokenizer> load_or_null(const std::string& rel) {
  auto t = Tokenizer::load(data_path(rel));
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(RealTokenizers, ChatMlWithQwen25) {
  SPILLWAY_REQUIRE_DATA();
  auto tok = load_or_null("tokenizers/qwen2.5/tokenizer.json");
  if (!tok) GTEST_SKIP() << "qwen2.5 tokenizer does not load yet";
  auto im_start = tok->token_to_id("<|im_start|>"), im_end = tok->token_to_id("<|im_end|>");
  ASSERT_TRUE(im_start && im_end);
  DatasetOptions o;
  o.seq_len = 4096;
  // The hand-written ChatML, forced (auto renders Qwen2.5's own template: ChatMlEqualsQwen25Own).
  o.chat_template = ChatTemplateKind::kChatMl;
  auto ds = Dataset::load(data_path("datasets/sharegpt/fastchat_dummy_conversation.json"), *tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  // With Qwen2.5's default system message, from its own template.
  EXPECT_EQ(ds->chat_template().kind, ChatTemplateKind::kChatMl) << ds->chat_template().reason;
  EXPECT_EQ(ds->chat_template().default_system,
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  const TokenSequence& s = (*ds)[0];
  EXPECT_EQ(s.input_ids[0], *im_start);  // no BOS in Qwen
  // Every trained span ends with <|im_end|>: one per reply.
  int64_t im_end_targets = 0, replies = 0;
  for (int32_t l : s.labels) im_end_targets += l == *im_end;
  const json first = load_json("datasets/sharegpt/fastchat_dummy_conversation.json")[0];
  for (const json& m : first["conversations"]) replies += m["from"] == "gpt";
  EXPECT_EQ(im_end_targets, replies);
  // The reply's tokens are exactly encode(reply) followed by <|im_end|>.
  const std::string reply = first["conversations"][1]["value"];
  std::vector<int32_t> want = *tok->encode(reply);
  want.push_back(*im_end);
  std::vector<int32_t> got;
  for (int32_t l : s.labels) {
    if (l != kIgnoreIndex) got.push_back(l);
    if (l == *im_end) break;
  }
  EXPECT_EQ(got, want);
  expect_segmentwise_equals_whole(*tok, *ds, "datasets/sharegpt/fastchat_dummy_conversation.json",
                                  50);
  auto glaive = Dataset::load(data_path("datasets/sharegpt/glaive_toolcall_en_demo.json"), *tok, o);
  ASSERT_TRUE(glaive.ok()) << glaive.status().to_string();
  expect_segmentwise_equals_whole(*tok, *glaive, "datasets/sharegpt/glaive_toolcall_en_demo.json",
                                  50);
}

TEST(RealTokenizers, Llama3HeadersAreSpecialTokens) {
  SPILLWAY_REQUIRE_DATA();
  auto tok = load_or_null("tokenizers/llama3/tokenizer.json");
  if (!tok) GTEST_SKIP() << "llama3 tokenizer does not load yet";
  auto header = tok->token_to_id("<|start_header_id|>"), eot = tok->token_to_id("<|eot_id|>");
  ASSERT_TRUE(header && eot);
  DatasetOptions o;
  o.seq_len = 4096;
  o.chat_template = ChatTemplateKind::kLlama3;  // the hand-written one, forced
  auto ds = Dataset::load(data_path("datasets/alpaca/identity.json"), *tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->chat_template().kind, ChatTemplateKind::kLlama3) << ds->chat_template().reason;
  const TokenSequence& s = (*ds)[0];
  EXPECT_EQ(s.input_ids[0], *tok->bos_id());  // <|begin_of_text|>
  EXPECT_EQ(s.input_ids[1], *header);
  EXPECT_EQ(s.labels.back(), *eot);  // the reply's closing <|eot_id|> is trained
  int64_t eots = 0;
  for (int32_t l : s.labels) eots += l == *eot;
  EXPECT_EQ(eots, 1);
  expect_segmentwise_equals_whole(*tok, *ds, "datasets/alpaca/identity.json", 91);
}

// By default a model with its own template trains on it (kModel, rendered by jinja2). For plain
// conversations Qwen2.5's own template and the hand-written ChatML agree token for token, which
// checks each against the other; for tool calls they do not (the hand-written one puts the tools
// in a system message of its own wording), and the own template is transformers' (the
// chat_template_jinja_tests).
TEST(RealTokenizers, ChatMlEqualsQwen25Own) {
  SPILLWAY_REQUIRE_DATA();
  auto tok = load_or_null("tokenizers/qwen2.5/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  DatasetOptions o;
  o.seq_len = 4096;
  const std::string path = data_path("datasets/sharegpt/fastchat_dummy_conversation.json");
  auto own = Dataset::load(path, *tok, o);
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  EXPECT_EQ(own->chat_template().kind, ChatTemplateKind::kModel) << own->chat_template().reason;
  o.chat_template = ChatTemplateKind::kChatMl;
  auto chatml = Dataset::load(path, *tok, o);
  ASSERT_TRUE(chatml.ok()) << chatml.status().to_string();
  ASSERT_EQ(own->size(), chatml->size());
  for (size_t i = 0; i < own->size(); ++i) {
    EXPECT_EQ((*own)[i].input_ids, (*chatml)[i].input_ids) << "record " << i;
    EXPECT_EQ((*own)[i].labels, (*chatml)[i].labels) << "record " << i;
  }
}

// A template that writes bos_token as text (Llama 3's) gets one BOS: the tokenizer adds none.
TEST(RealTokenizers, Llama3OwnTemplateHasOneBos) {
  SPILLWAY_REQUIRE_DATA();
  auto tok = load_or_null("tokenizers/llama3/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  DatasetOptions o;
  o.seq_len = 4096;
  auto ds = Dataset::load(data_path("datasets/alpaca/identity.json"), *tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->chat_template().kind, ChatTemplateKind::kModel);
  const TokenSequence& s = (*ds)[0];
  EXPECT_EQ(s.input_ids[0], *tok->bos_id());
  EXPECT_NE(s.input_ids[1], *tok->bos_id());
  int64_t bos = 0;
  for (int32_t id : s.input_ids) bos += id == *tok->bos_id();
  EXPECT_EQ(bos, 1);
}

// A conversation the template refuses names the example and the template's line; with
// skip_bad_records the others train.
TEST(RealTokenizers, TemplateErrorNamesExampleAndLine) {
  SPILLWAY_REQUIRE_DATA();
  testing::FakeByteTokenizer tok(
      "{% for m in messages %}\n{% if m.role == 'system' %}\n"
      "{{ raise_exception('no system messages here') }}\n{% endif %}{{ m.content }}\n"
      "{% endfor %}");
  const std::string data =
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
      "\"content\": \"b\"}]}\n"
      "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
      "\"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n";
  DatasetOptions o;
  o.seq_len = 64;
  auto recs = parse_dataset_records(data, "chats.jsonl", o.read);
  ASSERT_TRUE(recs.ok()) << recs.status().to_string();
  auto ds = Dataset::from_records(*recs, "chats.jsonl", tok, o);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().message(),
            "chats.jsonl:2: the chat template failed at its line 3: no system messages here");
  o.read.skip_bad_records = true;
  auto skipped = Dataset::from_records(*recs, "chats.jsonl", tok, o);
  ASSERT_TRUE(skipped.ok()) << skipped.status().to_string();
  EXPECT_EQ(skipped->stats().records, 1);
  EXPECT_EQ(skipped->stats().skipped, 1);
}

// Llama-2 (SentencePiece-style BPE): the dataset's ids equal those of the string that Meta's
// chat format / the HF Llama-2 template produce, "<s>[INST] {user} [/INST] {reply} </s>...",
// built here independently of the renderer.
TEST(RealTokenizers, Llama2MatchesTheReferenceString) {
  SPILLWAY_REQUIRE_DATA();
  auto tok = load_or_null("tokenizers/llama2/tokenizer.json");
  if (!tok) GTEST_SKIP() << "llama2 tokenizer does not load yet";
  DatasetOptions o;
  o.seq_len = 4096;
  o.model_type = "llama";  // no chat_template in this tokenizer_config.json: the family decides
  const std::string rel = "datasets/sharegpt/fastchat_dummy_conversation.json";
  auto ds = Dataset::load(data_path(rel), *tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->chat_template().kind, ChatTemplateKind::kLlama2) << ds->chat_template().reason;
  const json list = load_json(rel);
  auto strip = [](std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t b = 0;
    while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    return s.substr(b);
  };
  for (size_t i = 0; i < 50; ++i) {
    std::string text;
    for (const json& m : list[i]["conversations"]) {
      std::string v = strip(m["value"].get<std::string>());
      if (m["from"] == "human")
        text += "<s>[INST] " + v + " [/INST]";
      else
        text += " " + v + " </s>";
    }
    std::vector<int32_t> ids = *tok->encode(text);
    const TokenSequence& s = (*ds)[i];
    ASSERT_EQ(s.size() + 1, ids.size()) << "record " << i << ": " << text;
    EXPECT_TRUE(std::equal(s.input_ids.begin(), s.input_ids.end(), ids.begin())) << "record " << i;
    EXPECT_EQ(s.labels.back(), *tok->eos_id());
  }
}
#endif

}  // namespace
}  // namespace spillway
