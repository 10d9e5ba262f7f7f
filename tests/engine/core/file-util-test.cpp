#include "core/file-util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

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

// Only regular files are read: a FIFO named like a config file hung the worker waiting for a
// writer, and a device such as /dev/zero never ends. Both, and a folder, are errors at once.
TEST(FileUtil, ReadsOnlyRegularFiles) {
  testing::TempDir dir;
  const std::string fifo = dir.file("config.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = read_file(fifo);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config.json is not a regular file"), std::string::npos)
      << r.status().message();
  r = read_file("/dev/zero");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos);
  r = read_file(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a folder"), std::string::npos);
  EXPECT_EQ(read_file(dir.file("missing")).status().code(), ErrorCode::kNotFound);
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
