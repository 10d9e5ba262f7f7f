// The sum of squares (cpu/reduce.h, Backend::sum_squares on the CPU): against an extended-precision
// sum and a plain double sum at sizes around every edge of its split (8 lanes, 2^16-element
// segments, the 256-segment cap), bit for bit against the order reduce.h documents (which has no
// threads in it, so the result cannot depend on the pool), and as a backend op on both stream
// modes.
#include "compute/cpu/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend-test-util.h"
#include "compute-test-util.h"
#include "compute/backend.h"
#include "compute/cpu/cpu-backend.h"

namespace spillway::compute {
namespace {

using namespace spillway::compute::testing;

constexpr size_t kSegment = size_t{1} << 16;

// The sizes: empty, within one lane group, around the group of 8, around a segment, several
// segments with a ragged end, and past the 256-segment cap (segments longer than 2^16).
// clang-format off
constexpr size_t kSizes[] = {0, 1, 3, 7, 8, 9, 15, 17,
                             kSegment - 1, kSegment, kSegment + 1, 5 * kSegment + 13,
                             256 * kSegment + 7};
// clang-format on

// reduce.h's order, written out serially.
double documented_order(const float* x, size_t count) {
  if (count == 0) return 0.0;
  const size_t segments =
      std::min<size_t>(std::max<size_t>((count + kSegment - 1) / kSegment, 1), 256);
  double total = 0.0;
  for (size_t s = 0; s < segments; ++s) {
    const size_t lo = count * s / segments, hi = count * (s + 1) / segments;
    double lane[8] = {};
    for (size_t i = lo; i < hi; ++i) lane[(i - lo) % 8] += double(x[i]) * double(x[i]);
    total +=
        ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  }
  return total;
}

// Values spread over many binades, so that the squares' exponents differ and rounding matters.
std::vector<float> spread_floats(size_t n, uint32_t seed) {
  std::vector<float> x = random_floats(n, seed);
  for (size_t i = 0; i < n; ++i)
    x[i] = std::ldexp(x[i], static_cast<int>(i * 2654435761u % 17) - 8);
  return x;
}

TEST(SumSquares, MatchesExtendedPrecisionAndPlainSums) {
  for (size_t n : kSizes) {
    SCOPED_TRACE("count " + std::to_string(n));
    const std::vector<float> x = spread_floats(n, static_cast<uint32_t>(n) + 1);
    long double exact = 0;  // 64-bit significand: exact to ~1e-19 relative here
    double plain = 0;
    for (float v : x) {
      exact += static_cast<long double>(v) * v;
      plain += double(v) * v;
    }
    const double got = cpu::sum_squares(x.data(), n);
    if (n == 0) {
      EXPECT_EQ(got, 0.0);
      continue;
    }
    // Within a few 1e-16 of the exact sum (2e-15 at 2^24 elements) ...
    EXPECT_LT(std::abs(static_cast<long double>(got) - exact) / exact, 4e-15L);
    // ... and within the error bound of a plain serial double sum, n·2^-53 (that sum drifts to
    // 3e-12 at 2^24 elements: the short chains here are the more accurate).
    EXPECT_LE(std::abs(got - plain) / plain, static_cast<double>(n) * std::ldexp(1.0, -53));
  }
}

TEST(SumSquares, FollowsTheDocumentedOrderBitForBit) {
  for (size_t n : kSizes) {
    SCOPED_TRACE("count " + std::to_string(n));
    const std::vector<float> x = spread_floats(n, static_cast<uint32_t>(n) + 7);
    const double got = cpu::sum_squares(x.data(), n);
    EXPECT_EQ(got, documented_order(x.data(), n));
    EXPECT_EQ(got, cpu::sum_squares(x.data(), n));  // and again
  }
}

// Squares are exact in double, so the extremes of float do not overflow or vanish.
TEST(SumSquares, ExtremeFloats) {
  const float big = std::numeric_limits<float>::max(),
              tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> x = {big, -big, tiny, -tiny};
  EXPECT_EQ(cpu::sum_squares(x.data(), 2), 2.0 * double(big) * double(big));
  EXPECT_EQ(cpu::sum_squares(x.data() + 2, 2), 2.0 * double(tiny) * double(tiny));
  const std::vector<float> nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  EXPECT_TRUE(std::isnan(cpu::sum_squares(nan.data(), nan.size())));
}

// The op writes the same bits as the routine, on device memory, in both stream modes; in strict
// mode only once someone waits; count 0 writes 0.
TEST(SumSquares, BackendOpOnBothStreamModes) {
  const size_t n = 3 * kSegment + 5;
  const std::vector<float> x = spread_floats(n, 11);
  const double want = cpu::sum_squares(x.data(), n);
  for (bool strict : {false, true}) {
    SCOPED_TRACE(strict ? "strict streams" : "synchronous streams");
    CpuBackend be(CpuBackendOptions{.poison_allocations = true, .strict_streams = strict});
    auto dx = be.device().device_alloc(n * sizeof(float));
    auto dout = be.device().device_alloc(2 * sizeof(double));
    ASSERT_TRUE(dx.ok() && dout.ok());
    auto* out = static_cast<double*>(*dout);
    ASSERT_OK(be.device().copy_h2d(*dx, x.data(), n * sizeof(float), 0));
    ASSERT_OK(
        be.sum_squares(out, f32(static_cast<const float*>(*dx), {static_cast<int64_t>(n)}), 0));
    ASSERT_OK(
        be.sum_squares(out + 1, f32(static_cast<const float*>(*dx), {static_cast<int64_t>(0)}), 0));
    double host[2] = {-1.0, -1.0};
    ASSERT_OK(be.device().copy_d2h(host, out, sizeof(host), 0));
    if (strict) {
      EXPECT_EQ(host[0], -1.0);  // nothing ran yet
    }
    ASSERT_OK(be.device().synchronize_stream(0));
    EXPECT_EQ(host[0], want);
    EXPECT_EQ(host[1], 0.0);
  }
}

TEST(SumSquares, BackendOpChecksItsArguments) {
  CpuBackend be;
  auto dx = be.device().device_alloc(16 * sizeof(float));
  auto dout = be.device().device_alloc(sizeof(double));
  ASSERT_TRUE(dx.ok() && dout.ok());
  const auto* x = static_cast<const float*>(*dx);
  auto* out = static_cast<double*>(*dout);
  EXPECT_EQ(be.sum_squares(nullptr, f32(x, {static_cast<int64_t>(16)}), 0).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      be.sum_squares(out, f32(static_cast<const float*>(nullptr), {static_cast<int64_t>(16)}), 0)
          .code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(be.sum_squares(out, f32(x, {static_cast<int64_t>(17)}), 0).code(),
            ErrorCode::kInvalidArgument);  // past x's allocation
  EXPECT_EQ(be.sum_squares(out, f32(x, {static_cast<int64_t>(16)}), 99).code(),
            ErrorCode::kInvalidArgument);  // no such stream
  EXPECT_OK(be.sum_squares(out, f32(x, {static_cast<int64_t>(16)}), 0));
}

}  // namespace
}  // namespace spillway::compute
