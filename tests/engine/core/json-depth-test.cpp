#include "core/json-depth.h"

#include <gtest/gtest.h>

#include <string>

namespace spillway {
namespace {

TEST(JsonDepth, CountsNestingOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("3"), 0u);
  EXPECT_EQ(json_nesting_depth(R"({"a": 1})"), 1u);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": [[]]}], "c": {}})"), 5u);
  // Brackets inside strings, escaped quotes and escaped backslashes do not count.
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[{{{", "b": "\"[[[", "c": "\\", "d": [1]})"), 2u);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(json_nesting_depth(deep), 100000u);
}

TEST(JsonDepth, RefusesPathologicalNesting) {
  EXPECT_TRUE(
      check_json_depth(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']'), "x")
          .ok());
  const Status st = check_json_depth(std::string(5000, '{'), "job.json");
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "job.json: JSON nested 5000 levels deep (at most 100)");
}

}  // namespace
}  // namespace spillway
