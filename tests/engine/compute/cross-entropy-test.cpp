// Fused chunked LM head + cross-entropy against a double-precision reference; gradients against
// central finite differences; results independent of the chunk size.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend-test-util.h"
#include "compute-test-util.h"
#include "compute/backend.h"

namespace spillway::compute {
namespace {

using namespace spillway::compute::testing;

// Σ CE over labels != −100 of logits = x·Wᵀ; logits[n, v] and per-token CE[n] (0 where ignored)
// when non-null.
double ce_ref(const std::vector<double>& x, const std::vector<double>& w,
              const std::vector<int32_t>& labels, int n, int d, int v,
              std::vector<double>* logits = nullptr, std::vector<double>* per_token = nullptr) {
  double total = 0.0;
  if (logits) logits->assign(size_t(n) * v, 0.0);
  if (per_token) per_token->assign(n, 0.0);
  for (int i = 0; i < n; ++i) {
    std::vector<double> l(v);
    double m = -INFINITY;
    for (int o = 0; o < v; ++o) {
      double s = 0.0;
      for (int k = 0; k < d; ++k) s += x[i * d + k] * w[o * d + k];
      l[o] = s;
      m = std::max(m, s);
      if (logits) (*logits)[size_t(i) * v + o] = s;
    }
    if (labels[i] == -100) continue;
    double sum = 0.0;
    for (double z : l) sum += std::exp(z - m);
    const double ce = m + std::log(sum) - l[labels[i]];
    if (per_token) (*per_token)[i] = ce;
    total += ce;
  }
  return total;
}

struct Case {
  int n = 7, d = 13, v = 11;
  std::vector<int32_t> labels = {3, -100, 10, 0, -100, 7, 3};
  std::vector<float> x = random_floats(size_t(n) * d, 1, -2.0f, 2.0f);
  std::vector<float> w = random_floats(size_t(v) * d, 2);
};

TEST(LmHeadLoss, LossGradientsAndLogitsMatchReference) {
  Case c;
  const float scale = 1.0f / 5;  // 5 targets
  auto dw0 = random_floats(size_t(c.v) * c.d, 3);
  std::vector<float> dx(size_t(c.n) * c.d, 9.0f), dw = dw0, logits(size_t(c.n) * c.v);
  std::vector<float> losses(c.n, 9.0f);  // overwritten, ignored tokens included
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, lm_head_shapes(c.n, c.d, c.v, 3)));
  ASSERT_OK(be->lm_head_loss(f32(losses.data(), {c.n}), f32(dx.data(), {c.n, c.d}),
                             f32(dw.data(), {c.v, c.d}), f32(c.x.data(), {c.n, c.d}),
                             f32(c.w.data(), {c.v, c.d}), i32(c.labels.data(), {c.n}), scale,
                             f32(logits.data(), {c.n, c.v}), 3, 0));
  const auto xd = to_double(c.x), wd = to_double(c.w);
  std::vector<double> logits_ref, per_token_ref;
  const double ref = ce_ref(xd, wd, c.labels, c.n, c.d, c.v, &logits_ref, &per_token_ref);
  EXPECT_NEAR(sum_losses(losses), ref, 1e-5 * std::fabs(ref));
  EXPECT_LT(rel_err(losses, per_token_ref), kDirectTol);
  for (int i : {1, 4}) EXPECT_EQ(losses[i], 0.0f) << "ignored token " << i;
  EXPECT_LT(rel_err(logits, logits_ref), kDirectTol);
  auto gx = fd_grad(
      [&](const std::vector<double>& x) { return scale * ce_ref(x, wd, c.labels, c.n, c.d, c.v); },
      xd);
  auto gw = fd_grad(
      [&](const std::vector<double>& w) { return scale * ce_ref(xd, w, c.labels, c.n, c.d, c.v); },
      wd);
  EXPECT_LT(rel_err(dx, gx), kFdTol);
  EXPECT_LT(rel_err(minus(dw, dw0), gw), kFdTol);
  // Ignored rows get a zero gradient.
  for (int j = 0; j < c.d; ++j) EXPECT_EQ(dx[1 * c.d + j], 0.0f);
}

TEST(LmHeadLoss, ChunkSizeDoesNotChangeResults) {
  Case c;
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, lm_head_shapes(c.n, c.d, c.v, 100)));
  std::vector<float> dx_ref, dw_ref;
  double loss_ref = 0.0;
  for (int chunk : {100, 1, 2, 3, 7}) {
    std::vector<float> dx(size_t(c.n) * c.d), dw(size_t(c.v) * c.d, 0.0f), losses(c.n);
    ASSERT_OK(be->lm_head_loss(f32(losses.data(), {c.n}), f32(dx.data(), {c.n, c.d}),
                               f32(dw.data(), {c.v, c.d}), f32(c.x.data(), {c.n, c.d}),
                               f32(c.w.data(), {c.v, c.d}), i32(c.labels.data(), {c.n}), 0.25f, {},
                               chunk, 0));
    const double loss = sum_losses(losses);
    if (chunk == 100) {
      dx_ref = dx, dw_ref = dw, loss_ref = loss;
      continue;
    }
    EXPECT_NEAR(loss, loss_ref, 1e-6 * loss_ref) << "chunk " << chunk;
    EXPECT_LT(rel_err(dx, to_double(dx_ref)), kDirectTol) << "chunk " << chunk;
    EXPECT_LT(rel_err(dw, to_double(dw_ref)), kDirectTol) << "chunk " << chunk;
  }
}

TEST(LmHeadLoss, EvalOnlyWritesNoGradients) {
  Case c;
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, lm_head_shapes(c.n, c.d, c.v, 4)));
  std::vector<float> losses(c.n);
  ASSERT_OK(be->lm_head_loss(f32(losses.data(), {c.n}), {}, {}, f32(c.x.data(), {c.n, c.d}),
                             f32(c.w.data(), {c.v, c.d}), i32(c.labels.data(), {c.n}), 0.0f, {}, 4,
                             0));
  const double loss = sum_losses(losses);
  EXPECT_NEAR(loss, ce_ref(to_double(c.x), to_double(c.w), c.labels, c.n, c.d, c.v), 1e-5 * loss);
}

TEST(LmHeadLoss, AllIgnoredChunkGivesZeroGradient) {
  Case c;
  c.labels = {-100, -100, -100, 1, 2, -100, -100};
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, lm_head_shapes(c.n, c.d, c.v, 3)));
  std::vector<float> dx(size_t(c.n) * c.d, 9.0f), dw(size_t(c.v) * c.d, 0.0f), losses(c.n, 9.0f);
  ASSERT_OK(be->lm_head_loss(f32(losses.data(), {c.n}), f32(dx.data(), {c.n, c.d}),
                             f32(dw.data(), {c.v, c.d}), f32(c.x.data(), {c.n, c.d}),
                             f32(c.w.data(), {c.v, c.d}), i32(c.labels.data(), {c.n}), 0.5f, {}, 3,
                             0));
  for (int i : {0, 1, 2, 5, 6}) {
    EXPECT_EQ(losses[i], 0.0f) << i;
    for (int j = 0; j < c.d; ++j) EXPECT_EQ(dx[i * c.d + j], 0.0f) << i;
  }
  const double loss = sum_losses(losses);
  EXPECT_NEAR(loss, ce_ref(to_double(c.x), to_double(c.w), c.labels, c.n, c.d, c.v), 1e-5 * loss);
}

TEST(LmHeadLoss, BadLabelOrChunkIsInvalidArgument) {
  Case c;
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, lm_head_shapes(c.n, c.d, c.v, 4)));
  std::vector<float> losses(c.n, 9.0f);
  c.labels[2] = c.v;
  EXPECT_EQ(
      be->lm_head_loss(f32(losses.data(), {c.n}), {}, {}, f32(c.x.data(), {c.n, c.d}),
                       f32(c.w.data(), {c.v, c.d}), i32(c.labels.data(), {c.n}), 0.0f, {}, 4, 0)
          .code(),
      ErrorCode::kInvalidArgument);
  c.labels[2] = -1;
  EXPECT_EQ(
      be->lm_head_loss(f32(losses.data(), {c.n}), {}, {}, f32(c.x.data(), {c.n, c.d}),
                       f32(c.w.data(), {c.v, c.d}), i32(c.labels.data(), {c.n}), 0.0f, {}, 4, 0)
          .code(),
      ErrorCode::kInvalidArgument);
  c.labels[2] = 1;
  EXPECT_EQ(
      be->lm_head_loss(f32(losses.data(), {c.n}), {}, {}, f32(c.x.data(), {c.n, c.d}),
                       f32(c.w.data(), {c.v, c.d}), i32(c.labels.data(), {c.n}), 0.0f, {}, 0, 0)
          .code(),
      ErrorCode::kInvalidArgument);
  for (float l : losses) EXPECT_EQ(l, 9.0f);  // nothing written
}

}  // namespace
}  // namespace spillway::compute
