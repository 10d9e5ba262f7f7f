#include "core/json-file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "test-data.h"

namespace spillway {
namespace {

using nlohmann::json;

TEST(JsonFile, SyntaxErrorNamesFileLineColumnAndShowsThePlace) {
  auto r =
      parse_json("{\"name\": \"t\",\n \"model\": {\"path\": \"x\"},\n \"data\": {\"train\": oops}}",
                 "job.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_EQ(
      m.rfind("job.json:3:20: not valid JSON: syntax error while parsing value - invalid literal",
              0),
      0u)
      << m;
  EXPECT_NE(m.find("at \"oops}}\""), std::string::npos) << m;
  EXPECT_NE(m.find("fix the JSON there"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  // The code is the caller's: a file the program wrote itself is corrupt, not bad input.
  EXPECT_EQ(parse_json("{", "state.json", ErrorCode::kCorrupt).status().code(),
            ErrorCode::kCorrupt);
}

TEST(JsonFile, SyntaxErrorNeverEchoesAMegabyteOrARawNewline) {
  // An unterminated string of a megabyte with a control byte in it: nlohmann's own message quotes
  // the whole token it read.
  const std::string text = "{\"a\": \"" + std::string(1 << 20, 'x') + "\n\"}";
  auto r = parse_json(text, "tokenizer.json");
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_LT(m.size(), 600u) << m.substr(0, 600);
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_EQ(m.rfind("tokenizer.json:1:", 0), 0u) << m;
  auto empty = parse_json("", "config.json");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("the file is empty"), std::string::npos)
      << empty.status().message();
  auto cut = parse_json("{\"a\": [1, 2", "config.json");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("at the end of the text (is it cut short?)"),
            std::string::npos)
      << cut.status().message();
}

TEST(JsonFile, DeepNestingIsRefusedBeforeParsing) {
  auto r = parse_json(std::string(100000, '[') + std::string(100000, ']'), "job.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("job.json: JSON nested 100000 levels deep (at most 100)", 0),
            0u)
      << r.status().message();
  EXPECT_TRUE(parse_json(std::string(100, '[') + std::string(100, ']'), "x").ok());
}

TEST(JsonFile, ReadsOnlyRegularFiles) {
  testing::TempDir dir;
  const std::string fifo = dir.path() + "/config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = read_json_file(fifo);  // must not wait for a writer
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is not a regular file"), std::string::npos)
      << r.status().message();
  const std::string good = dir.path() + "/good.json";
  std::ofstream(good) << R"({"a": [1, 2]})";
  auto ok = read_json_file(good);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)["a"][1], 2);
}

TEST(JsonFile, QuotesAreEscapedAndCutShort) {
  EXPECT_EQ(quote_for_message("a\"b\\c\nd\te\x1b"), R"("a\"b\\c\nd\te\u001B")");
  EXPECT_EQ(quote_for_message("caf\xc3\xa9 \xff!"),
            "\"caf\xc3\xa9 \\xFF!\"");  // valid UTF-8 kept, a stray byte escaped
  EXPECT_EQ(quote_for_message(std::string(1000, 'y'), 5), "\"yyyyy\"... (1000 bytes)");
  EXPECT_EQ(quote_name("csv"), "'csv'");
  EXPECT_EQ(quote_name("it's\n"), R"("it's\n")");
  EXPECT_EQ(describe_json(json::parse("[1, 2, 3]")), "[1,2,3]");
  const std::string big = describe_json(json(std::vector<int>(5000, 7)), 10);
  EXPECT_EQ(big, "[7,7,7,7,7... (10001 bytes)");
  EXPECT_EQ(json_kind(json(5.9)), "5.9");
  EXPECT_EQ(json_kind(json("x\ny")), R"(the string "x\ny")");
  EXPECT_EQ(json_kind(json::object()), "an object");
}

TEST(JsonFile, TypedAccessNamesTheFileAndTheKeyPath) {
  const json j = json::parse(
      R"({"layers": 5.9, "big": 1e300, "two": 2.0, "neg": -3, "huge": 18446744073709551615,
                                 "name": "x", "flag": null, "nested": {"list": [1, "two"]}})");
  const JsonField root(j, "config.json");
  auto layers = root["layers"].integer(1, 4096);
  ASSERT_FALSE(layers.ok());
  EXPECT_EQ(layers.status().message(),
            "config.json: layers: expected a whole number from 1 to 4096, got 5.9");
  EXPECT_FALSE(root["big"].integer().ok());
  EXPECT_FALSE(root["huge"].integer().ok());  // past int64: refused, not wrapped
  EXPECT_EQ(*root["two"].integer(), 2);
  EXPECT_FALSE(root["neg"].integer(0).ok());
  EXPECT_EQ(root["neg"].integer(0).status().message(),
            "config.json: neg: expected a whole number of at least 0, got -3");
  EXPECT_EQ(*root["absent"].integer_or(7, 0, 10), 7);
  EXPECT_EQ(*root["flag"].boolean_or(true), true);
  EXPECT_EQ(root["nested"]["list"][1].integer().status().message(),
            R"(config.json: nested.list[1]: expected a whole number, got the string "two")");
  EXPECT_EQ(root["nested"]["absent"]["deeper"].string().status().message(),
            "config.json: nested.absent.deeper: expected a string, but it is missing");
  EXPECT_EQ(root["name"].number().status().message(),
            R"(config.json: name: expected a number, got the string "x")");
  EXPECT_EQ(*root["name"].string(), "x");
  EXPECT_EQ(root["layers"].error("at most 4 layers", "use a smaller model").message(),
            "config.json: layers: expected at most 4 layers, got 5.9; use a smaller model");
}

}  // namespace
}  // namespace spillway
