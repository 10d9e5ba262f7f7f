// Linear (sgemm) forward and backward against a double-precision reference.
#include <gtest/gtest.h>

#include <vector>

#include "compute-test-util.h"
#include "compute/backend.h"

namespace spillway::compute {
namespace {

using namespace spillway::compute::testing;

// y[n, out] = x[n, in] · W[out, in]ᵀ + b
std::vector<double> linear_ref(const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>* b, int n, int in, int out) {
  std::vector<double> y(static_cast<size_t>(n) * out);
  for (int i = 0; i < n; ++i) {
    for (int o = 0; o < out; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int k = 0; k < in; ++k) s += x[i * in + k] * w[o * in + k];
      y[i * out + o] = s;
    }
  }
  return y;
}

TEST(Linear, ForwardWithAndWithoutBias) {
  const int n = 7, in = 13, out = 11;
  auto x = random_floats(n * in, 1), w = random_floats(out * in, 2), b = random_floats(out, 3);
  auto be = make_cpu_backend();
  std::vector<float> y(n * out, 123.0f);
  const auto xd = to_double(x), wd = to_double(w), bd = to_double(b);
  ASSERT_TRUE(be->linear_forward(f32(y.data(), {n, out}), f32(x.data(), {n, in}),
                                 f32(w.data(), {out, in}), f32(b.data(), {out}), 0)
                  .ok());
  EXPECT_LT(rel_err(y, linear_ref(xd, wd, &bd, n, in, out)), kDirectTol);
  std::fill(y.begin(), y.end(), 123.0f);  // overwritten, not accumulated
  ASSERT_TRUE(be->linear_forward(f32(y.data(), {n, out}), f32(x.data(), {n, in}),
                                 f32(w.data(), {out, in}), {}, 0)
                  .ok());
  EXPECT_LT(rel_err(y, linear_ref(xd, wd, nullptr, n, in, out)), kDirectTol);
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const int n = 7, in = 13, out = 11;
  auto x = random_floats(n * in, 4), w = random_floats(out * in, 5), b = random_floats(out, 6),
       dy = random_floats(n * out, 7);
  auto dw0 = random_floats(out * in, 8), db0 = random_floats(out, 9),
       dx0 = random_floats(n * in, 10);
  auto be = make_cpu_backend();
  std::vector<float> dx = dx0, dw = dw0, db = db0;
  ASSERT_TRUE(be->linear_backward(f32(dx.data(), {n, in}), f32(dw.data(), {out, in}),
                                  f32(db.data(), {out}), f32(dy.data(), {n, out}),
                                  f32(x.data(), {n, in}), f32(w.data(), {out, in}), false, 0)
                  .ok());
  const auto xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
  auto gx = fd_grad(
      [&](const std::vector<double>& v) { return dot(dyd, linear_ref(v, wd, &bd, n, in, out)); },
      xd);
  auto gw = fd_grad(
      [&](const std::vector<double>& v) { return dot(dyd, linear_ref(xd, v, &bd, n, in, out)); },
      wd);
  auto gb = fd_grad(
      [&](const std::vector<double>& v) { return dot(dyd, linear_ref(xd, wd, &v, n, in, out)); },
      bd);
  EXPECT_LT(rel_err(dx, gx), kFdTol);
  EXPECT_LT(rel_err(minus(dw, dw0), gw), kFdTol);
  EXPECT_LT(rel_err(minus(db, db0), gb), kFdTol);

  // accumulate_dx adds; null dx/dw/db are skipped.
  std::vector<float> dx_acc = dx0;
  ASSERT_TRUE(be->linear_backward(f32(dx_acc.data(), {n, in}), {}, {}, f32(dy.data(), {n, out}),
                                  f32(x.data(), {n, in}), f32(w.data(), {out, in}), true, 0)
                  .ok());
  EXPECT_LT(rel_err(minus(dx_acc, dx0), to_double(dx)), kDirectTol);
  std::vector<float> dw2 = dw0;
  ASSERT_TRUE(be->linear_backward({}, f32(dw2.data(), {out, in}), {}, f32(dy.data(), {n, out}),
                                  f32(x.data(), {n, in}), f32(w.data(), {out, in}), false, 0)
                  .ok());
  EXPECT_LT(rel_err(dw2, to_double(dw)), kDirectTol);
}

// Bias gradients are summed in tiles of columns: a width of several tiles and a partial one.
TEST(Linear, BiasGradientOverManyColumns) {
  const int n = 33, in = 5, out = 150;
  auto x = random_floats(n * in, 11), w = random_floats(out * in, 12),
       dy = random_floats(n * out, 13);
  auto db0 = random_floats(out, 14);
  auto be = make_cpu_backend();
  std::vector<float> db = db0;
  ASSERT_TRUE(be->linear_backward({}, {}, f32(db.data(), {out}), f32(dy.data(), {n, out}),
                                  f32(x.data(), {n, in}), f32(w.data(), {out, in}), false, 0)
                  .ok());
  std::vector<double> ref(out, 0.0);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) ref[o] += dy[i * out + o];
  EXPECT_LT(rel_err(minus(db, db0), ref), kDirectTol);
}

TEST(Linear, EmptyBatchAndBadShapes) {
  auto be = make_cpu_backend();
  float x = 1.0f, w = 1.0f, y = 5.0f;
  EXPECT_TRUE(be->linear_forward(f32(&y, {0, 1}), f32(&x, {0, 1}), f32(&w, {1, 1}), {}, 0).ok());
  EXPECT_EQ(y, 5.0f);
  EXPECT_EQ(be->linear_forward(f32(&y, {1, 1}), f32(&x, {1, 0}), f32(&w, {1, 0}), {}, 0).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->linear_backward(f32(&x, {-1, 1}), {}, {}, f32(&y, {-1, 1}), f32(&x, {-1, 1}),
                                f32(&w, {1, 1}), false, 0)
                .code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace spillway::compute
