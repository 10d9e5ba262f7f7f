#include "telemetry/sampler.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace spillway {
namespace {

TEST(Sampler, ParsesMeminfo) {
  MemInfo m = parse_meminfo(
      "MemTotal:       16303436 kB\nMemFree:          283096 kB\nMemAvailable:    9000000 kB\n");
  ASSERT_TRUE(m.total_bytes.has_value());
  EXPECT_EQ(*m.total_bytes, 16303436ull * 1024);
  ASSERT_TRUE(m.available_bytes.has_value());
  EXPECT_EQ(*m.available_bytes, 9000000ull * 1024);
}

TEST(Sampler, MissingMeminfoFieldsAreAbsent) {
  // Old kernels (< 3.14) have no MemAvailable: absent, not zero.
  MemInfo m = parse_meminfo("MemTotal: 100 kB\n");
  EXPECT_TRUE(m.total_bytes.has_value());
  EXPECT_FALSE(m.available_bytes.has_value());
  MemInfo none = read_meminfo("/nonexistent/meminfo");
  EXPECT_FALSE(none.total_bytes.has_value());
  EXPECT_FALSE(none.available_bytes.has_value());
}

TEST(Sampler, ReadsProcMeminfo) {
  if (!std::filesystem::exists("/proc/meminfo")) GTEST_SKIP() << "no /proc/meminfo";
  MemInfo m = read_meminfo();
  ASSERT_TRUE(m.total_bytes.has_value());
  ASSERT_TRUE(m.available_bytes.has_value());
  EXPECT_GT(*m.total_bytes, 0u);
  EXPECT_LE(*m.available_bytes, *m.total_bytes);
}

TEST(Sampler, StatvfsOfTmp) {
  FsSpace s = read_fs_space("/tmp");
  ASSERT_TRUE(s.total_bytes.has_value());
  ASSERT_TRUE(s.free_bytes.has_value());
  EXPECT_GT(*s.total_bytes, 0u);
  EXPECT_LE(*s.free_bytes, *s.total_bytes);
  FsSpace missing = read_fs_space("/nonexistent/spillway/path");
  EXPECT_FALSE(missing.total_bytes.has_value());
  EXPECT_FALSE(missing.free_bytes.has_value());
}

TEST(Sampler, ProcessRss) {
  auto rss = read_process_rss_bytes();
  if (!std::filesystem::exists("/proc/self/statm")) GTEST_SKIP() << "no /proc";
  ASSERT_TRUE(rss.has_value());
  EXPECT_GT(*rss, 1u << 20);  // a gtest binary is well above 1 MiB resident
}

TEST(Sampler, ParsesDiskstats) {
  const char* text =
      " 259       0 nvme0n1 1000 0 2000 10 500 0 4000 20 0 0 0 0 0 0 0 0 0\n"
      " 259       1 nvme0n1p1 10 0 20 1 5 0 40 2 0 0 0 0 0 0 0 0 0\n";
  auto d = parse_diskstats(text, "nvme0n1");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->read_bytes, 2000u * 512);
  EXPECT_EQ(d->written_bytes, 4000u * 512);
  auto p = parse_diskstats(text, "nvme0n1p1");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->read_bytes, 20u * 512);
  EXPECT_FALSE(parse_diskstats(text, "sda").has_value());
  EXPECT_FALSE(parse_diskstats(text, "nvme0n").has_value());
}

TEST(Sampler, DiskStatsForTmpResolvesOrIsAbsent) {
  DiskStatsReader r = DiskStatsReader::for_path("/tmp");
  if (!r.resolved()) {
    EXPECT_FALSE(r.read().has_value());
    GTEST_SKIP() << "/tmp is not on a block device here (tmpfs or overlay)";
  }
  auto io = r.read();
  ASSERT_TRUE(io.has_value()) << r.device();
  EXPECT_FALSE(r.device().empty());
}

TEST(Sampler, TmpfsHasNoBlockDevice) {
  if (!std::filesystem::exists("/proc/self")) GTEST_SKIP();
  DiskStatsReader r = DiskStatsReader::for_path("/proc/self");
  EXPECT_FALSE(r.resolved());
  EXPECT_FALSE(r.read().has_value());
}

}  // namespace
}  // namespace spillway
