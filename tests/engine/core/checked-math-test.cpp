#include "core/checked-math.h"

#include <gtest/gtest.h>

namespace spillway {
namespace {

TEST(CheckedMath, ProductsSaturateInsteadOfWrapping) {
  uint64_t p = 0;
  EXPECT_TRUE(checked_mul(uint64_t{1} << 32, (uint64_t{1} << 32) - 1, &p));
  EXPECT_EQ(p, (uint64_t{1} << 32) * ((uint64_t{1} << 32) - 1));
  EXPECT_FALSE(checked_mul(uint64_t{1} << 32, uint64_t{1} << 32, &p));
  EXPECT_EQ(mul_saturated({6, 7}), 42u);
  EXPECT_EQ(mul_saturated({}), 1u);
  // The planner's checkpoint bytes of a 4096-layer model, 2^16 micro-batches of 2^24 tokens, hidden
  // 2^17, fp32: 2^75, which wrapped to 0.
  EXPECT_EQ(mul_saturated({4098, uint64_t{1} << 16, uint64_t{1} << 24, uint64_t{1} << 17, 4}),
            kSaturatedCount);
  EXPECT_EQ(mul_saturated({uint64_t{1} << 31, uint64_t{1} << 31}), kSaturatedCount);  // 2^62 itself
  EXPECT_EQ(mul_saturated({uint64_t{1} << 31, (uint64_t{1} << 31) + 1}), kSaturatedCount);
  EXPECT_EQ(mul_saturated({0, uint64_t{1} << 63, uint64_t{1} << 63}), 0u);
  // Saturated counts add up without wrapping.
  EXPECT_GT(3 * kSaturatedCount, kSaturatedCount);
}

}  // namespace
}  // namespace spillway
