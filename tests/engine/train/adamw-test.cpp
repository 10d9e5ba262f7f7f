#include "train/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/thread-pool.h"
#include "train/lr-schedule.h"

namespace spillway {
namespace {

// Reference: torch's _single_tensor_adamw in double.
void reference(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
               const std::vector<double>& g, double lr, double b1, double b2, double eps, double wd,
               int step, bool decay) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (decay) p[i] *= 1 - lr * wd;
    m[i] += (g[i] - m[i]) * (1 - b1);
    v[i] = v[i] * b2 + (1 - b2) * g[i] * g[i];
    const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
  }
}

TEST(AdamW, MatchesTorchFormulaOnOddSizes) {
  for (size_t n : {1u, 63u, 64u, 65u, 1000u, 16411u}) {
    std::mt19937 rng(n);
    std::normal_distribution<float> dist;
    std::vector<float> p(n), m(n, 0), v(n, 0), g(n);
    std::vector<double> pd(n), md(n, 0), vd(n, 0);
    for (size_t i = 0; i < n; ++i) pd[i] = p[i] = dist(rng);
    AdamWConfig c{1e-2, 0.9, 0.95, 1e-8, 0.1};
    for (int step = 1; step <= 5; ++step) {
      std::vector<double> gd(n);
      for (size_t i = 0; i < n; ++i) gd[i] = g[i] = dist(rng);
      adamw_update_range(p.data(), m.data(), v.data(), g.data(), n, c, step, 1.0f, step % 2 == 1);
      reference(pd, md, vd, gd, 1e-2, 0.9, 0.95, 1e-8, 0.1, step, step % 2 == 1);
    }
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(p[i], pd[i], 1e-5 * (1 + std::abs(pd[i]))) << n << " " << i;
  }
}

// The SIMD body (an AVX2 clone where the CPU has it), the scalar tail and any split over threads
// round alike: the same bits for a whole range on pools of any size as element by element.
TEST(AdamW, SameBitsForAnyThreadCountAndAlignment) {
  const size_t n = 3 * 16384 * 64 + 45;  // several chunks per thread, a tail that is no whole tile
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> p0(n), m0(n), v0(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p0[i] = dist(rng);
    m0[i] = 0.1f * dist(rng);
    v0[i] = 0.01f * std::abs(dist(rng));
    g[i] = dist(rng);
  }
  const AdamWConfig c{3e-3, 0.9, 0.95, 1e-8, 0.1};
  std::vector<float> pe = p0, me = m0, ve = v0;
  for (size_t i = 0; i < n; ++i)
    adamw_update_range(&pe[i], &me[i], &ve[i], &g[i], 1, c, 3, 0.5f, true);
  for (size_t threads : {1u, 2u, 3u, 7u}) {
    ThreadPool pool(threads);
    std::vector<float> p = p0, m = m0, v = v0;
    adamw_update_range(p.data(), m.data(), v.data(), g.data(), n, c, 3, 0.5f, true, &pool);
    ASSERT_EQ(0, std::memcmp(p.data(), pe.data(), n * sizeof(float))) << threads;
    ASSERT_EQ(0, std::memcmp(m.data(), me.data(), n * sizeof(float))) << threads;
    ASSERT_EQ(0, std::memcmp(v.data(), ve.data(), n * sizeof(float))) << threads;
  }
}

// A whole block in one pass: the bits of updating view by view, padding untouched.
TEST(AdamW, BlockEqualsItsViewsOneByOne) {
  BlockLayout block;
  size_t offset = 0;
  for (size_t numel : {100u, 5u, 64u * 1000u + 7u, 0u, 64u * 300u, 3u}) {
    ParamView view;
    view.offset = offset;
    view.numel = numel;
    view.decay = numel % 2 == 1;
    block.params.push_back(view);
    offset += (numel + 15) / 16 * 16 + 16;  // padding after each view
  }
  block.numel = offset;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist;
  std::vector<float> p0(block.numel), m0(block.numel), v0(block.numel), g(block.numel);
  for (size_t i = 0; i < block.numel; ++i) {
    p0[i] = dist(rng);
    m0[i] = 0.1f * dist(rng);
    v0[i] = 0.01f * std::abs(dist(rng));
    g[i] = dist(rng);
  }
  const AdamWConfig c{3e-3, 0.9, 0.95, 1e-8, 0.1};
  std::vector<float> pe = p0, me = m0, ve = v0;
  for (const ParamView& view : block.params) {
    const size_t o = view.offset;
    adamw_update_range(&pe[o], &me[o], &ve[o], &g[o], view.numel, c, 4, 0.7f, view.decay);
  }
  for (size_t threads : {1u, 3u}) {
    ThreadPool pool(threads);
    std::vector<float> p = p0, m = m0, v = v0;
    adamw_update_block(block, p.data(), m.data(), v.data(), g.data(), c, 4, 0.7f, &pool);
    ASSERT_EQ(0, std::memcmp(p.data(), pe.data(), p.size() * sizeof(float))) << threads;
    ASSERT_EQ(0, std::memcmp(m.data(), me.data(), m.size() * sizeof(float))) << threads;
    ASSERT_EQ(0, std::memcmp(v.data(), ve.data(), v.size() * sizeof(float))) << threads;
  }
}

TEST(AdamW, ClipCoefficientIsTorchs) {
  EXPECT_FLOAT_EQ(clip_coefficient(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_FLOAT_EQ(clip_coefficient(10.0, 0.0), 1.0f);
  std::vector<float> x = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(sum_of_squares(x.data(), 2), 25.0);
}

TEST(LrSchedule, WarmupCosineLinear) {
  LrScheduleConfig c{LrSchedule::kCosine, 1.0, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(lr_at(c, 5), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(c, 10), 1.0);
  EXPECT_NEAR(lr_at(c, 60), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(lr_at(c, 110), 0.1, 1e-12);
  c.kind = LrSchedule::kLinear;
  EXPECT_NEAR(lr_at(c, 60), 0.1 + 0.9 * 0.5, 1e-12);
  c.kind = LrSchedule::kConstant;
  EXPECT_DOUBLE_EQ(lr_at(c, 100), 1.0);
  EXPECT_FALSE(parse_lr_schedule("step").ok());
}

}  // namespace
}  // namespace spillway
