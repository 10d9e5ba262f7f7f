#include "tiers/host-pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace spillway {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Counts allocator calls, so tests can see that regions share slabs.
struct CountingAllocator {
  int allocs = 0, frees = 0;
  size_t live = 0;
  HostAllocator make() {
    HostAllocator base = HostAllocator::aligned();
    HostAllocator a;
    a.name = "test allocator";
    a.alloc = [this, base](size_t n) -> Result<void*> {
      ++allocs;
      live += n;
      return base.alloc(n);
    };
    a.free = [this, base](void* p, size_t n) {
      ++frees;
      live -= n;
      base.free(p, n);
    };
    return a;
  }
};

TEST(HostPool, RegionsShareSlabsAndAreCountedByCategory) {
  TierCounters counters;
  CountingAllocator ca;
  {
    HostPool pool({.slab_bytes = 4 * kMiB}, ca.make(), &counters);
    std::vector<HostRegion> regions;
    for (int i = 0; i < 6; ++i) {
      auto r =
          pool.allocate(kMiB / 2 + 1, i % 2 ? Category::kMaster : Category::kOptimizer, "layer");
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data()) % 4096, 0u);
      std::memset(r->data(), i, r->size());
      regions.push_back(std::move(*r));
    }
    const int64_t each = kMiB / 2 + 4096;
    EXPECT_EQ(ca.allocs, 1);  // six regions, one pinned slab
    EXPECT_EQ(counters.held(Tier::kDram, Category::kMaster), 3 * each);
    EXPECT_EQ(counters.held(Tier::kDram, Category::kOptimizer), 3 * each);
    EXPECT_EQ(pool.used_bytes(Category::kMaster), size_t(3 * each));
    // A region bigger than a slab gets its own slab.
    auto big = pool.allocate(9 * kMiB, Category::kWeights);
    ASSERT_TRUE(big.ok());
    EXPECT_EQ(ca.allocs, 2);
    EXPECT_EQ(pool.slab_count(), 2u);
    regions.clear();
    big->reset();
    EXPECT_EQ(counters.held(Tier::kDram, Category::kMaster), 0);
    EXPECT_EQ(counters.held(Tier::kDram, Category::kWeights), 0);
    EXPECT_EQ(pool.used_bytes(), 0u);
    // Empty slabs stay until trim().
    EXPECT_EQ(ca.frees, 0);
    EXPECT_EQ(pool.trim(), 13 * kMiB);
    EXPECT_EQ(ca.frees, 2);
    auto again = pool.allocate(100, Category::kWorkspace);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(pool.slab_count(), 1u);
  }
  EXPECT_EQ(ca.live, 0u);
}

TEST(HostPool, MovedRegionReleasesOnce) {
  TierCounters counters;
  HostPool pool({.slab_bytes = kMiB}, HostAllocator::aligned(), &counters);
  auto r = pool.allocate(1000, Category::kGradients);
  ASSERT_TRUE(r.ok());
  HostRegion a = std::move(*r);
  HostRegion b;
  b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(counters.held(Tier::kDram, Category::kGradients), 4096);
  b.reset();
  b.reset();
  EXPECT_EQ(counters.held(Tier::kDram, Category::kGradients), 0);
}

TEST(HostPool, CapGivesClearOutOfMemory) {
  TierCounters counters;
  HostPool pool({.slab_bytes = 4 * kMiB, .dram_cap_bytes = 6 * kMiB}, HostAllocator::aligned(),
                &counters);
  EXPECT_EQ(counters.capacity(Tier::kDram), 6 * kMiB);
  auto a = pool.allocate(3 * kMiB, Category::kMaster, "layer 0 master");
  ASSERT_TRUE(a.ok());
  // The second slab is cut to what the cap still allows.
  auto b = pool.allocate(2 * kMiB, Category::kOptimizer, "layer 0 adam");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(pool.slab_bytes_total(), 6 * kMiB);
  auto c = pool.allocate(2 * kMiB, Category::kOptimizer, "layer 1 adam");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kOutOfMemory);
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("2.00 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("optimizer 'layer 1 adam'"), std::string::npos) << m;
  EXPECT_NE(m.find("dram_cap_bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("6.00 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("SSD tier"), std::string::npos) << m;
  // The failed request counted nothing.
  EXPECT_EQ(counters.held(Tier::kDram, Category::kOptimizer), int64_t(2 * kMiB));
  // Freeing makes room again.
  a->reset();
  EXPECT_TRUE(pool.allocate(2 * kMiB, Category::kOptimizer).ok());
}

TEST(HostPool, EmptySlabsAreFreedWhenTheCapWouldRefuse) {
  HostPool pool({.slab_bytes = 4 * kMiB, .dram_cap_bytes = 6 * kMiB});
  auto small = pool.allocate(kMiB, Category::kWorkspace);
  ASSERT_TRUE(small.ok());
  small->reset();
  // 4 MiB empty slab + 5 MiB would pass the cap: the empty slab goes first.
  auto big = pool.allocate(5 * kMiB, Category::kWeights);
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  EXPECT_EQ(pool.slab_bytes_total(), 5 * kMiB);
}

TEST(HostPool, AllocatorFailureIsReported) {
  HostAllocator refusing;
  refusing.name = "cudaHostAlloc";
  refusing.alloc = [](size_t) -> Result<void*> {
    return out_of_memory("cudaErrorMemoryAllocation");
  };
  refusing.free = [](void*, size_t) {};
  HostPool pool({}, refusing);
  auto r = pool.allocate(10, Category::kWeights, "embed");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(r.status().message().find("cudaHostAlloc"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("cudaErrorMemoryAllocation"), std::string::npos);
}

}  // namespace
}  // namespace spillway
