#include "tiers/device-arena.h"

#include <gtest/gtest.h>

namespace spillway {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(DeviceArena, SlotsAreCarvedAndCounted) {
  TierCounters counters;
  int allocs = 0;
  DeviceAllocator a = DeviceAllocator::host_memory();
  auto inner = a.alloc;
  a.alloc = [&](size_t n) {
    ++allocs;
    return inner(n);
  };
  {
    auto arena = DeviceArena::create(64 * kMiB, a, &counters);
    ASSERT_TRUE(arena.ok()) << arena.status().to_string();
    DeviceArena& ar = **arena;
    EXPECT_EQ(counters.capacity(Tier::kHbm), 64 * kMiB);
    void* w0 = *ar.reserve("weights.0", 20 * kMiB, Category::kWeights);
    void* w1 = *ar.reserve("weights.1", 20 * kMiB, Category::kWeights);
    auto g = ar.reserve("grads", 10 * kMiB + 1, Category::kGradients);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(allocs, 1);
    EXPECT_EQ(static_cast<char*>(w1) - static_cast<char*>(w0), std::ptrdiff_t(20 * kMiB));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*g) % 256, 0u);
    EXPECT_EQ(counters.held(Tier::kHbm, Category::kWeights), int64_t(40 * kMiB));
    EXPECT_EQ(counters.held(Tier::kHbm, Category::kGradients), int64_t(10 * kMiB + 256));
    EXPECT_EQ(ar.find("weights.1"), w1);
    EXPECT_EQ(ar.find("nope"), nullptr);
    EXPECT_EQ(ar.slots().size(), 3u);
    // Duplicate names are refused.
    auto dup = ar.reserve("weights.0", 1, Category::kWeights);
    EXPECT_EQ(dup.status().code(), ErrorCode::kInvalidArgument);
    ASSERT_TRUE(ar.release("weights.0").ok());
    EXPECT_EQ(ar.release("weights.0").code(), ErrorCode::kNotFound);
    EXPECT_EQ(counters.held(Tier::kHbm, Category::kWeights), int64_t(20 * kMiB));
    // The freed slot is reused.
    EXPECT_EQ(*ar.reserve("weights.2", 20 * kMiB, Category::kWeights), w0);
  }
  // Destruction uncounts what was still held.
  EXPECT_EQ(counters.held(Tier::kHbm, Category::kWeights), 0);
  EXPECT_EQ(counters.held(Tier::kHbm, Category::kGradients), 0);
}

TEST(DeviceArena, OutOfMemoryNamesSlotAndCapacity) {
  TierCounters counters;
  auto arena = DeviceArena::create(32 * kMiB, DeviceAllocator::host_memory(), &counters);
  ASSERT_TRUE(arena.ok());
  ASSERT_TRUE((*arena)->reserve("weights.0", 12 * kMiB, Category::kWeights).ok());
  ASSERT_TRUE((*arena)->reserve("weights.1", 12 * kMiB, Category::kWeights).ok());
  auto r = (*arena)->reserve("checkpoint.layer7", 12 * kMiB, Category::kCheckpoints);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfMemory);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("'checkpoint.layer7'"), std::string::npos) << m;
  EXPECT_NE(m.find("checkpoints, 12.0 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("8.00 MiB free of 32.0 MiB capacity"), std::string::npos) << m;
  EXPECT_NE(m.find("weights 24.0 MiB in 2 slot(s)"), std::string::npos) << m;
  EXPECT_EQ(counters.held(Tier::kHbm, Category::kCheckpoints), 0);
}

TEST(DeviceArena, DeviceRefusalIsReported) {
  DeviceAllocator a;
  a.name = "cudaMalloc";
  a.alloc = [](size_t) -> Result<void*> {
    return out_of_memory("out of memory (cudaErrorMemoryAllocation)");
  };
  a.free = [](void*) {};
  auto arena = DeviceArena::create(80ull << 30, a);
  ASSERT_FALSE(arena.ok());
  EXPECT_EQ(arena.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(arena.status().message().find("cudaMalloc could not provide 80.0 GiB"),
            std::string::npos)
      << arena.status().message();
}

}  // namespace
}  // namespace spillway
