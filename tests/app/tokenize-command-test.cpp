// `spillway-worker tokenize`, run in-process through run_worker with string streams.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/tokenizer.h"
#include "test-data.h"
#include "worker/commands.h"

namespace spillway::testing {
namespace {

struct RunResult {
  int code;
  std::string out, err;
};

RunResult run(const std::vector<std::string>& argv, const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = worker::run_worker(argv, {in, out, err});
  return {code, out.str(), err.str()};
}

std::vector<std::vector<int32_t>> parse_ids(const std::string& out) {
  std::vector<std::vector<int32_t>> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    rows.push_back(nlohmann::json::parse(line).at("ids").get<std::vector<int32_t>>());
  return rows;
}

TEST(TokenizeCommand, WritesIdsPerLine) {
  SPILLWAY_REQUIRE_DATA();
  const std::string path = data_path("models/stories260K");
  auto tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string input =
      "{\"text\": \"Once upon a time\"}\n\n{\"text\": \"\", \"extra\": 1}\r\n{\"text\": \"Lily "
      "\\u00e9 </s>\"}\n";
  RunResult r = run({"tokenize", "--tokenizer", path}, input);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = parse_ids(r.out);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], *(*tok)->encode("Once upon a time"));
  EXPECT_TRUE(rows[1].empty());
  EXPECT_EQ(rows[2], *(*tok)->encode("Lily \xC3\xA9 </s>"));
  EXPECT_EQ(rows[2].back(), 2);  // "</s>" in the text is the special token

  r = run({"tokenize", "--tokenizer", path, "--add-special-tokens"},
          "{\"text\": \"Once upon a time\"}\n");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto with = parse_ids(r.out);
  ASSERT_EQ(with.size(), 1u);
  EXPECT_EQ(with[0], *(*tok)->encode_with_special("Once upon a time"));
  EXPECT_EQ(with[0].front(), 1);
}

TEST(TokenizeCommand, MalformedLineNamesTheLine) {
  SPILLWAY_REQUIRE_DATA();
  const std::string path = data_path("models/stories260K/tokenizer.json");
  RunResult r = run({"tokenize", "--tokenizer", path},
                    "{\"text\": \"ok\"}\n{\"text\": oops}\n{\"text\": \"x\"}\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
  EXPECT_EQ(parse_ids(r.out).size(), 1u);  // line 1 was written before the error

  r = run({"tokenize", "--tokenizer", path}, "{\"text\": \"ok\"}\n\n{\"txt\": \"no text key\"}\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\"text\""), std::string::npos) << r.err;

  r = run({"tokenize", "--tokenizer", path}, "[\"text\"]\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("line 1"), std::string::npos) << r.err;
}

// A malformed line of a megabyte: nlohmann's message quoted the whole token it read last (the
// megabyte, a control byte included) on stderr. Now the line and column, and a short escaped quote.
TEST(TokenizeCommand, AMegabyteMalformedLineIsNotEchoed) {
  SPILLWAY_REQUIRE_DATA();
  const std::string path = data_path("models/stories260K/tokenizer.json");
  RunResult r = run({"tokenize", "--tokenizer", path},
                    "{\"text\": \"" + std::string(1 << 20, 'x') + "\x01\"}\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_LT(r.err.size(), 400u) << r.err.substr(0, 400);
  EXPECT_EQ(r.err.rfind("spillway-worker tokenize: line 1:1:", 0), 0u) << r.err.substr(0, 400);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err.substr(0, 400);
  EXPECT_EQ(r.err.find('\x01'), std::string::npos);
}

TEST(TokenizeCommand, ArgumentAndLoadErrors) {
  RunResult r = run({"tokenize"}, "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tokenizer"), std::string::npos);
  r = run({"tokenize", "--tokenizer", "x", "--bogus"}, "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--bogus"), std::string::npos);
  // The same parser as every other command: a missing value and a stray argument are named, and
  // --tokenizer=PATH is the same as --tokenizer PATH.
  r = run({"tokenize", "--tokenizer"}, "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("option --tokenizer needs a value"), std::string::npos) << r.err;
  r = run({"tokenize", "--tokenizer", "x", "extra.txt"}, "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unexpected argument"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("extra.txt"), std::string::npos) << r.err;
  r = run({"tokenize", "--tokenizer=/nonexistent/tokenizer.json"}, "{\"text\": \"a\"}\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/tokenizer.json"), std::string::npos) << r.err;
  r = run({"tokenize", "--tokenizer", "/nonexistent/tokenizer.json"}, "{\"text\": \"a\"}\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/tokenizer.json"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  // The command is listed in the worker's help.
  r = run({"--help"}, "");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("tokenize --tokenizer PATH [--add-special-tokens]"), std::string::npos);
}

}  // namespace
}  // namespace spillway::testing
