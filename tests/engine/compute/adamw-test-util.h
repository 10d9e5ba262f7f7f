// AdamW test inputs and comparisons shared by the CPU op test (adamw-op-test.cpp) and the CUDA
// one (tests/gpu/cuda-ops-test.cpp): states with training's magnitudes and fp32's hard cases,
// compute/adamw-step.h's order written out as a reference, and bit-for-bit comparisons that name
// the first element that differs. A file that calls documented_order must be compiled with
// -ffp-contract=off (its CMakeLists.txt says so), or the compiler may fuse its a·b + c.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "compute/adamw-step.h"

namespace spillway::compute::testing {

// The moments and parameters of one tensor before a step, and its gradient.
struct State {
  std::vector<float> p, m, v, g;
};

// 64 random bits, a function of (seed, i) alone (splitmix64's finaliser).
inline uint64_t mix(uint64_t seed, uint64_t i) {
  uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in (-1, 1), never 0, times 2^e for e in [lo, hi].
inline float spread(uint64_t bits, int lo, int hi) {
  const float unit = static_cast<float>((bits >> 40) | 1) * 0x1p-24f;
  const int e = lo + static_cast<int>((bits >> 8) % static_cast<uint64_t>(hi - lo + 1));
  return std::ldexp(bits & 1 ? -unit : unit, e);
}

// A state as training has it: parameters of either sign over 2^-8 .. 2^2, moments of a gradient
// of 2^-12 .. 2^0 (v >= 0). With `hard`, one element in three is a case that tests the edges of
// fp32 instead: a subnormal gradient (moments tiny or subnormal too), everything zero (+0 and −0),
// a huge v (2^89 .. 2^126, no overflow in v·β2 + (1 − β2)·g²), or a large gradient (up to
// 2^56 ≈ 7e16, its square 5e33, still finite) on a large negative parameter (down to −2^29).
inline State make_state(size_t n, uint64_t seed, bool hard) {
  State s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n),
          std::vector<float>(n)};
  const float denorm = std::numeric_limits<float>::denorm_min();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = mix(seed, 4 * i), b = mix(seed, 4 * i + 1), c = mix(seed, 4 * i + 2),
                   d = mix(seed, 4 * i + 3);
    float& p = s.p[i];
    float& m = s.m[i];
    float& v = s.v[i];
    float& g = s.g[i];
    p = spread(a, -8, 2);
    g = spread(b, -12, 0);
    m = 0.1f * spread(c, -12, 0);
    v = std::fabs(0.01f * spread(d, -24, 0));
    if (!hard) continue;
    switch (i % 12) {
      case 1:  // a subnormal gradient, moments that are tiny or subnormal themselves
        g = static_cast<float>(1 + (b >> 45) % 1000) * denorm * (b & 2 ? -1.0f : 1.0f);
        m = static_cast<float>((c >> 50) % 64) * denorm;
        v = i % 24 == 1 ? 0.0f : static_cast<float>((d >> 50) % 64) * denorm;
        break;
      case 4:  // zeros everywhere, of both signs
        p = i % 24 == 4 ? 0.0f : -0.0f;
        m = i % 36 == 4 ? -0.0f : 0.0f;
        v = 0.0f;
        g = i % 48 == 4 ? -0.0f : 0.0f;
        break;
      case 7:  // a huge second moment (past gradients up to ~1e19), any m
        v = std::ldexp(std::fabs(spread(d, 0, 0)), 90 + static_cast<int>((d >> 20) % 37));
        break;
      case 10:  // a large gradient on a large negative parameter
        g = spread(b, 40, 56);
        p = -std::ldexp(std::fabs(spread(a, 0, 0)), 10 + static_cast<int>((a >> 20) % 20));
        break;
      default:
        break;
    }
  }
  return s;
}

// compute/adamw-step.h's operations in its order, one named float per rounding.
inline void documented_order(State& s, float grad_scale, const AdamWCoeffs& k) {
  for (size_t i = 0; i < s.p.size(); ++i) {
    const float g = s.g[i] * grad_scale;
    const float p = s.p[i] * k.decay_mul;
    const float g_minus_m = g - s.m[i];
    const float m_step = g_minus_m * k.one_minus_b1;
    const float m = s.m[i] + m_step;
    const float v_kept = s.v[i] * k.b2;
    const float g_scaled = k.one_minus_b2 * g;
    const float g_sq = g_scaled * g;
    const float v = v_kept + g_sq;
    const float root = std::sqrt(v);
    const float root_corrected = root * k.inv_bc2_sqrt;
    const float denom = root_corrected + k.eps;
    const float numer = k.step_size * m;
    const float update = numer / denom;
    s.p[i] = p - update;
    s.m[i] = m;
    s.v[i] = v;
  }
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The first element where a and b differ in bits, for the failure message.
inline std::string first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      char text[96];
      std::snprintf(text, sizeof(text), "element %zu: %a vs %a", i, a[i], b[i]);
      return text;
    }
  }
  return a.size() == b.size() ? "none" : "the sizes differ";
}

inline void expect_same_state(const State& got, const State& want, const char* what) {
  EXPECT_TRUE(same_bits(got.p, want.p)) << what << ", param: " << first_difference(got.p, want.p);
  EXPECT_TRUE(same_bits(got.m, want.m)) << what << ", m: " << first_difference(got.m, want.m);
  EXPECT_TRUE(same_bits(got.v, want.v)) << what << ", v: " << first_difference(got.v, want.v);
}

}  // namespace spillway::compute::testing
