#include "train/adamw.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "train/lr-schedule.h"

namespace spillway {
namespace {

// Reference: torch's _single_tensor_adamw in double.
void reference(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v, const std::vector<double>& g,
               double lr, double b1, double b2, double eps, double wd, int step, bool decay) {
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
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(p[i], pd[i], 1e-5 * (1 + std::abs(pd[i]))) << n << " " << i;
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
