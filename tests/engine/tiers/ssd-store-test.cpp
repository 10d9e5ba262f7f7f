#include "tiers/ssd-store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "core/log.h"
#include "test-data.h"
#include "tiers/fault-env.h"

namespace spillway {
namespace {

using testing::TempDir;

constexpr size_t kKiB = 1024;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::string group_name(int t, int g) {
  std::string name = "t";
  name += std::to_string(t);
  name += 'g';
  name += std::to_string(g);
  return name;
}

// A folder on the repository's filesystem rather than /tmp (which may be tmpfs elsewhere):
// $SPILLWAY_SSD_TEST_DIR, else /work/tmp-ssd-test where /work exists, else ./tmp-ssd-test (ctest
// runs in the build tree). Each process uses its own subfolder; the parent goes when it is empty.
class RepoDir {
 public:
  RepoDir() {
    const char* env = std::getenv("SPILLWAY_SSD_TEST_DIR");
    parent_ = env && *env                              ? env
              : std::filesystem::is_directory("/work") ? "/work/tmp-ssd-test"
                                                       : "tmp-ssd-test";
    path_ = parent_ + "/" + std::to_string(::getpid());
    std::error_code ec;
    std::filesystem::create_directories(path_, ec);
    ok_ = !ec;
  }
  ~RepoDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::remove(parent_, ec);  // only succeeds when empty
  }
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }

 private:
  std::string parent_, path_;
  bool ok_ = false;
};

std::unique_ptr<SsdStore> open_store(const std::string& folder, TierCounters* counters = nullptr,
                                     StorageEnv* env = StorageEnv::posix(),
                                     size_t block = 64 * kKiB, unsigned depth = 8) {
  SsdConfig c;
  c.folder = folder;
  c.block_bytes = block;
  c.queue_depth = depth;
  auto s = SsdStore::open(c, counters, env);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

// Writes random data of odd sizes into many groups, reads them back whole and in random pieces
// (through aligned and unaligned buffers), then reopens the folder with a new store.
void round_trip(const std::string& folder) {
  TierCounters counters;
  const std::vector<size_t> sizes = {
      1, 4095,      4096, 4097, 64 * kKiB, 64 * kKiB + 1, 3 * 64 * kKiB + 17, 1000 * kKiB + 123,
      7, 250 * kKiB};
  std::vector<std::vector<uint8_t>> data;
  {
    auto store = open_store(folder, &counters);
    ASSERT_TRUE(store);
    EXPECT_TRUE(store->direct_io());
    std::vector<SsdRequestId> ids;
    int64_t held = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string g = "group-" + std::to_string(i);
      ASSERT_TRUE(store->create_group(g, sizes[i], Category::kOptimizer).ok());
      held += static_cast<int64_t>((sizes[i] + 64 * kKiB - 1) / (64 * kKiB) * 64 * kKiB);
      data.push_back(random_bytes(sizes[i], 100 + i));
      auto id = store->write_async(g, 0, data[i].data(), sizes[i]);
      ASSERT_TRUE(id.ok()) << id.status().to_string();
      ids.push_back(*id);
    }
    EXPECT_EQ(counters.held(Tier::kSsd, Category::kOptimizer), held);
    for (auto id : ids) ASSERT_TRUE(store->wait(id).ok());

    // Whole reads into an aligned buffer (zero-copy where a piece is a whole block).
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto buf = AlignedBuffer::allocate(sizes[i] + 1, 4096);
      ASSERT_TRUE(buf.ok());
      auto id = store->read_async("group-" + std::to_string(i), 0, buf->data(), sizes[i]);
      ASSERT_TRUE(id.ok());
      ASSERT_TRUE(store->wait(*id).ok());
      EXPECT_EQ(std::memcmp(buf->data(), data[i].data(), sizes[i]), 0) << "group " << i;
    }
    // Random pieces: partial writes (read-modify-write) and unaligned reads.
    std::mt19937 rng(5);
    for (int k = 0; k < 60; ++k) {
      const size_t i = rng() % sizes.size();
      const size_t off = rng() % sizes[i];
      const size_t len = 1 + rng() % (sizes[i] - off);
      const std::string g = "group-" + std::to_string(i);
      if (k % 3 == 0) {
        auto patch = random_bytes(len, 1000 + k);
        ASSERT_TRUE(store->wait(*store->write_async(g, off, patch.data(), len)).ok());
        std::memcpy(data[i].data() + off, patch.data(), len);
      }
      std::vector<uint8_t> out(len + 1);
      ASSERT_TRUE(store->wait(*store->read_async(g, off, out.data() + 1, len)).ok());
      EXPECT_EQ(std::memcmp(out.data() + 1, data[i].data() + off, len), 0)
          << g << " off " << off << " len " << len;
    }
    EXPECT_GT(counters.moved(Link::kSsdWrite), 0u);
    EXPECT_GT(counters.moved(Link::kSsdRead), 0u);
    ASSERT_TRUE(store->flush().ok());
  }
  EXPECT_EQ(counters.held(Tier::kSsd, Category::kOptimizer), 0);
  // A fresh store over the same folder sees the same bytes and checksums.
  auto store = open_store(folder, &counters);
  ASSERT_TRUE(store);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string g = "group-" + std::to_string(i);
    ASSERT_TRUE(store->open_group(g, Category::kMaster).ok());
    EXPECT_EQ(*store->group_bytes(g), sizes[i]);
    std::vector<uint8_t> out(sizes[i]);
    ASSERT_TRUE(store->wait(*store->read_async(g, 0, out.data(), sizes[i])).ok());
    EXPECT_EQ(out, data[i]);
  }
  EXPECT_GT(counters.held(Tier::kSsd, Category::kMaster), 0);
}

TEST(SsdStore, RoundTripInTmp) {
  TempDir dir;
  round_trip(dir.path() + "/ssd");
}

TEST(SsdStore, RoundTripOnRepoFilesystem) {
  RepoDir dir;
  if (!dir.ok()) GTEST_SKIP() << "cannot create " << dir.path();
  round_trip(dir.path());
}

TEST(SsdStore, DetectsByteFlippedOnDisk) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  const size_t n = 5 * 64 * kKiB;
  auto data = random_bytes(n, 9);
  ASSERT_TRUE(store->create_group("layer.3.master", n, Category::kMaster).ok());
  ASSERT_TRUE(store->wait(*store->write_async("layer.3.master", 0, data.data(), n)).ok());
  ASSERT_TRUE(store->flush().ok());

  // Flip one byte in block 2 behind the store's back.
  const std::string path = store->group_path("layer.3.master");
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const off_t at = 2 * 64 * kKiB + 777;
  uint8_t b = static_cast<uint8_t>(data[at] ^ 0x01);
  ASSERT_EQ(::pwrite(fd, &b, 1, at), 1);
  ::close(fd);

  std::vector<uint8_t> out(n);
  Status s = store->wait(*store->read_async("layer.3.master", 0, out.data(), n));
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt);
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("block 2 "), std::string::npos) << s.message();
  // The other blocks still read fine.
  EXPECT_TRUE(store->wait(*store->read_async("layer.3.master", 0, out.data(), 2 * 64 * kKiB)).ok());
  // Reopening does not launder the damage.
  store.reset();
  store = open_store(dir.path());
  ASSERT_TRUE(store->open_group("layer.3.master", Category::kMaster).ok());
  s = store->wait(*store->read_async("layer.3.master", 2 * 64 * kKiB + 5, out.data(), 10));
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt) << s.to_string();
}

TEST(SsdStore, PreallocationBeyondFreeSpaceSaysHowMuch) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  Status s = store->create_group("huge", uint64_t{1} << 50, Category::kOptimizer);  // 1 PiB
  EXPECT_EQ(s.code(), ErrorCode::kNoSpace);
  EXPECT_NE(s.message().find("'huge'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(dir.path()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("needs 1.00 PiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("free"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(store->group_path("huge")));
  EXPECT_FALSE(store->has_group("huge"));
}

TEST(SsdStore, FallocateEnospcSaysHowMuch) {
  TempDir dir;
  FaultInjectingEnv env;
  env.set_plan({.enospc_on_create = true});
  auto store = open_store(dir.path(), nullptr, &env);
  ASSERT_TRUE(store);
  Status s = store->create_group("g", 10 * kKiB * kKiB, Category::kMaster);
  EXPECT_EQ(s.code(), ErrorCode::kNoSpace);
  EXPECT_NE(s.message().find("needs 10.0 MiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("free"), std::string::npos) << s.message();
}

// One group written with a fault planned; returns the status of the write.
Status write_with_fault(const FaultPlan& plan, Status* read_status = nullptr) {
  TempDir dir;
  FaultInjectingEnv env;
  auto store = open_store(dir.path(), nullptr, &env);
  if (!store) return internal_error("no store");
  const size_t n = 4 * 64 * kKiB;
  auto data = random_bytes(n, 3);
  Status s = store->create_group("g", n, Category::kMaster);
  if (!s.ok()) return s;
  if (plan.flip_byte_on_read >= 0) {
    s = store->wait(*store->write_async("g", 0, data.data(), n));
    if (!s.ok()) return s;
  }
  env.set_plan(plan);
  if (plan.flip_byte_on_read < 0) s = store->wait(*store->write_async("g", 0, data.data(), n));
  std::vector<uint8_t> out(n);
  Status r = store->wait(*store->read_async("g", 0, out.data(), n));
  if (read_status) *read_status = r;
  return s;
}

TEST(SsdStoreFaults, EioOnNthOp) {
  Status read;
  Status s = write_with_fault({.eio_on_op = 2}, &read);
  EXPECT_EQ(s.code(), ErrorCode::kIo);
  EXPECT_NE(s.message().find("write of block 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s.message();
  // The failed block is remembered: reading it says so instead of returning stale bytes.
  EXPECT_EQ(read.code(), ErrorCode::kIo);
  EXPECT_NE(read.message().find("incomplete write"), std::string::npos) << read.message();
}

TEST(SsdStoreFaults, ShortWrite) {
  Status s = write_with_fault({.short_write_on_write = 1});
  EXPECT_EQ(s.code(), ErrorCode::kIo);
  EXPECT_NE(s.message().find("short write: 32768 of 65536 bytes"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("block 1 "), std::string::npos) << s.message();
}

TEST(SsdStoreFaults, EnospcOnWrite) {
  Status s = write_with_fault({.enospc_from_write = 3});
  EXPECT_EQ(s.code(), ErrorCode::kNoSpace);
  EXPECT_NE(s.message().find("is full"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("block 3 "), std::string::npos) << s.message();
}

TEST(SsdStoreFaults, FlippedByteOnRead) {
  Status read;
  Status s = write_with_fault({.flip_byte_on_read = 1}, &read);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(read.code(), ErrorCode::kCorrupt);
  EXPECT_NE(read.message().find("checksum mismatch in block"), std::string::npos) << read.message();
  EXPECT_NE(read.message().find("g.blk"), std::string::npos) << read.message();
}

TEST(SsdStoreFaults, EioOnRead) {
  Status read;
  Status s = write_with_fault({.eio_on_op = 5}, &read);  // 4 writes, then the second read
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(read.code(), ErrorCode::kIo);
  EXPECT_NE(read.message().find("read of block"), std::string::npos) << read.message();
}

TEST(SsdStoreFaults, BufferedFallbackWhenDirectIoRefused) {
  TempDir dir;
  FaultInjectingEnv env;
  env.set_plan({.refuse_direct_io = true});
  std::vector<std::string> warnings;
  set_log_sink([&](LogLevel level, const std::string& m) {
    if (level == LogLevel::kWarn) warnings.push_back(m);
  });
  auto store = open_store(dir.path(), nullptr, &env);
  ASSERT_TRUE(store);
  const size_t n = 100 * kKiB + 3;
  auto data = random_bytes(n, 4);
  ASSERT_TRUE(store->create_group("a", n, Category::kWeights).ok());
  ASSERT_TRUE(store->create_group("b", n, Category::kWeights).ok());
  set_log_sink(nullptr);
  EXPECT_FALSE(store->direct_io());
  ASSERT_EQ(warnings.size(), 1u);  // once per store, not per file
  EXPECT_NE(warnings[0].find("refuses O_DIRECT"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(dir.path()), std::string::npos) << warnings[0];
  // Buffered I/O reads back, including through unaligned buffers.
  std::vector<uint8_t> out(n + 1);
  ASSERT_TRUE(store->wait(*store->write_async("a", 0, data.data(), n)).ok());
  ASSERT_TRUE(store->wait(*store->read_async("a", 0, out.data() + 1, n)).ok());
  EXPECT_EQ(std::memcmp(out.data() + 1, data.data(), n), 0);
}

TEST(SsdStore, ConcurrentRequestsWithDeepQueue) {
  TempDir dir;
  TierCounters counters;
  auto store = open_store(dir.path(), &counters, StorageEnv::posix(), 16 * kKiB, 16);
  ASSERT_TRUE(store);
  constexpr int kThreads = 4, kGroups = 3;
  const size_t n = 300 * kKiB + 11;
  for (int t = 0; t < kThreads; ++t) {
    for (int g = 0; g < kGroups; ++g) {
      ASSERT_TRUE(store->create_group(group_name(t, g), n, Category::kMaster).ok());
    }
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        std::vector<std::vector<uint8_t>> data;
        std::vector<SsdRequestId> ids;
        // Many writes outstanding at once, then reads issued before waiting for the writes: ops on
        // the same block run in order, so each read sees its write.
        for (int g = 0; g < kGroups; ++g)
          data.push_back(random_bytes(n, 1000 * t + 10 * round + g));
        for (int g = 0; g < kGroups; ++g) {
          ids.push_back(*store->write_async(group_name(t, g), 0, data[g].data(), n));
        }
        std::vector<std::vector<uint8_t>> out(kGroups, std::vector<uint8_t>(n));
        std::vector<SsdRequestId> reads;
        for (int g = 0; g < kGroups; ++g) {
          reads.push_back(*store->read_async(group_name(t, g), 0, out[g].data(), n));
        }
        for (auto id : ids) failures += !store->wait(id).ok();
        for (auto id : reads) failures += !store->wait(id).ok();
        for (int g = 0; g < kGroups; ++g) failures += out[g] != data[g];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const uint64_t blocks = (n + 16 * kKiB - 1) / (16 * kKiB);
  EXPECT_EQ(counters.moved(Link::kSsdWrite), kThreads * kGroups * 3 * blocks * 16 * kKiB);
  EXPECT_EQ(counters.moved(Link::kSsdRead), kThreads * kGroups * 3 * blocks * 16 * kKiB);
  EXPECT_TRUE(store->wait_all().ok());
}

TEST(SsdStore, OverlappingPartialWritesLandInOrder) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  const size_t n = 64 * kKiB * 2;
  ASSERT_TRUE(store->create_group("g", n, Category::kWorkspace).ok());
  std::vector<uint8_t> expect(n, 0);
  std::vector<std::vector<uint8_t>> patches;
  std::mt19937 rng(11);
  for (int k = 0; k < 50; ++k) {
    size_t off = rng() % n, len = 1 + rng() % std::min<size_t>(n - off, 3000);
    patches.push_back(random_bytes(len, k));
    ASSERT_TRUE(store->write_async("g", off, patches.back().data(), len).ok());
    std::memcpy(expect.data() + off, patches.back().data(), len);
  }
  ASSERT_TRUE(store->wait_all().ok());
  std::vector<uint8_t> out(n);
  ASSERT_TRUE(store->wait(*store->read_async("g", 0, out.data(), n)).ok());
  EXPECT_EQ(out, expect);
}

TEST(SsdStore, RefusesBadRequests) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->create_group("g", 1000, Category::kMaster).ok());
  char buf[2000];
  EXPECT_EQ(store->read_async("g", 500, buf, 501).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->read_async("nope", 0, buf, 1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->create_group("../evil", 10, Category::kMaster).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->create_group("g", 10, Category::kMaster).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->wait(12345).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->open_group("missing", Category::kMaster).code(), ErrorCode::kNotFound);
  auto zero = store->read_async("g", 1000, buf, 0);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(store->wait(*zero).ok());
  // Removing deletes both files.
  const std::string path = store->group_path("g");
  ASSERT_TRUE(store->remove_group("g").ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  SsdConfig bad;
  bad.folder = dir.path();
  bad.block_bytes = 5000;
  EXPECT_EQ(SsdStore::open(bad).status().code(), ErrorCode::kInvalidArgument);
}

TEST(SsdStore, ReopenWithOtherBlockSizeIsRefused) {
  TempDir dir;
  {
    auto store = open_store(dir.path());
    ASSERT_TRUE(store->create_group("g", 100000, Category::kMaster).ok());
  }
  auto store = open_store(dir.path(), nullptr, StorageEnv::posix(), 128 * kKiB);
  Status s = store->open_group("g", Category::kMaster);
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt);
  EXPECT_NE(s.message().find("block_bytes 65536"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace spillway
