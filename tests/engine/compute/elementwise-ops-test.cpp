// RMSNorm, SwiGLU, embedding and the residual add against double-precision references; backward
// passes against central finite differences of those references.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "compute/backend.h"
#include "compute/cpu/cpu-backend.h"
#include "compute-test-util.h"

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
  ASSERT_TRUE(be->rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), n, d, eps).ok());
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
  ASSERT_TRUE(be->rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), n, d, eps).ok());
  ASSERT_TRUE(be->rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(),
                                   rstd.data(), n, d, false)
                  .ok());
  const auto xd = to_double(x), wd = to_double(w), dyd = to_double(dy);
  auto gx = fd_grad([&](const std::vector<double>& xx) { return dot(dyd, rmsnorm_ref(xx, wd, n, d, eps)); }, xd);
  auto gw = fd_grad([&](const std::vector<double>& ww) { return dot(dyd, rmsnorm_ref(xd, ww, n, d, eps)); }, wd);
  EXPECT_LT(rel_err(dx, gx), kFdTol);
  EXPECT_LT(rel_err(minus(dw, dw0), gw), kFdTol);

  // accumulate_dx adds onto dx; a null dw is skipped.
  std::vector<float> dx_acc = dx0;
  ASSERT_TRUE(be->rmsnorm_backward(dx_acc.data(), nullptr, dy.data(), x.data(), w.data(),
                                   rstd.data(), n, d, true)
                  .ok());
  EXPECT_LT(rel_err(minus(dx_acc, dx0), to_double(dx)), kDirectTol);
}

TEST(RmsNorm, RejectsBadShapes) {
  auto be = make_cpu_backend();
  float x = 1.0f, w = 1.0f, y, r;
  EXPECT_EQ(be->rmsnorm_forward(&y, &r, &x, &w, 1, 0, 1e-5f).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->rmsnorm_forward(&y, &r, &x, &w, -1, 1, 1e-5f).code(), ErrorCode::kInvalidArgument);
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
  ASSERT_TRUE(be->swiglu_forward(y.data(), g.data(), u.data(), n, f).ok());
  const auto gd = to_double(g), ud = to_double(u), dyd = to_double(dy);
  EXPECT_LT(rel_err(y, swiglu_ref(gd, ud)), kDirectTol);
  ASSERT_TRUE(be->swiglu_backward(dg.data(), du.data(), dy.data(), g.data(), u.data(), n, f).ok());
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
  ASSERT_TRUE(be->embedding_forward(out.data(), ids.data(), table.data(), n, d).ok());
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) ASSERT_EQ(out[i * d + j], table[ids[i] * d + j]);
  }
  auto dtable0 = random_floats(vocab * d, 22);
  std::vector<float> dtable = dtable0;
  ASSERT_TRUE(be->embedding_backward(dtable.data(), ids.data(), dy.data(), n, d).ok());
  std::vector<double> ref(dtable0.begin(), dtable0.end());
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) ref[ids[i] * d + j] += dy[i * d + j];
  }
  EXPECT_LT(rel_err(dtable, ref), kDirectTol);
}

TEST(Embedding, BadIdsAreInvalidArgument) {
  const int vocab = 10, d = 13;
  auto be = make_cpu_backend();
  auto table = be->device_alloc(vocab * d * sizeof(float));
  ASSERT_TRUE(table.ok());
  std::vector<float> out(2 * d);
  const std::vector<int32_t> negative = {1, -1}, too_big = {1, 10}, last = {9, 0};
  EXPECT_EQ(be->embedding_forward(out.data(), negative.data(), *table, 2, d).code(),
            ErrorCode::kInvalidArgument);
  // The table lives in a device allocation of `vocab` rows, so the backend bounds the ids.
  auto st = be->embedding_forward(out.data(), too_big.data(), *table, 2, d);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("[0, 10)"), std::string::npos) << st.message();
  EXPECT_TRUE(be->embedding_forward(out.data(), last.data(), *table, 2, d).ok());
  EXPECT_EQ(be->embedding_backward(static_cast<float*>(*table), too_big.data(), out.data(), 2, d)
                .code(),
            ErrorCode::kInvalidArgument);
}

// ---- add --------------------------------------------------------------------------------------

TEST(AddInplace, AddsElementwise) {
  const size_t count = 100003;  // long enough to run on several threads
  auto y = random_floats(count, 30), x = random_floats(count, 31);
  auto y0 = y;
  auto be = make_cpu_backend();
  ASSERT_TRUE(be->add_inplace(y.data(), x.data(), count).ok());
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(y[i], y0[i] + x[i]);
}

}  // namespace
}  // namespace spillway::compute
