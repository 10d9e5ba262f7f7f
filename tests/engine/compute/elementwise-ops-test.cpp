// RMSNorm, SwiGLU, embedding and the residual add against double-precision references; backward
// passes against central finite differences of those references; dtype conversion against
// core/dtype.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend-test-util.h"
#include "compute-test-util.h"
#include "compute/backend.h"
#include "compute/cpu/cpu-backend.h"
#include "core/dtype.h"

namespace spillway::compute {
namespace {

using namespace spillway::compute::testing;

// ---- RMSNorm ---------------------------------------------------------------------------------

std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w, int n,
                                int d, double eps, std::vector<double>* rstd = nullptr) {
  std::vector<double> y(x.size());
  if (rstd) rstd->resize(n);
  for (int i = 0; i < n; ++i) {
    double ss = 0.0;
    for (int j = 0; j < d; ++j) ss += x[i * d + j] * x[i * d + j];
    const double r = 1.0 / std::sqrt(ss / d + eps);
    if (rstd) (*rstd)[i] = r;
    for (int j = 0; j < d; ++j) y[i * d + j] = x[i * d + j] * r * w[j];
  }
  return y;
}

TEST(RmsNorm, ForwardMatchesReference) {
  const int n = 7, d = 13;
  const float eps = 1e-5f;
  auto x = random_floats(n * d, 1), w = random_floats(d, 2);
  std::vector<float> y(n * d), rstd(n);
  auto be = make_cpu_backend();
  ASSERT_TRUE(be->rmsnorm_forward(f32(y.data(), {n, d}), f32(rstd.data(), {n}),
                                  f32(x.data(), {n, d}), f32(w.data(), {d}), eps, 0)
                  .ok());
  std::vector<double> rstd_ref;
  auto y_ref = rmsnorm_ref(to_double(x), to_double(w), n, d, eps, &rstd_ref);
  EXPECT_LT(rel_err(y, y_ref), kDirectTol);
  EXPECT_LT(rel_err(rstd, rstd_ref), kDirectTol);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  const int n = 7, d = 13;
  const float eps = 1e-5f;
  auto x = random_floats(n * d, 3), w = random_floats(d, 4), dy = random_floats(n * d, 5);
  auto dw0 = random_floats(d, 6);  // dw accumulates onto what is there
  auto dx0 = random_floats(n * d, 7);
  auto be = make_cpu_backend();
  std::vector<float> y(n * d), rstd(n), dx(n * d), dw = dw0;
  ASSERT_TRUE(be->rmsnorm_forward(f32(y.data(), {n, d}), f32(rstd.data(), {n}),
                                  f32(x.data(), {n, d}), f32(w.data(), {d}), eps, 0)
                  .ok());
  ASSERT_TRUE(be->rmsnorm_backward(f32(dx.data(), {n, d}), f32(dw.data(), {d}),
                                   f32(dy.data(), {n, d}), f32(x.data(), {n, d}),
                                   f32(w.data(), {d}), f32(rstd.data(), {n}), false, 0)
                  .ok());
  const auto xd = to_double(x), wd = to_double(w), dyd = to_double(dy);
  auto gx = fd_grad(
      [&](const std::vector<double>& xx) { return dot(dyd, rmsnorm_ref(xx, wd, n, d, eps)); }, xd);
  auto gw = fd_grad(
      [&](const std::vector<double>& ww) { return dot(dyd, rmsnorm_ref(xd, ww, n, d, eps)); }, wd);
  EXPECT_LT(rel_err(dx, gx), kFdTol);
  EXPECT_LT(rel_err(minus(dw, dw0), gw), kFdTol);

  // accumulate_dx adds onto dx; a null dw is skipped.
  std::vector<float> dx_acc = dx0;
  ASSERT_TRUE(be->rmsnorm_backward(f32(dx_acc.data(), {n, d}), Tensor(nullptr, DType::kF32, {d}),
                                   f32(dy.data(), {n, d}), f32(x.data(), {n, d}),
                                   f32(w.data(), {d}), f32(rstd.data(), {n}), true, 0)
                  .ok());
  EXPECT_LT(rel_err(minus(dx_acc, dx0), to_double(dx)), kDirectTol);
}

// The weight gradient is summed in tiles of columns: a width of several tiles and a partial one.
TEST(RmsNorm, WeightGradientOverManyColumns) {
  const int n = 21, d = 150;
  auto x = random_floats(n * d, 30), w = random_floats(d, 31), dy = random_floats(n * d, 32);
  auto be = make_cpu_backend();
  std::vector<float> y(n * d), rstd(n), dw(d, 0.0f);
  ASSERT_OK(be->rmsnorm_forward(f32(y.data(), {n, d}), f32(rstd.data(), {n}), f32(x.data(), {n, d}),
                                f32(w.data(), {d}), 1e-5f, 0));
  ASSERT_OK(be->rmsnorm_backward(Tensor(nullptr, DType::kF32, {n, d}), f32(dw.data(), {d}),
                                 f32(dy.data(), {n, d}), f32(x.data(), {n, d}), f32(w.data(), {d}),
                                 f32(rstd.data(), {n}), false, 0));
  std::vector<double> ref(d, 0.0);  // dw[j] = Σ_i dy·x·rstd
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) ref[j] += double(dy[i * d + j]) * x[i * d + j] * rstd[i];
  EXPECT_LT(rel_err(dw, ref), kDirectTol);
}

TEST(RmsNorm, RejectsBadShapes) {
  auto be = make_cpu_backend();
  float x = 1.0f, w = 1.0f, y, r;
  EXPECT_EQ(
      be->rmsnorm_forward(f32(&y, {1, 0}), f32(&r, {1}), f32(&x, {1, 0}), f32(&w, {0}), 1e-5f, 0)
          .code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      be->rmsnorm_forward(f32(&y, {-1, 1}), f32(&r, {-1}), f32(&x, {-1, 1}), f32(&w, {1}), 1e-5f, 0)
          .code(),
      ErrorCode::kInvalidArgument);
}

// The fused residual + norm is bit for bit the residual add followed by the norm, also in place.
TEST(RmsNorm, ResidualFusedEqualsAddThenNorm) {
  const int n = 9, d = 37;
  const float eps = 1e-6f;
  auto x = random_floats(n * d, 40), r = random_floats(n * d, 41), w = random_floats(d, 42);
  auto be = make_cpu_backend();
  std::vector<float> sum_ref = x, y_ref(n * d), rstd_ref(n);
  ASSERT_OK(be->add_inplace(f32(sum_ref.data(), {static_cast<int64_t>(sum_ref.size())}),
                            f32(r.data(), {static_cast<int64_t>(sum_ref.size())}), 0));
  ASSERT_OK(be->rmsnorm_forward(f32(y_ref.data(), {n, d}), f32(rstd_ref.data(), {n}),
                                f32(sum_ref.data(), {n, d}), f32(w.data(), {d}), eps, 0));

  std::vector<float> sum(n * d), y(n * d), rstd(n);
  ASSERT_OK(be->residual_rmsnorm_forward(f32(sum.data(), {n, d}), f32(y.data(), {n, d}),
                                         f32(rstd.data(), {n}), f32(x.data(), {n, d}),
                                         f32(r.data(), {n, d}), f32(w.data(), {d}), eps, 0));
  EXPECT_EQ(sum, sum_ref);
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(rstd, rstd_ref);

  std::vector<float> x_inplace = x, y2(n * d), rstd2(n);  // sum aliases x
  ASSERT_OK(be->residual_rmsnorm_forward(f32(x_inplace.data(), {n, d}), f32(y2.data(), {n, d}),
                                         f32(rstd2.data(), {n}), f32(x_inplace.data(), {n, d}),
                                         f32(r.data(), {n, d}), f32(w.data(), {d}), eps, 0));
  EXPECT_EQ(x_inplace, sum_ref);
  EXPECT_EQ(y2, y_ref);
  EXPECT_EQ(rstd2, rstd_ref);
  float one = 1.0f;
  EXPECT_EQ(be->residual_rmsnorm_forward(f32(&one, {1, 0}), f32(&one, {1, 0}),
                                         Tensor(nullptr, DType::kF32, {1}), f32(&one, {1, 0}),
                                         f32(&one, {1, 0}), f32(&one, {0}), eps, 0)
                .code(),
            ErrorCode::kInvalidArgument);
}

// ---- SwiGLU ----------------------------------------------------------------------------------

std::vector<double> swiglu_ref(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> y(g.size());
  for (size_t i = 0; i < g.size(); ++i) y[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return y;
}

TEST(SwiGlu, ForwardAndBackward) {
  const int n = 7, f = 13;
  auto g = random_floats(n * f, 10, -4.0f, 4.0f), u = random_floats(n * f, 11),
       dy = random_floats(n * f, 12);
  auto be = make_cpu_backend();
  std::vector<float> y(n * f), dg(n * f), du(n * f);
  ASSERT_TRUE(
      be->swiglu_forward(f32(y.data(), {n, f}), f32(g.data(), {n, f}), f32(u.data(), {n, f}), 0)
          .ok());
  const auto gd = to_double(g), ud = to_double(u), dyd = to_double(dy);
  EXPECT_LT(rel_err(y, swiglu_ref(gd, ud)), kDirectTol);
  ASSERT_TRUE(be->swiglu_backward(f32(dg.data(), {n, f}), f32(du.data(), {n, f}),
                                  f32(dy.data(), {n, f}), f32(g.data(), {n, f}),
                                  f32(u.data(), {n, f}), 0)
                  .ok());
  auto gg = fd_grad([&](const std::vector<double>& x) { return dot(dyd, swiglu_ref(x, ud)); }, gd);
  auto gu = fd_grad([&](const std::vector<double>& x) { return dot(dyd, swiglu_ref(gd, x)); }, ud);
  EXPECT_LT(rel_err(dg, gg), kFdTol);
  EXPECT_LT(rel_err(du, gu), kFdTol);
}

// ---- Embedding --------------------------------------------------------------------------------

TEST(Embedding, ForwardGathersAndBackwardSumsRepeatedIds) {
  const int vocab = 10, d = 13, n = 7;
  const std::vector<int32_t> ids = {3, 0, 9, 3, 5, 3, 9};
  auto table = random_floats(vocab * d, 20), dy = random_floats(n * d, 21);
  auto be = make_cpu_backend();
  std::vector<float> out(n * d);
  ASSERT_TRUE(be->embedding_forward(f32(out.data(), {n, d}), i32(ids.data(), {n}),
                                    f32(table.data(), {vocab, d}), 0)
                  .ok());
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) ASSERT_EQ(out[i * d + j], table[ids[i] * d + j]);
  }
  auto dtable0 = random_floats(vocab * d, 22);
  std::vector<float> dtable = dtable0;
  ASSERT_TRUE(be->embedding_backward(f32(dtable.data(), {vocab, d}), i32(ids.data(), {n}),
                                     f32(dy.data(), {n, d}), 0)
                  .ok());
  std::vector<double> ref(dtable0.begin(), dtable0.end());
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) ref[ids[i] * d + j] += dy[i * d + j];
  }
  EXPECT_LT(rel_err(dtable, ref), kDirectTol);
}

TEST(Embedding, BadIdsAreInvalidArgument) {
  const int vocab = 10, d = 13;
  auto be = make_cpu_backend();
  auto table = be->device().device_alloc(vocab * d * sizeof(float));
  ASSERT_TRUE(table.ok());
  std::vector<float> out(2 * d);
  const std::vector<int32_t> negative = {1, -1}, too_big = {1, 10}, last = {9, 0};
  EXPECT_EQ(be->embedding_forward(f32(out.data(), {2, d}), i32(negative.data(), {2}),
                                  ConstTensor(*table, DType::kF32, {vocab, d}), 0)
                .code(),
            ErrorCode::kInvalidArgument);
  // The table lives in a device allocation of `vocab` rows, so the backend bounds the ids.
  auto st = be->embedding_forward(f32(out.data(), {2, d}), i32(too_big.data(), {2}),
                                  ConstTensor(*table, DType::kF32, {vocab, d}), 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("[0, 10)"), std::string::npos) << st.message();
  EXPECT_TRUE(be->embedding_forward(f32(out.data(), {2, d}), i32(last.data(), {2}),
                                    ConstTensor(*table, DType::kF32, {vocab, d}), 0)
                  .ok());
  EXPECT_EQ(be->embedding_backward(Tensor(*table, DType::kF32, {vocab, d}),
                                   i32(too_big.data(), {2}), f32(out.data(), {2, d}), 0)
                .code(),
            ErrorCode::kInvalidArgument);
}

// ---- add --------------------------------------------------------------------------------------

TEST(AddInplace, AddsElementwise) {
  const size_t count = 100003;  // long enough to run on several threads
  auto y = random_floats(count, 30), x = random_floats(count, 31);
  auto y0 = y;
  auto be = make_cpu_backend();
  ASSERT_TRUE(be->add_inplace(f32(y.data(), {static_cast<int64_t>(count)}),
                              f32(x.data(), {static_cast<int64_t>(count)}), 0)
                  .ok());
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(y[i], y0[i] + x[i]);
}

// ---- convert ----------------------------------------------------------------------------------

TEST(Convert, Float32AndBfloat16RoundTrip) {
  const size_t count = 100003;  // several threads' worth
  auto f = random_floats(count, 50, -3.0f, 3.0f);
  f[0] = 1.0f + 1.0f / 256;                        // a tie: rounds to the even 1.0
  f[1] = 1.0f + 3.0f / 256;                        // a tie: rounds up to the even 1 + 2/128
  f[2] = std::numeric_limits<float>::quiet_NaN();  // stays NaN
  f[3] = std::numeric_limits<float>::infinity();
  auto be = make_cpu_backend();
  std::vector<uint16_t> bf(count);
  ASSERT_OK(be->device().convert(bf.data(), DType::kBF16, f.data(), DType::kF32, count, 0));
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(bf[i], f32_to_bf16(f[i])) << i;
  EXPECT_EQ(bf16_to_f32(bf[0]), 1.0f);
  EXPECT_EQ(bf16_to_f32(bf[1]), 1.0f + 2.0f / 128);

  std::vector<float> back(count);
  ASSERT_OK(be->device().convert(back.data(), DType::kF32, bf.data(), DType::kBF16, count, 0));
  for (size_t i = 3; i < count; ++i) ASSERT_EQ(back[i], bf16_to_f32(bf[i])) << i;
  EXPECT_TRUE(std::isnan(back[2]));

  std::vector<float> same(count);  // identities copy
  ASSERT_OK(be->device().convert(same.data(), DType::kF32, f.data(), DType::kF32, count, 0));
  EXPECT_EQ(std::memcmp(same.data(), f.data(), count * sizeof(float)), 0);
  std::vector<uint16_t> bf2(count);
  ASSERT_OK(be->device().convert(bf2.data(), DType::kBF16, bf.data(), DType::kBF16, count, 0));
  EXPECT_EQ(bf2, bf);
}

TEST(Convert, RejectsOtherPairsAndOverlap) {
  auto be = make_cpu_backend();
  std::vector<float> f(64, 1.0f);
  std::vector<uint16_t> h(64);
  EXPECT_EQ(be->device().convert(h.data(), DType::kF16, f.data(), DType::kF32, 64, 0).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->device().convert(f.data(), DType::kF32, h.data(), DType::kI32, 64, 0).code(),
            ErrorCode::kInvalidArgument);
  // In place narrowing would overwrite what is still to be read.
  EXPECT_EQ(be->device().convert(f.data(), DType::kBF16, f.data(), DType::kF32, 64, 0).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->device().convert(f.data() + 1, DType::kF32, f.data(), DType::kF32, 8, 0).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_OK(be->device().convert(f.data(), DType::kF32, f.data(), DType::kF32, 64,
                                 0));  // the same range: nothing to do
  auto dev = be->device().device_alloc(64 * sizeof(float));
  ASSERT_TRUE(dev.ok());
  // dst would run past the end of its device allocation: 64 floats from byte 128 of 256.
  EXPECT_EQ(be->device()
                .convert(static_cast<char*>(*dev) + 128, DType::kF32, h.data(), DType::kBF16, 64, 0)
                .code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace spillway::compute
