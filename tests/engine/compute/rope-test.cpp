// RoPE: a hand-computed rotation, the double-precision reference on odd shapes, the backward as the
// transpose (finite differences), and Llama-3 frequency scaling from its formula.
#include "compute/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "compute-test-util.h"
#include "compute/backend.h"

namespace spillway::compute {
namespace {

using namespace spillway::compute::testing;

std::vector<double> inv_freq_ref(int d, double theta) {
  std::vector<double> inv(d / 2);
  for (int i = 0; i < d / 2; ++i) inv[i] = std::pow(theta, -2.0 * i / d);
  return inv;
}

// x[b, t, h, d] rotated with angles pos·inv[i] (rotate-half).
std::vector<double> rope_ref(const std::vector<double>& x, int batch, int seq, int heads, int d,
                             const std::vector<double>& inv) {
  std::vector<double> y(x.size());
  const int half = d / 2;
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < seq; ++t)
      for (int h = 0; h < heads; ++h) {
        const size_t o = ((static_cast<size_t>(b) * seq + t) * heads + h) * d;
        for (int i = 0; i < half; ++i) {
          const double a = t * inv[i], x1 = x[o + i], x2 = x[o + i + half];
          y[o + i] = x1 * std::cos(a) - x2 * std::sin(a);
          y[o + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
  return y;
}

TEST(Rope, HandComputedValue) {
  // head_dim 4, theta 10000: inv_freq = [1, 0.01]; position 1 rotates pair 0 by 1 rad and pair 1
  // by 0.01 rad; position 0 is the identity.
  std::vector<float> x = {1, 2, 3, 4, 1, 2, 3, 4};  // [1, 2, 1, 4]
  auto be = make_cpu_backend();
  ASSERT_TRUE(be->rope_forward(f32(x.data(), {1, 2, 1, 4}), 10000.0f, RopeScaling{}, 0).ok());
  EXPECT_FLOAT_EQ(x[0], 1.0f);
  EXPECT_FLOAT_EQ(x[1], 2.0f);
  EXPECT_FLOAT_EQ(x[2], 3.0f);
  EXPECT_FLOAT_EQ(x[3], 4.0f);
  EXPECT_NEAR(x[4], 1 * std::cos(1.0) - 3 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[6], 3 * std::cos(1.0) + 1 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[5], 2 * std::cos(0.01) - 4 * std::sin(0.01), 1e-6);
  EXPECT_NEAR(x[7], 4 * std::cos(0.01) + 2 * std::sin(0.01), 1e-6);
}

TEST(Rope, ForwardAndBackwardMatchReference) {
  const int batch = 2, seq = 5, heads = 3, d = 8;
  const float theta = 10000.0f;
  auto x = random_floats(batch * seq * heads * d, 1), dy = random_floats(x.size(), 2);
  const auto inv = inv_freq_ref(d, theta);
  auto be = make_cpu_backend();
  std::vector<float> y = x;
  ASSERT_TRUE(
      be->rope_forward(f32(y.data(), {batch, seq, heads, d}), theta, RopeScaling{}, 0).ok());
  EXPECT_LT(rel_err(y, rope_ref(to_double(x), batch, seq, heads, d, inv)), kDirectTol);

  std::vector<float> dx = dy;
  ASSERT_TRUE(
      be->rope_backward(f32(dx.data(), {batch, seq, heads, d}), theta, RopeScaling{}, 0).ok());
  const auto dyd = to_double(dy);
  auto g = fd_grad(
      [&](const std::vector<double>& v) {
        return dot(dyd, rope_ref(v, batch, seq, heads, d, inv));
      },
      to_double(x));
  EXPECT_LT(rel_err(dx, g), kFdTol);

  // backward(forward(x)) = x: the rotation is orthogonal.
  ASSERT_TRUE(
      be->rope_backward(f32(y.data(), {batch, seq, heads, d}), theta, RopeScaling{}, 0).ok());
  EXPECT_LT(rel_err(y, to_double(x)), kDirectTol);
}

TEST(Rope, TableCacheServesShorterSequences) {
  // A table built for seq 9 is reused for seq 5; the result must equal a fresh computation.
  const int heads = 2, d = 6;
  auto be = make_cpu_backend();
  auto long_x = random_floats(9 * heads * d, 3);
  ASSERT_TRUE(
      be->rope_forward(f32(long_x.data(), {1, 9, heads, d}), 500.0f, RopeScaling{}, 0).ok());
  auto x = random_floats(5 * heads * d, 4);
  std::vector<float> y = x;
  ASSERT_TRUE(be->rope_forward(f32(y.data(), {1, 5, heads, d}), 500.0f, RopeScaling{}, 0).ok());
  EXPECT_LT(rel_err(y, rope_ref(to_double(x), 1, 5, heads, d, inv_freq_ref(d, 500.0))), kDirectTol);
}

// transformers' _compute_llama3_parameters, in double.
std::vector<double> llama3_ref(int d, double theta, const RopeScaling& s) {
  auto inv = inv_freq_ref(d, theta);
  const double old_len = s.original_max_position_embeddings;
  const double low_wl = old_len / s.low_freq_factor, high_wl = old_len / s.high_freq_factor;
  for (auto& f : inv) {
    const double wl = 2 * M_PI / f;
    if (wl > low_wl) {
      f = f / s.factor;
    } else if (wl >= high_wl) {
      const double sm =
          (old_len / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - sm) * f / s.factor + sm * f;
    }
  }
  return inv;
}

TEST(Rope, Llama3ScalingMatchesFormula) {
  const RopeScaling s{.factor = 8.0f,
                      .low_freq_factor = 1.0f,
                      .high_freq_factor = 4.0f,
                      .original_max_position_embeddings = 8192};
  const int d = 128;
  const double theta = 500000.0;
  auto inv = cpu::rope_inv_freq(d, static_cast<float>(theta), s);
  ASSERT_TRUE(inv.ok()) << inv.status().to_string();
  const auto ref = llama3_ref(d, theta, s), plain = inv_freq_ref(d, theta);
  int low = 0, mid = 0, high = 0;  // every regime of the formula is exercised
  for (int i = 0; i < d / 2; ++i) {
    EXPECT_NEAR((*inv)[i] / ref[i], 1.0, 2e-6) << "pair " << i;
    const double ratio = ref[i] / plain[i];
    if (ratio == 1.0)
      ++high;
    else if (std::fabs(ratio - 1.0 / 8) < 1e-12)
      ++low;
    else
      ++mid;
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);

  // Through the op, at positions large enough for the scaling to matter.
  const int seq = 40, heads = 1;
  auto x = random_floats(seq * heads * d, 5);
  std::vector<float> y = x;
  auto be = make_cpu_backend();
  ASSERT_TRUE(
      be->rope_forward(f32(y.data(), {1, seq, heads, d}), static_cast<float>(theta), s, 0).ok());
  EXPECT_LT(rel_err(y, rope_ref(to_double(x), 1, seq, heads, d, ref)), kDirectTol);
}

// x[b, t, h, d] with only dims [0, r) rotating, as pairs (i, i + r/2), cos and sin times `scale`
// (transformers' apply_rotary_pos_emb with a partial rotary dim and LongRoPE's attention factor).
std::vector<double> partial_rope_ref(const std::vector<double>& x, int batch, int seq, int heads,
                                     int d, int r, const std::vector<double>& inv, double scale) {
  std::vector<double> y = x;
  const int half = r / 2;
  for (size_t row = 0; row < static_cast<size_t>(batch) * seq; ++row) {
    const int t = static_cast<int>(row % seq);
    for (int h = 0; h < heads; ++h) {
      const size_t o = (row * heads + h) * d;
      for (int i = 0; i < half; ++i) {
        const double a = t * inv[i], x1 = x[o + i], x2 = x[o + i + half];
        y[o + i] = scale * (x1 * std::cos(a) - x2 * std::sin(a));
        y[o + i + half] = scale * (x2 * std::cos(a) + x1 * std::sin(a));
      }
    }
  }
  return y;
}

// LongRoPE (transformers' _compute_longrope_parameters): inv_freq[i] = 1 / (ext[i] ·
// theta^(2i/r)) over the rotary dim r, cos/sin scaled by the attention factor; with
// partial_rotary_factor 0.75 the last quarter of each head passes through. Forward against the
// formula, backward against finite differences.
TEST(Rope, LongRopeWithPartialRotation) {
  const int batch = 2, seq = 7, heads = 3, d = 16, r = 12;
  const float theta = 10000.0f;
  RopeScaling s;
  s.ext_factors = {1.0f, 1.25f, 2.5f, 4.0f, 9.0f, 30.0f};
  s.attention_factor = 1.1902381f;
  s.rotary_dim = r;
  auto inv = cpu::rope_inv_freq(d, theta, s);
  ASSERT_TRUE(inv.ok()) << inv.status().to_string();
  ASSERT_EQ(inv->size(), size_t(r / 2));
  std::vector<double> ref(r / 2);
  for (int i = 0; i < r / 2; ++i) {
    ref[i] = 1.0 / (s.ext_factors[i] * std::pow(double(theta), 2.0 * i / r));
    EXPECT_NEAR((*inv)[i] / ref[i], 1.0, 2e-6) << "pair " << i;
  }
  auto x = random_floats(batch * seq * heads * d, 6), dy = random_floats(x.size(), 7);
  auto be = make_cpu_backend();
  std::vector<float> y = x;
  ASSERT_TRUE(be->rope_forward(f32(y.data(), {batch, seq, heads, d}), theta, s, 0).ok());
  const auto want = partial_rope_ref(to_double(x), batch, seq, heads, d, r, ref, 1.1902381);
  EXPECT_LT(rel_err(y, want), kDirectTol);
  for (int i = r; i < d; ++i) EXPECT_EQ(y[5 * d + i], x[5 * d + i]) << "dim " << i << " rotated";

  std::vector<float> dx = dy;
  ASSERT_TRUE(be->rope_backward(f32(dx.data(), {batch, seq, heads, d}), theta, s, 0).ok());
  const auto dyd = to_double(dy);
  auto g = fd_grad(
      [&](const std::vector<double>& v) {
        return dot(dyd, partial_rope_ref(v, batch, seq, heads, d, r, ref, 1.1902381));
      },
      to_double(x));
  EXPECT_LT(rel_err(dx, g), kFdTol);
}

TEST(Rope, LongRopeRejectsBadFactors) {
  auto be = make_cpu_backend();
  std::vector<float> x(32);
  RopeScaling s;
  s.ext_factors = {1.0f, 2.0f, 3.0f};  // 4 pairs need 4 factors
  EXPECT_EQ(be->rope_forward(f32(x.data(), {1, 2, 2, 8}), 10000.0f, s, 0).code(),
            ErrorCode::kInvalidArgument);
  s.ext_factors.clear();
  s.rotary_dim = 10;  // more than the head
  EXPECT_EQ(be->rope_forward(f32(x.data(), {1, 2, 2, 8}), 10000.0f, s, 0).code(),
            ErrorCode::kInvalidArgument);
  s.rotary_dim = 5;  // odd
  EXPECT_EQ(be->rope_forward(f32(x.data(), {1, 2, 2, 8}), 10000.0f, s, 0).code(),
            ErrorCode::kInvalidArgument);
}

TEST(Rope, RejectsBadArguments) {
  auto be = make_cpu_backend();
  std::vector<float> x(16);
  EXPECT_EQ(be->rope_forward(f32(x.data(), {1, 2, 1, 7}), 10000.0f, {}, 0).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->rope_forward(f32(x.data(), {1, 2, 1, 8}), 0.0f, {}, 0).code(),
            ErrorCode::kInvalidArgument);
  RopeScaling bad{.factor = 8.0f, .low_freq_factor = 4.0f, .high_freq_factor = 1.0f};
  EXPECT_EQ(be->rope_forward(f32(x.data(), {1, 2, 1, 8}), 10000.0f, bad, 0).code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace spillway::compute
