#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace spillway {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway, rounds up to even.
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
}

TEST(DType, F16RoundTripsAndHandlesSpecials) {
  for (float x : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, 0.1f}) {
    float back = f16_to_f32(f32_to_f16(x));
    EXPECT_NEAR(back, x, std::abs(x) * 1e-3f + 1e-8f) << x;
  }
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                // rounds to inf
  EXPECT_EQ(f16_to_f32(0x0001), 5.960464477539063e-08f);  // smallest subnormal
  EXPECT_TRUE(std::isinf(f16_to_f32(0xfc00)));
}

TEST(DType, ParsesSafetensorsNames) {
  EXPECT_EQ(parse_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_FALSE(parse_dtype("F8_E4M3").has_value());
}

}  // namespace
}  // namespace spillway
