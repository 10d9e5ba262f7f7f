#include "data/dataset-reader.h"

#include <gtest/gtest.h>

#include "core/file-util.h"
#include "test-data.h"

namespace spillway {
namespace {

using testing::TempDir;

std::string write(const TempDir& dir, const std::string& name, const std::string& content) {
  std::string p = dir.file(name);
  EXPECT_TRUE(write_file_atomic(p, content).ok());
  return p;
}

// Reads `content` as file `name` and expects the first error to be "PATH:LINE: ...reason...".
void expect_bad(const std::string& name, const std::string& content, int64_t line,
                const std::string& reason, DatasetFormat format = DatasetFormat::kAuto) {
  TempDir dir;
  std::string p = write(dir, name, content);
  ReadOptions opt;
  opt.format = format;
  auto r = read_dataset_records(p, opt);
  ASSERT_FALSE(r.ok()) << name << " should fail";
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  const std::string prefix = p + ":" + std::to_string(line) + ": ";
  EXPECT_EQ(r.status().message().rfind(prefix, 0), 0u)
      << "message '" << r.status().message() << "' should start with '" << prefix << "'";
  EXPECT_NE(r.status().message().find(reason), std::string::npos)
      << "message '" << r.status().message() << "' should mention '" << reason << "'";
}

TEST(DatasetReaderBadLines, InvalidJsonLine) {
  expect_bad("a.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"broken\"\n{\"text\": \"x\"}\n", 3,
             "invalid JSON");
}

// A record with an unterminated string of a megabyte: nlohmann's message quoted the whole token it
// read (the megabyte, newlines escaped or not) into the error. Now the place, escaped and cut
// short.
TEST(DatasetReaderBadLines, AMegabyteBrokenRecordIsNotEchoed) {
  const std::string content =
      "{\"text\": \"ok\"}\n{\"text\": \"" + std::string(1 << 20, 'x') + "\u0001\"}\n";
  expect_bad("big.jsonl", content, 2,
             "invalid JSON: syntax error while parsing value - invalid string: control character");
  TempDir dir;
  auto r = read_dataset_records(write(dir, "big.jsonl", content), ReadOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 500u) << r.status().message().substr(0, 500);
}

// A file that is not UTF-8 text is refused with what it is, never read as text (the worker
// trained on a gzip file's bytes without a word); real text with a stray Latin-1 byte is fine.
TEST(DatasetReaderBadLines, BinaryFilesAreNotText) {
  TempDir dir;
  const std::pair<std::string, const char*> cases[] = {
      {std::string("\x1F\x8B\x08\x00\x00\x00", 6), "is a gzip file, not text"},
      {std::string("PAR1\x15\x04\x15", 7), "is a Parquet file, not text"},
      {std::string("\xFF\xFEh\x00i\x00", 6), "is UTF-16 text: save it as UTF-8"},
      {std::string("text\0more", 9), "byte 4 is NUL"},
      {std::string(200, '\x01') + "abc", "are control characters or invalid UTF-8"},
  };
  for (const auto& [bytes, what] : cases) {
    const std::string p = write(dir, "d.txt", bytes);
    auto r = read_dataset_records(p, ReadOptions{});
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind(p + " is ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
    EXPECT_FALSE(detect_dataset_format(p).ok()) << what;
  }
  const std::string latin1 = write(dir, "l.txt",
                                   "F\xFC\xDF"
                                   "e over the road, and a long enough line of plain text.\n");
  EXPECT_TRUE(read_dataset_records(latin1, ReadOptions{}).ok());
}

// A record nested thousands of levels deep is a bad line, not a stack overflow.
TEST(DatasetReaderBadLines, PathologicalNesting) {
  const std::string deep = "{\"text\": " + std::string(20000, '[') + std::string(20000, ']') + "}";
  expect_bad("a.jsonl", "{\"text\": \"ok\"}\n" + deep + "\n", 2,
             "JSON nested 20001 levels deep (at most 100)");
}

TEST(DatasetReaderBadLines, MissingKey) {
  expect_bad("a.jsonl",
             "{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}\n"
             "{\"instruction\": \"c\", \"input\": \"\"}\n",
             2, "missing key 'output'");
}

TEST(DatasetReaderBadLines, WrongType) {
  expect_bad("a.jsonl",
             "{\"instruction\": \"a\", \"output\": \"b\"}\n"
             "{\"instruction\": 5, \"output\": \"b\"}\n",
             2, "'instruction' must be a string, got an integer");
}

TEST(DatasetReaderBadLines, EmptyConversation) {
  expect_bad("c.jsonl",
             "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": \"gpt\", "
             "\"value\": \"yo\"}]}\n{\"conversations\": []}\n",
             2, "empty conversation");
}

TEST(DatasetReaderBadLines, UnknownRole) {
  expect_bad("c.jsonl",
             "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": \"robot\", "
             "\"value\": \"yo\"}]}\n",
             1, "message 2: unknown role 'robot'");
}

TEST(DatasetReaderBadLines, NoAssistantTurn) {
  expect_bad("m.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n", 1,
             "no assistant turn");
}

TEST(DatasetReaderBadLines, LabelsLengthMismatch) {
  expect_bad("t.jsonl",
             "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [1, 2, 3], \"labels\": [-100, 2]}\n", 2,
             "'labels' has 2 entries but 'input_ids' has 3");
}

TEST(DatasetReaderBadLines, NonIntegerIds) {
  expect_bad("t.jsonl", "{\"input_ids\": [1, \"2\", 3]}\n", 1, "entry 1 is a string");
  expect_bad("t.jsonl", "{\"input_ids\": [1, -5, 3]}\n", 1, "-5 is not a token id");
}

TEST(DatasetReaderBadLines, NotAnObject) {
  expect_bad("a.jsonl", "{\"text\": \"ok\"}\n[1, 2]\n", 2, "expected a JSON object, got an array");
}

TEST(DatasetReaderBadLines, SystemInTheMiddle) {
  expect_bad("m.jsonl",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"system\", "
             "\"content\": \"b\"}, {\"role\": \"assistant\", \"content\": \"c\"}]}\n",
             1, "message 2 is a system message");
}

TEST(DatasetReaderBadLines, ElementOfJsonListReportsItsLine) {
  // Line 7 holds the start of the second element, which lacks "output".
  std::string content =
      "[\n"
      "  {\n"
      "    \"instruction\": \"a\",\n"
      "    \"output\": \"b\"\n"
      "  },\n"
      "\n"
      "  {\n"
      "    \"instruction\": \"c\"\n"
      "  }\n"
      "]\n";
  expect_bad("list.json", content, 7, "missing key 'output'");
}

TEST(DatasetReaderBadLines, InvalidJsonInsideListElementReportsTheErrorLine) {
  std::string content =
      "[\n"
      "  {\"text\": \"a\"},\n"
      "  {\"text\":\n"
      "     tru}\n"
      "]\n";
  expect_bad("list.json", content, 4, "invalid JSON");
}

TEST(DatasetReaderBadLines, StructuralDamageIsFatalEvenWhenSkipping) {
  TempDir dir;
  std::string p = write(dir, "x.json", "[\n {\"text\": \"a\"},\n {\"text\": \"b\"}\n");
  ReadOptions opt;
  opt.skip_bad_records = true;
  auto r = read_dataset_records(p, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(p + ":1: invalid JSON: the list opened here is never closed"),
            std::string::npos)
      << r.status().message();
}

TEST(DatasetReader, SkipBadRecordsCountsAndReports) {
  TempDir dir;
  std::string p = write(dir, "a.jsonl",
                        "{\"instruction\": \"a\", \"output\": \"b\"}\n"
                        "{\"instruction\": \"a\"}\n"
                        "not json\n"
                        "{\"instruction\": \"c\", \"input\": \"d\", \"output\": \"e\"}\n"
                        "{\"instruction\": [], \"output\": \"e\"}\n");
  ReadOptions opt;
  opt.skip_bad_records = true;
  opt.max_reported_issues = 2;
  auto r = read_dataset_records(p, opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->format, DatasetFormat::kAlpaca);
  EXPECT_EQ(r->records.size(), 2u);
  EXPECT_EQ(r->skipped, 3);
  ASSERT_EQ(r->issues.size(), 2u);
  EXPECT_EQ(r->issues[0].line, 2);
  EXPECT_EQ(r->issues[1].line, 3);
  EXPECT_EQ(r->issues[0].to_string(), p + ":2: missing key 'output'");
  EXPECT_EQ(r->records[1].line, 4);
  ASSERT_EQ(r->records[1].messages.size(), 2u);
  EXPECT_EQ(r->records[1].messages[0].content, "c\n\nd");
  EXPECT_EQ(r->records[1].messages[1].content, "e");
}

TEST(DatasetReader, AllRecordsBadIsAnError) {
  TempDir dir;
  std::string p = write(dir, "a.jsonl", "{\"text\": 1}\n{\"text\": 2}\n");
  ReadOptions opt;
  opt.format = DatasetFormat::kJsonText;
  opt.skip_bad_records = true;
  auto r = read_dataset_records(p, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no usable record (2 bad"), std::string::npos)
      << r.status().message();
}

TEST(DatasetReader, UndetectableFormatNamesKeys) {
  expect_bad("a.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n", 1,
             "cannot detect the dataset format: the first record has keys [completion, prompt]");
}

TEST(DatasetReader, DetectsFormatsFromKeysAndExtension) {
  TempDir dir;
  struct Case {
    std::string name, content;
    DatasetFormat format;
  } cases[] = {
      {"a.txt", "hello", DatasetFormat::kText},
      {"a.md", "{\"text\": \"x\"}", DatasetFormat::kText},  // not a JSON extension
      {"a.jsonl", "{\"text\": \"x\"}\n", DatasetFormat::kJsonText},
      {"a.json", "[{\"instruction\": \"x\", \"output\": \"y\"}]", DatasetFormat::kAlpaca},
      {"a.json",
       "{\"conversations\": [{\"from\": \"human\", \"value\": \"a\"}, {\"from\": \"gpt\", "
       "\"value\": \"b\"}]}",
       DatasetFormat::kShareGpt},
      {"a.ndjson",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
       "\"content\": \"b\"}]}\n",
       DatasetFormat::kOpenAiMessages},
      {"a.jsonl", "{\"input_ids\": [1, 2, 3]}\n", DatasetFormat::kPreTokenized},
  };
  for (const Case& c : cases) {
    std::string p = write(dir, c.name, c.content);
    auto f = detect_dataset_format(p);
    ASSERT_TRUE(f.ok()) << c.name << ": " << f.status().to_string();
    EXPECT_EQ(*f, c.format) << c.name << " " << c.content;
    auto r = read_dataset_records(p, ReadOptions{});
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status().to_string();
    EXPECT_EQ(r->format, c.format);
    EXPECT_EQ(r->records.size(), 1u);
  }
}

TEST(DatasetReader, FormatNamesRoundTrip) {
  for (DatasetFormat f : {DatasetFormat::kAuto, DatasetFormat::kText, DatasetFormat::kJsonText,
                          DatasetFormat::kAlpaca, DatasetFormat::kShareGpt,
                          DatasetFormat::kOpenAiMessages, DatasetFormat::kPreTokenized}) {
    auto p = parse_dataset_format(dataset_format_name(f));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, f);
  }
  EXPECT_FALSE(parse_dataset_format("csv").ok());
  EXPECT_EQ(*parse_dataset_format("messages"), DatasetFormat::kOpenAiMessages);
}

TEST(DatasetReader, OverrideFormatReadsJsonAsText) {
  TempDir dir;
  std::string p = write(dir, "a.jsonl", "{\"text\": \"x\"}\n");
  ReadOptions opt;
  opt.format = DatasetFormat::kText;
  auto r = read_dataset_records(p, opt);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->records.size(), 1u);
  EXPECT_EQ(r->records[0].text, "{\"text\": \"x\"}\n");
}

TEST(DatasetReader, TextSplits) {
  const std::string text = "first line\nsecond\n\n\nthird para\nstill third\n";
  auto read = [&](TextSplit split) {
    ReadOptions opt;
    opt.text_split = split;
    auto r = parse_dataset_records(text, "x.txt", opt);
    EXPECT_TRUE(r.ok());
    return std::move(r).value();
  };
  auto whole = read(TextSplit::kAuto);
  EXPECT_EQ(whole.text_split, TextSplit::kWholeFile);
  ASSERT_EQ(whole.records.size(), 1u);
  EXPECT_EQ(whole.records[0].text, text);

  auto lines = read(TextSplit::kLines);
  ASSERT_EQ(lines.records.size(), 4u);
  EXPECT_EQ(lines.records[2].text, "third para");
  EXPECT_EQ(lines.records[2].line, 5);

  auto paras = read(TextSplit::kParagraphs);
  ASSERT_EQ(paras.records.size(), 2u);
  EXPECT_EQ(paras.records[0].text, "first line\nsecond");
  EXPECT_EQ(paras.records[1].text, "third para\nstill third");
  EXPECT_EQ(paras.records[1].line, 5);

  auto eot = parse_dataset_records("story one\n<|endoftext|>\nstory two<|endoftext|>", "s.txt", {});
  ASSERT_TRUE(eot.ok());
  EXPECT_EQ(eot->text_split, TextSplit::kEndOfText);
  ASSERT_EQ(eot->records.size(), 2u);
  EXPECT_EQ(eot->records[0].text, "story one");
  EXPECT_EQ(eot->records[1].text, "story two");
  EXPECT_EQ(eot->records[1].line, 3);
}

TEST(DatasetReader, ShareGptRolesAndTools) {
  const std::string line =
      "{\"system\": \"be brief\", \"tools\": \"[{\\\"name\\\": \\\"f\\\"}]\", \"conversations\": ["
      "{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"function_call\", \"value\": \"{}\"}, "
      "{\"from\": \"observation\", \"value\": \"r\"}, {\"from\": \"gpt\", \"value\": \"a\"}]}\n";
  auto r = parse_dataset_records(line, "s.jsonl", {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& m = r->records.at(0).messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, ChatRole::kSystem);
  EXPECT_EQ(m[0].content,
            "be brief\n\nYou have access to the following tools:\n[{\"name\": \"f\"}]");
  EXPECT_EQ(m[1].role, ChatRole::kUser);
  EXPECT_EQ(m[2].role, ChatRole::kToolCall);
  EXPECT_EQ(m[3].role, ChatRole::kToolResult);
  EXPECT_EQ(m[4].role, ChatRole::kAssistant);
}

TEST(DatasetReader, OpenAiContentPartsAndToolCalls) {
  const std::string line =
      "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, "
      "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": "
      "\"text\", \"text\": \"b\"}]}, "
      "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\": {\"name\": "
      "\"f\"}}]}, "
      "{\"role\": \"tool\", \"content\": \"42\"}, {\"role\": \"assistant\", \"content\": "
      "\"done\"}]}\n";
  auto r = parse_dataset_records(line, "o.jsonl", {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& m = r->records.at(0).messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[1].content, "ab");
  EXPECT_EQ(m[2].role, ChatRole::kToolCall);
  EXPECT_EQ(m[2].content, "[{\"function\":{\"name\":\"f\"}}]");
  EXPECT_EQ(m[3].role, ChatRole::kToolResult);

  auto bad = parse_dataset_records(
      "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}, "
      "{\"role\": \"assistant\", \"content\": \"x\"}]}",
      "o.jsonl", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "o.jsonl:1: message 1 has a content part of unsupported type 'image_url'"),
            std::string::npos)
      << bad.status().message();
}

TEST(DatasetReader, AlpacaHistorySystemAndSeedInstances) {
  auto r = parse_dataset_records(
      "{\"system\": \"S\", \"history\": [[\"u1\", \"a1\"]], \"instruction\": \"u2\", \"input\": "
      "null, "
      "\"output\": \"a2\"}\n"
      "{\"id\": \"seed_task_0\", \"instruction\": \"I\", \"instances\": [{\"input\": \"x\", "
      "\"output\": \"y\"}, "
      "{\"input\": \"\", \"output\": \"z\"}]}\n",
      "a.jsonl", {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->records.size(), 3u);
  const auto& m = r->records[0].messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, ChatRole::kSystem);
  EXPECT_EQ(m[1].content, "u1");
  EXPECT_EQ(m[2].content, "a1");
  EXPECT_EQ(m[3].content, "u2");
  EXPECT_EQ(m[4].content, "a2");
  EXPECT_EQ(r->records[1].messages[0].content, "I\n\nx");
  EXPECT_EQ(r->records[2].messages[0].content, "I");
  EXPECT_EQ(r->records[2].messages[1].content, "z");
  EXPECT_EQ(r->records[2].line, 2);
}

TEST(DatasetReader, PreTokenizedKeepsHfLabels) {
  auto r = parse_dataset_records(
      "{\"input_ids\": [5, 6, 7], \"labels\": [-100, 6, 7], \"attention_mask\": [1, 1, 1]}",
      "t.jsonl", {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->records[0].input_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(r->records[0].labels, (std::vector<int32_t>{-100, 6, 7}));
}

TEST(DatasetReader, MissingFileIsNotFound) {
  auto r = read_dataset_records("/nonexistent/spillway/data.jsonl", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace spillway
