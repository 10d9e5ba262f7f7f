#include "tiers/range-allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace spillway {
namespace {

TEST(RangeAllocator, AlignsAndFills) {
  RangeAllocator r(4096 * 4, 4096);
  auto a = r.allocate(1);
  auto b = r.allocate(4097);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 4096u);
  EXPECT_EQ(r.size_of(*b), 8192u);
  EXPECT_EQ(r.used(), 3 * 4096u);
  EXPECT_FALSE(r.allocate(8192));
  EXPECT_TRUE(r.allocate(4096));
  EXPECT_EQ(r.free(), 0u);
}

TEST(RangeAllocator, ReleaseCoalescesInAnyOrder) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    RangeAllocator r(1 << 20, 256);
    std::vector<uint64_t> offs;
    while (auto o = r.allocate(256 * (1 + rng() % 17))) offs.push_back(*o);
    std::shuffle(offs.begin(), offs.end(), rng);
    for (uint64_t o : offs) EXPECT_TRUE(r.release(o));
    EXPECT_TRUE(r.empty());
    EXPECT_EQ(r.largest_free(), 1u << 20);
  }
}

TEST(RangeAllocator, DoubleReleaseIsRefused) {
  RangeAllocator r(4096, 64);
  auto a = r.allocate(64);
  ASSERT_TRUE(a);
  EXPECT_TRUE(r.release(*a));
  EXPECT_FALSE(r.release(*a));
  EXPECT_FALSE(r.release(12345));
}

}  // namespace
}  // namespace spillway
