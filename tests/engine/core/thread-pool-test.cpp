#include "core/thread-pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <vector>

namespace spillway {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (size_t n : {1u, 3u, 4u, 17u, 1000u}) {
    std::vector<int> hits(n, 0);
    pool.parallel_for(n, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
    });
    EXPECT_EQ(std::accumulate(hits.begin(), hits.end(), 0), static_cast<int>(n));
    for (int h : hits) EXPECT_EQ(h, 1);
  }
}

TEST(ThreadPool, ManyCallsInARow) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  for (int k = 0; k < 200; ++k) {
    pool.parallel_for(100, [&](size_t b, size_t e) { sum += static_cast<long>(e - b); });
  }
  EXPECT_EQ(sum.load(), 20000);
}

}  // namespace
}  // namespace spillway
