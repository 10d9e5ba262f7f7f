#include "telemetry/counters.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace spillway {
namespace {

TEST(Counters, NamesRoundTrip) {
  EXPECT_STREQ(category_name(Category::kOptimizer), "optimizer");
  EXPECT_STREQ(tier_name(Tier::kDram), "dram");
  EXPECT_STREQ(link_name(Link::kSsdWrite), "ssd_write");
  for (Category c : kAllCategories) EXPECT_EQ(category_from_name(category_name(c)), c);
  for (Tier t : kAllTiers) EXPECT_EQ(tier_from_name(tier_name(t)), t);
  for (Link l : kAllLinks) EXPECT_EQ(link_from_name(link_name(l)), l);
  EXPECT_FALSE(category_from_name("nope").has_value());
}

TEST(Counters, SnapshotArithmetic) {
  TierCounters c;
  c.add(Tier::kHbm, Category::kWeights, 1000);
  c.add(Tier::kHbm, Category::kWeights, 500);
  c.sub(Tier::kHbm, Category::kWeights, 300);
  c.add(Tier::kHbm, Category::kGradients, 64);
  c.set(Tier::kDram, Category::kMaster, 4096);
  c.set(Tier::kDram, Category::kMaster, 2048);
  c.set_capacity(Tier::kHbm, 1 << 20);
  c.add_moved(Link::kH2D, 100);
  c.add_moved(Link::kH2D, 23);

  CounterSnapshot a = c.snapshot();
  EXPECT_EQ(a.held(Tier::kHbm, Category::kWeights), 1200);
  EXPECT_EQ(a.tier_total(Tier::kHbm), 1264);
  EXPECT_EQ(a.tier_total(Tier::kDram), 2048);
  EXPECT_EQ(a.tier_total(Tier::kSsd), 0);
  EXPECT_EQ(a.capacity(Tier::kHbm), 1u << 20);
  EXPECT_EQ(a.moved(Link::kH2D), 123u);

  c.add_moved(Link::kH2D, 77);
  c.add_moved(Link::kSsdRead, 5);
  CounterSnapshot b = c.snapshot();
  auto d = b.moved_since(a);
  EXPECT_EQ(d[static_cast<size_t>(Link::kH2D)], 77u);
  EXPECT_EQ(d[static_cast<size_t>(Link::kSsdRead)], 5u);
  EXPECT_EQ(d[static_cast<size_t>(Link::kD2H)], 0u);
  // After a reset the delta clamps at zero instead of wrapping.
  c.reset();
  auto z = c.snapshot().moved_since(b);
  EXPECT_EQ(z[static_cast<size_t>(Link::kH2D)], 0u);
  EXPECT_EQ(c.snapshot().held(Tier::kHbm, Category::kWeights), 0);
}

TEST(Counters, UnbalancedSubGoesNegative) {
  TierCounters c;
  c.sub(Tier::kSsd, Category::kOptimizer, 10);
  EXPECT_EQ(c.snapshot().held(Tier::kSsd, Category::kOptimizer), -10);
}

TEST(Counters, ConcurrentAddsAreExact) {
  TierCounters c;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&c] {
      for (int k = 0; k < 10000; ++k) {
        c.add(Tier::kDram, Category::kWorkspace, 3);
        c.sub(Tier::kDram, Category::kWorkspace, 1);
        c.add_moved(Link::kD2H, 2);
      }
    });
  }
  for (auto& t : threads) t.join();
  auto s = c.snapshot();
  EXPECT_EQ(s.held(Tier::kDram, Category::kWorkspace), 4 * 10000 * 2);
  EXPECT_EQ(s.moved(Link::kD2H), 4u * 10000 * 2);
}

}  // namespace
}  // namespace spillway
