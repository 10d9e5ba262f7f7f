#include "core/file-util.h"

#include <gtest/gtest.h>

#include "test-data.h"

namespace spillway {
namespace {

TEST(FileUtil, AtomicWriteReplacesAndReadsBack) {
  testing::TempDir dir;
  std::string p = dir.file("a.txt");
  ASSERT_TRUE(write_file_atomic(p, "first").ok());
  ASSERT_TRUE(write_file_atomic(p, "second").ok());
  auto r = read_file(p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "second");
}

TEST(FileUtil, FailedProducerLeavesOldFile) {
  testing::TempDir dir;
  std::string p = dir.file("a.txt");
  ASSERT_TRUE(write_file_atomic(p, "keep me").ok());
  Status st = write_file_atomic_stream(p, [](const auto& write) {
    (void)write("partial", 7);
    return io_error("simulated failure");
  });
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(*read_file(p), "keep me");
}

TEST(FileUtil, MissingFileIsNotFound) {
  auto r = MappedFile::open("/nonexistent/spillway/file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace spillway
