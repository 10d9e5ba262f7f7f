#include "core/status.h"

#include <gtest/gtest.h>

namespace spillway {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("x must be positive, got " + std::to_string(x));
  return x;
}

Result<int> twice(int x) {
  SPW_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

TEST(Status, CarriesCodeAndMessage) {
  Status s = corrupt("bad header").with_context("model.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(s.to_string(), "corrupt: model.safetensors: bad header");
  EXPECT_TRUE(Status().ok());
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*twice(4), 8);
  auto r = twice(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("-1"), std::string::npos);
}

TEST(Status, ErrnoNoSpaceMapsToNoSpace) {
  EXPECT_EQ(errno_status("write x", ENOSPC).code(), ErrorCode::kNoSpace);
  EXPECT_EQ(errno_status("open x", ENOENT).code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace spillway
