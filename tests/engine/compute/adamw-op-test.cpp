// Backend::adamw on the CPU backend (compute/cpu/adamw.h through CpuBackend::do_adamw): bit for
// bit the CPU optimizer's update (train/adamw.h, adamw_update_range) and compute/adamw-step.h's
// documented order written out here, on odd sizes, hard values (subnormal gradients, zeros, huge
// second moments, negative parameters), with and without weight decay, clipping and at steps 1
// and 1000; its argument checks; adamw_coeffs against constants computed exactly; and one step
// against torch.optim.AdamW's formula in double within the rounding error of its fp32 operations.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): the documented order below must
// not be fused into a·b + c by the compiler, or it would not be the reference it claims to be.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "adamw-test-util.h"
#include "backend-test-util.h"
#include "compute/adamw-step.h"
#include "compute/backend.h"
#include "compute/cpu/cpu-backend.h"
#include "train/adamw.h"

namespace spillway::compute {
namespace {

using testing::documented_order;
using testing::expect_same_state;
using testing::make_state;
using testing::same_bits;
using testing::State;

// Runs Backend::adamw on `be` over a device copy of `s` viewed as `shape` (numel = s.p.size()),
// and returns the state it leaves.
State backend_step(Backend& be, const State& s, Shape shape, const AdamWCoeffs& k,
                   float grad_scale) {
  const size_t n = s.p.size(), bytes = n * sizeof(float);
  std::vector<float*> dev;
  for (const std::vector<float>* h : {&s.p, &s.m, &s.v, &s.g}) {
    auto p = be.device().device_alloc(std::max<size_t>(bytes, 1));
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (!p.ok()) return {};
    dev.push_back(static_cast<float*>(*p));
    EXPECT_OK(be.device().copy_h2d(dev.back(), h->data(), bytes, 0));
  }
  EXPECT_OK(be.adamw(f32(dev[0], shape), f32(dev[1], shape), f32(dev[2], shape),
                     f32(static_cast<const float*>(dev[3]), shape), k, grad_scale, 0));
  State out{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n), s.g};
  EXPECT_OK(be.device().copy_d2h(out.p.data(), dev[0], bytes, 0));
  EXPECT_OK(be.device().copy_d2h(out.m.data(), dev[1], bytes, 0));
  EXPECT_OK(be.device().copy_d2h(out.v.data(), dev[2], bytes, 0));
  EXPECT_OK(be.device().synchronize_stream(0));
  for (float* p : dev) be.device().device_free(p);
  return out;
}

// The optimizer's update of the same state (train/adamw.h).
State optimizer_step(State s, const AdamWConfig& c, int64_t step, float grad_scale, bool decay) {
  adamw_update_range(s.p.data(), s.m.data(), s.v.data(), s.g.data(), s.p.size(), c, step,
                     grad_scale, decay);
  return s;
}

// The trainer's defaults (train/train-job.h via the job schema) with a learning rate that moves
// the parameters visibly in one step.
constexpr AdamWConfig kConfig{1e-3, 0.9, 0.95, 1e-8, 0.1};

// One Backend::adamw step equals the optimizer's and the documented order, bit for bit: sizes
// around the 64-element tile (1, 63, 64, 65) and a prime past a million (several chunks of the
// pool, a 3-element tail); decay on and off; no clipping and a clip coefficient of 0.37; the first
// step and the thousandth (bias corrections near 1); random and hard values.
TEST(AdamWOp, CpuBackendEqualsTheOptimizerBitForBit) {
  auto be = testing::make_poisoned_cpu_backend();
  for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000003}}) {
    for (bool hard : {false, true}) {
      const State before = make_state(n, n + (hard ? 1000 : 0), hard);
      for (bool decay : {true, false}) {
        for (float grad_scale : {1.0f, 0.37f}) {
          for (int64_t step : {int64_t{1}, int64_t{1000}}) {
            const std::string what = "count " + std::to_string(n) + (hard ? " hard" : "") +
                                     (decay ? " decay" : " no decay") + " grad_scale " +
                                     std::to_string(grad_scale) + " step " + std::to_string(step);
            SCOPED_TRACE(what);
            const AdamWCoeffs k = adamw_coeffs(kConfig, step, decay);
            const State want = optimizer_step(before, kConfig, step, grad_scale, decay);
            const State got = backend_step(*be, before, {static_cast<int64_t>(n)}, k, grad_scale);
            expect_same_state(got, want, "backend vs adamw_update_range");
            State documented = before;
            documented_order(documented, grad_scale, k);
            expect_same_state(want, documented, "adamw_update_range vs the documented order");
            EXPECT_FALSE(same_bits(want.p, before.p)) << "the step changed no parameter";
          }
        }
      }
    }
  }
}

// Any shape of the four tensors' common shape (a block's [out, in] weight, a 3-D piece) gives the
// elements' bits; in strict stream mode the update waits for the stream like every op.
TEST(AdamWOp, AnyShapeAndBothStreamModes) {
  const State before = make_state(6 * 7 * 65, 5, true);
  const AdamWCoeffs k = adamw_coeffs(kConfig, 3, true);
  const State want = optimizer_step(before, kConfig, 3, 0.5f, true);
  for (bool strict : {false, true}) {
    SCOPED_TRACE(strict ? "strict streams" : "synchronous streams");
    CpuBackend be(CpuBackendOptions{.poison_allocations = true, .strict_streams = strict});
    expect_same_state(backend_step(be, before, {6 * 7, 65}, k, 0.5f), want, "[42, 65]");
    expect_same_state(backend_step(be, before, {6, 7, 65}, k, 0.5f), want, "[6, 7, 65]");
  }
  // Strict mode: nothing changes until someone waits for the stream.
  CpuBackend be(CpuBackendOptions{.strict_streams = true});
  const size_t n = before.p.size();
  std::vector<float*> dev;
  for (const std::vector<float>* h : {&before.p, &before.m, &before.v, &before.g}) {
    auto p = be.device().device_alloc(n * sizeof(float));
    ASSERT_TRUE(p.ok());
    dev.push_back(static_cast<float*>(*p));
    std::memcpy(dev.back(), h->data(),
                n * sizeof(float));  // the CPU backend's memory is the host's
  }
  const Shape shape{static_cast<int64_t>(n)};
  ASSERT_OK(be.adamw(f32(dev[0], shape), f32(dev[1], shape), f32(dev[2], shape),
                     f32(static_cast<const float*>(dev[3]), shape), k, 0.5f, 0));
  EXPECT_EQ(std::memcmp(dev[0], before.p.data(), n * sizeof(float)), 0) << "ran before the wait";
  ASSERT_OK(be.device().synchronize_stream(0));
  EXPECT_EQ(std::memcmp(dev[0], want.p.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(dev[2], want.v.data(), n * sizeof(float)), 0);
}

// A zero-element update touches nothing and succeeds.
TEST(AdamWOp, EmptyTensorsDoNothing) {
  auto be = testing::make_poisoned_cpu_backend();
  float word = 1.5f;
  const AdamWCoeffs k = adamw_coeffs(kConfig, 1, true);
  ASSERT_OK(be->adamw(f32(&word, {int64_t{0}}), f32(&word, {int64_t{0}}), f32(&word, {int64_t{0}}),
                      f32(static_cast<const float*>(&word), {int64_t{0}}), k, 1.0f, 0));
  ASSERT_OK(be->device().synchronize_stream(0));
  EXPECT_EQ(word, 1.5f);
}

// A mismatched shape or a wrong dtype is kInvalidArgument naming the op, the tensor and what was
// expected; so is a null tensor, one past its allocation and an unknown stream.
TEST(AdamWOp, ChecksNameTheTensor) {
  auto be = testing::make_poisoned_cpu_backend();
  constexpr int64_t n = 96;
  std::vector<float*> t;
  for (int i = 0; i < 4; ++i) {
    auto p = be->device().device_alloc(n * sizeof(float));
    ASSERT_TRUE(p.ok());
    t.push_back(static_cast<float*>(*p));
    std::fill(t.back(), t.back() + n, 0.25f);
  }
  float *p = t[0], *m = t[1], *v = t[2];
  const float* g = t[3];
  const AdamWCoeffs k = adamw_coeffs(kConfig, 1, true);
  const auto expect_error = [&](const Status& s, const std::vector<std::string>& words) {
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("adamw"), std::string::npos) << s.to_string();
    for (const std::string& w : words)
      EXPECT_NE(s.message().find(w), std::string::npos) << "no '" << w << "' in " << s.to_string();
  };
  expect_error(be->adamw(f32(p, {n - 1}), f32(m, {n}), f32(v, {n}), f32(g, {n}), k, 1, 0),
               {"param is", "[95]", "expected", "[96]"});
  expect_error(be->adamw(f32(p, {n}), f32(m, {n / 2, 2}), f32(v, {n}), f32(g, {n}), k, 1, 0),
               {"m is", "[48, 2]", "[96]"});
  expect_error(be->adamw(f32(p, {n}), f32(m, {n}), f32(v, {n + 1}), f32(g, {n}), k, 1, 0),
               {"v is", "[97]"});
  expect_error(be->adamw(f32(p, {n}), f32(m, {n}), f32(v, {n}), f32(g, {n / 2}), k, 1, 0),
               {"param is", "[96]", "expected", "[48]"});  // grad sets the shape
  expect_error(
      be->adamw(f32(p, {n}), Tensor(m, DType::kBF16, {n}), f32(v, {n}), f32(g, {n}), k, 1, 0),
      {"m is", "BF16", "expected F32"});
  expect_error(
      be->adamw(f32(p, {n}), f32(m, {n}), f32(v, {n}), ConstTensor(g, DType::kBF16, {n}), k, 1, 0),
      {"grad is", "BF16", "expected F32"});
  expect_error(be->adamw(f32(p, {n}), f32(m, {n}), f32(v, {n}),
                         f32(static_cast<const float*>(nullptr), {n}), k, 1, 0),
               {"grad", "null"});
  expect_error(be->adamw(f32(p + 1, {n}), f32(m, {n}), f32(v, {n}), f32(g, {n}), k, 1, 0),
               {"param", "allocation"});
  expect_error(be->adamw(f32(p, {n}), f32(m, {n}), f32(v, {n}), f32(g, {n}), k, 1, 99),
               {"stream 99"});
  ASSERT_OK(be->device().synchronize_stream(0));
  for (float* q : {p, m, v})
    EXPECT_EQ(std::count(q, q + n, 0.25f), n) << "a refused call changed its tensors";
  ASSERT_OK(be->adamw(f32(p, {n}), f32(m, {n}), f32(v, {n}), f32(g, {n}), k, 1, 0));
  ASSERT_OK(be->device().synchronize_stream(0));
  EXPECT_NE(p[0], 0.25f);
  for (float* q : t) be->device().device_free(q);
}

// adamw_coeffs for lr 3e-4, β 0.9/0.95, ε 1e-8, weight decay 0.1 (the config's doubles) at steps
// 1 and 10: each constant is its exact value, computed in rational arithmetic from those doubles
// and rounded once to fp32 (Python's fractions + mpmath at 300 bits), as its double computation
// rounded to fp32 must give here; without decay, decay_mul is 1 exactly.
TEST(AdamWOp, CoefficientsAreTheExactValuesRoundedOnce) {
  const AdamWConfig c{3e-4, 0.9, 0.95, 1e-8, 0.1};
  const AdamWCoeffs k10 = adamw_coeffs(c, 10, true);
  EXPECT_EQ(k10.decay_mul, 0x1.fffc12p-1f);  // 1 − lr·wd = 0.99997
  EXPECT_EQ(k10.one_minus_b1, 0x1.99999ap-4f);
  EXPECT_EQ(k10.b2, 0x1.e66666p-1f);
  EXPECT_EQ(k10.one_minus_b2, 0x1.99999ap-5f);
  EXPECT_EQ(k10.step_size, 0x1.e2f9e8p-12f);    // lr / (1 − 0.9^10)
  EXPECT_EQ(k10.inv_bc2_sqrt, 0x1.94224cp+0f);  // 1 / sqrt(1 − 0.95^10)
  EXPECT_EQ(k10.eps, 0x1.5798eep-27f);
  const AdamWCoeffs k1 = adamw_coeffs(c, 1, false);
  EXPECT_EQ(k1.decay_mul, 1.0f);
  EXPECT_EQ(k1.step_size, 0x1.89374cp-9f);     // lr / 0.1
  EXPECT_EQ(k1.inv_bc2_sqrt, 0x1.1e377ap+2f);  // 1 / sqrt(0.05)
  EXPECT_EQ(k1.one_minus_b1, k10.one_minus_b1);
  // Late in a run the second correction is 1 to fp32's precision.
  EXPECT_EQ(adamw_coeffs(c, 1000, true).inv_bc2_sqrt, 1.0f);
  EXPECT_EQ(adamw_coeffs(c, 1000, true).step_size, 0x1.3a92a4p-12f);
}

// torch.optim.AdamW's step (_single_tensor_adamw) from the same fp32 state, in double with the
// config's exact hyper-parameters, and a bound on how far the fp32 result may lie from it: each
// rounding of the fp32 chain (the constants' included) adds at most u = 2^-24 of the value it
// rounds, or half the smallest subnormal below 2^-126; the bound follows those errors through the
// formula, term by term (so it stays tight where the update cancels the parameter).
struct Reference {
  double p, m, v, p_tol, m_tol, v_tol;
  double largest_term;  // of p: max(|p · (1 − lr·wd)|, |update|)
};

Reference torch_adamw(double p, double m, double v, double grad, double grad_scale,
                      const AdamWConfig& c, int64_t step, bool decay) {
  constexpr double u = 0x1p-24, d = 0x1p-149;
  const double bc1 = 1 - std::pow(c.beta1, double(step)), bc2 = 1 - std::pow(c.beta2, double(step));
  const double g = grad * grad_scale;
  const double p1 = decay ? p * (1 - c.lr * c.weight_decay) : p;
  const double m_step = (g - m) * (1 - c.beta1);
  Reference r;
  r.m = m + m_step;
  r.v = v * c.beta2 + (1 - c.beta2) * g * g;
  const double root = std::sqrt(r.v) / std::sqrt(bc2);
  const double denom = root + c.eps;
  const double update = c.lr / bc1 * r.m / denom;
  r.p = p1 - update;
  r.largest_term = std::max(std::fabs(p1), std::fabs(update));
  // g: 1 rounding; m: g's error through (g − m)·(1 − β1), then 4 roundings of its terms.
  r.m_tol = 6 * u * (std::fabs(m) + std::fabs(g) * (1 - c.beta1) + std::fabs(m_step)) + 4 * d;
  // v: a sum of non-negative terms, 7 roundings (g's counted twice).
  r.v_tol = 8 * u * r.v + 4 * d;
  // sqrt(v) moves by at most v_tol / (2 sqrt v), and never more than sqrt(v_tol); then 4 roundings.
  const double root_tol =
      std::min(r.v > 0 ? r.v_tol / (2 * std::sqrt(r.v)) : INFINITY, std::sqrt(r.v_tol)) /
          std::sqrt(bc2) +
      6 * u * root;
  const double denom_tol = root_tol + 3 * u * denom;
  const double update_tol =
      std::fabs(update) * (4 * u + denom_tol / denom) + c.lr / bc1 * r.m_tol / denom * (1 + 4 * u);
  r.p_tol = 3 * u * std::fabs(p1) + update_tol + u * std::fabs(r.p) + 2 * d;
  return r;
}

// One step on random and hard states, decay on and off, clipped or not, at steps 1, 10 and 1000:
// every parameter and moment within the bound of torch's formula in double. Prints the worst
// error as a fraction of the bound (0.55 measured) and, on the random states, in ulps of the
// parameter's larger term (8.4 measured: where m + (g − m)·(1 − β1) cancels, m's relative error
// reaches ~15 ulp and carries into the update; fp32 can do no better in this order).
TEST(AdamWOp, AgreesWithTorchAdamWInDouble) {
  auto be = testing::make_poisoned_cpu_backend();
  const size_t n = 100003;
  double worst_ratio = 0, worst_ulps = 0;
  for (bool hard : {false, true}) {
    const State before = make_state(n, hard ? 77 : 78, hard);
    for (bool decay : {true, false}) {
      for (float grad_scale : {1.0f, 0.37f}) {
        for (int64_t step : {int64_t{1}, int64_t{10}, int64_t{1000}}) {
          SCOPED_TRACE(std::string(hard ? "hard" : "random") + (decay ? " decay" : "") +
                       " grad_scale " + std::to_string(grad_scale) + " step " +
                       std::to_string(step));
          const State got = backend_step(*be, before, {static_cast<int64_t>(n)},
                                         adamw_coeffs(kConfig, step, decay), grad_scale);
          ASSERT_EQ(got.p.size(), n);
          size_t bad = 0;
          for (size_t i = 0; i < n; ++i) {
            const Reference r = torch_adamw(before.p[i], before.m[i], before.v[i], before.g[i],
                                            grad_scale, kConfig, step, decay);
            const double ep = std::fabs(got.p[i] - r.p), em = std::fabs(got.m[i] - r.m),
                         ev = std::fabs(got.v[i] - r.v);
            if ((ep > r.p_tol || em > r.m_tol || ev > r.v_tol) && ++bad <= 5) {
              ADD_FAILURE() << "element " << i << ": p " << got.p[i] << " vs " << r.p << " (tol "
                            << r.p_tol << "), m " << got.m[i] << " vs " << r.m << " (tol "
                            << r.m_tol << "), v " << got.v[i] << " vs " << r.v << " (tol "
                            << r.v_tol << ")";
            }
            worst_ratio = std::max({worst_ratio, ep / r.p_tol, em / r.m_tol, ev / r.v_tol});
            if (!hard) {
              const double ulp =
                  std::ldexp(1.0, std::ilogb(static_cast<float>(r.largest_term)) - 23);
              worst_ulps = std::max(worst_ulps, ep / ulp);
            }
          }
          EXPECT_EQ(bad, 0u);
        }
      }
    }
  }
  std::printf(
      "fp32 AdamW vs torch's formula in double: worst error %.2f of the bound; on random states "
      "%.2f ulp of the parameter's larger term, max(|p·(1 − lr·wd)|, |update|)\n",
      worst_ratio, worst_ulps);
}

}  // namespace
}  // namespace spillway::compute
