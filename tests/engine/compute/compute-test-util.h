// Helpers for the compute op tests: random inputs, float/double conversion, relative error and
// central finite differences of double-precision references.
#pragma once

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace spillway::compute::testing {

// Float32 op against a double reference computed directly, and against finite differences.
inline constexpr double kDirectTol = 1e-5;
inline constexpr double kFdTol = 1e-3;

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = dist(rng);
    while (std::fabs(x) < 1e-3f);  // non-zero inputs: a dropped term cannot hide
  }
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// ‖a − b‖ / ‖b‖ (‖a − b‖ when b is all zero).
inline double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] - b[i];
  return r;
}

// ∂L/∂x by central differences of a double-precision scalar function.
inline std::vector<double> fd_grad(const std::function<double(const std::vector<double>&)>& loss,
                                   std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss(x);
    x[i] = x0 - h;
    const double lm = loss(x);
    x[i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace spillway::compute::testing
