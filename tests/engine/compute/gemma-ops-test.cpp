// The ops Gemma 3 adds, on the CPU backend, against double-precision references and their central
// finite differences: RMSNorm with the (1 + w) weight, GeGLU with tanh GELU, the scaled
// embedding, and attention with a scale and a sliding window.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend-test-util.h"
#include "compute-test-util.h"
#include "compute/backend.h"
#include "compute/cpu/rope.h"

namespace spillway::compute {
namespace {

using namespace spillway::compute::testing;

// ---- RMSNorm with a weight offset (Gemma3RMSNorm) --------------------------------------------

// y = x · rstd · (w + offset)
std::vector<double> rmsnorm_offset_ref(const std::vector<double>& x, const std::vector<double>& w,
                                       int n, int d, double eps, double offset) {
  std::vector<double> y(x.size());
  for (int i = 0; i < n; ++i) {
    double ss = 0.0;
    for (int j = 0; j < d; ++j) ss += x[i * d + j] * x[i * d + j];
    const double r = 1.0 / std::sqrt(ss / d + eps);
    for (int j = 0; j < d; ++j) y[i * d + j] = x[i * d + j] * r * (w[j] + offset);
  }
  return y;
}

TEST(RmsNormOffset, ForwardAndBackwardMatchTheReference) {
  const int n = 7, d = 13;
  const float eps = 1e-6f, offset = 1.0f;
  // Gemma's weights sit around 0 (the scale is 1 + w): small values make a missing offset fail.
  auto x = random_floats(n * d, 1), w = random_floats(d, 2, -0.2f, 0.2f),
       dy = random_floats(n * d, 3), dw0 = random_floats(d, 4);
  auto be = make_cpu_backend();
  std::vector<float> y(n * d), rstd(n), dx(n * d), dw = dw0;
  ASSERT_OK(be->rmsnorm_forward(f32(y.data(), {n, d}), f32(rstd.data(), {n}), f32(x.data(), {n, d}),
                                f32(w.data(), {d}), eps, 0, offset));
  const auto xd = to_double(x), wd = to_double(w), dyd = to_double(dy);
  EXPECT_LT(rel_err(y, rmsnorm_offset_ref(xd, wd, n, d, eps, offset)), kDirectTol);
  ASSERT_OK(be->rmsnorm_backward(f32(dx.data(), {n, d}), f32(dw.data(), {d}),
                                 f32(dy.data(), {n, d}), f32(x.data(), {n, d}), f32(w.data(), {d}),
                                 f32(rstd.data(), {n}), false, 0, offset));
  auto gx = fd_grad(
      [&](const std::vector<double>& v) {
        return dot(dyd, rmsnorm_offset_ref(v, wd, n, d, eps, offset));
      },
      xd);
  auto gw = fd_grad(
      [&](const std::vector<double>& v) {
        return dot(dyd, rmsnorm_offset_ref(xd, v, n, d, eps, offset));
      },
      wd);
  EXPECT_LT(rel_err(dx, gx), kFdTol);
  EXPECT_LT(rel_err(minus(dw, dw0), gw), kFdTol);

  // The fused residual form normalises x + r with the same offset.
  auto r = random_floats(n * d, 5);
  std::vector<float> sum(n * d), y2(n * d), rstd2(n), xr(n * d);
  for (int i = 0; i < n * d; ++i) xr[i] = x[i] + r[i];
  ASSERT_OK(be->residual_rmsnorm_forward(
      f32(sum.data(), {n, d}), f32(y2.data(), {n, d}), f32(rstd2.data(), {n}),
      f32(x.data(), {n, d}), f32(r.data(), {n, d}), f32(w.data(), {d}), eps, 0, offset));
  EXPECT_EQ(sum, xr);
  EXPECT_LT(rel_err(y2, rmsnorm_offset_ref(to_double(xr), wd, n, d, eps, offset)), kDirectTol);
}

// ---- GeGLU (gelu_pytorch_tanh) ---------------------------------------------------------------

std::vector<double> geglu_ref(const std::vector<double>& g, const std::vector<double>& u) {
  const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
  std::vector<double> y(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    y[i] = 0.5 * x * (1.0 + std::tanh(beta * (x + kappa * x * x * x))) * u[i];
  }
  return y;
}

TEST(GeGlu, ForwardAndBackward) {
  const int n = 7, f = 13;
  auto g = random_floats(n * f, 10, -4.0f, 4.0f), u = random_floats(n * f, 11),
       dy = random_floats(n * f, 12);
  auto be = make_cpu_backend();
  std::vector<float> y(n * f), dg(n * f, 7.0f), du(n * f, 7.0f);
  ASSERT_OK(
      be->geglu_forward(f32(y.data(), {n, f}), f32(g.data(), {n, f}), f32(u.data(), {n, f}), 0));
  const auto gd = to_double(g), ud = to_double(u), dyd = to_double(dy);
  EXPECT_LT(rel_err(y, geglu_ref(gd, ud)), kDirectTol);
  ASSERT_OK(be->geglu_backward(f32(dg.data(), {n, f}), f32(du.data(), {n, f}),
                               f32(dy.data(), {n, f}), f32(g.data(), {n, f}), f32(u.data(), {n, f}),
                               0));
  auto gg = fd_grad([&](const std::vector<double>& x) { return dot(dyd, geglu_ref(x, ud)); }, gd);
  auto gu = fd_grad([&](const std::vector<double>& x) { return dot(dyd, geglu_ref(gd, x)); }, ud);
  EXPECT_LT(rel_err(dg, gg), kFdTol);
  EXPECT_LT(rel_err(du, gu), kFdTol);
  // gelu_tanh(0) = 0 and gelu_tanh(x) → x for large x; negative ones go to 0.
  std::vector<float> g3 = {0.0f, 10.0f, -10.0f}, u3 = {1.0f, 1.0f, 1.0f}, y3(3);
  ASSERT_OK(
      be->geglu_forward(f32(y3.data(), {1, 3}), f32(g3.data(), {1, 3}), f32(u3.data(), {1, 3}), 0));
  EXPECT_EQ(y3[0], 0.0f);
  EXPECT_FLOAT_EQ(y3[1], 10.0f);
  EXPECT_NEAR(y3[2], 0.0f, 1e-6f);
}

TEST(GeGlu, RejectsMismatchedShapes) {
  auto be = make_cpu_backend();
  std::vector<float> buf(64);
  float* p = buf.data();
  EXPECT_EQ(be->geglu_forward(f32(p, {2, 4}), f32(p, {2, 4}), f32(p, {2, 5}), 0).code(),
            ErrorCode::kInvalidArgument);
}

// ---- Scaled embedding (Gemma3TextScaledWordEmbedding) ---------------------------------------

TEST(EmbeddingScale, ForwardScalesAndBackwardScalesTheGradient) {
  const int vocab = 10, d = 13, n = 5;
  const std::vector<int32_t> ids = {3, 0, 9, 3, 5};
  const float scale = std::sqrt(13.0f);
  auto table = random_floats(vocab * d, 20), dy = random_floats(n * d, 21);
  auto be = make_cpu_backend();
  std::vector<float> out(n * d), dtable(vocab * d, 0.0f);
  ASSERT_OK(be->embedding_forward(f32(out.data(), {n, d}), i32(ids.data(), {n}),
                                  f32(table.data(), {vocab, d}), 0, scale));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) ASSERT_EQ(out[i * d + j], table[ids[i] * d + j] * scale);
  ASSERT_OK(be->embedding_backward(f32(dtable.data(), {vocab, d}), i32(ids.data(), {n}),
                                   f32(dy.data(), {n, d}), 0, scale));
  std::vector<double> ref(vocab * d, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) ref[ids[i] * d + j] += double(dy[i * d + j]) * scale;
  EXPECT_LT(rel_err(dtable, ref), kDirectTol);
}

// ---- Attention with a scale and a sliding window ---------------------------------------------

struct AttnShape {
  int batch, seq, hq, hkv, d;
  size_t q_size() const { return static_cast<size_t>(batch) * seq * hq * d; }
  size_t kv_size() const { return static_cast<size_t>(batch) * seq * hkv * d; }
};

// Eager attention with transformers' masks: key u is visible to query t when u <= t and, with a
// window, t − u < window. out[b, t, hq, d]; lse[b, hq, t] when non-null.
std::vector<double> windowed_attention_ref(const AttnShape& s, const std::vector<double>& q,
                                           const std::vector<double>& k,
                                           const std::vector<double>& v, double scale, int window,
                                           std::vector<double>* lse = nullptr) {
  std::vector<double> out(s.q_size(), 0.0);
  if (lse) lse->assign(static_cast<size_t>(s.batch) * s.hq * s.seq, 0.0);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.hq; ++h) {
      const int kvh = h / (s.hq / s.hkv);
      for (int t = 0; t < s.seq; ++t) {
        const double* qt = &q[((size_t(b) * s.seq + t) * s.hq + h) * s.d];
        const int first = window > 0 ? std::max(0, t - window + 1) : 0;
        std::vector<double> sc(t + 1, -INFINITY);
        double m = -INFINITY;
        for (int u = first; u <= t; ++u) {
          const double* ku = &k[((size_t(b) * s.seq + u) * s.hkv + kvh) * s.d];
          double dd = 0;
          for (int j = 0; j < s.d; ++j) dd += qt[j] * ku[j];
          sc[u] = dd * scale;
          m = std::max(m, sc[u]);
        }
        double sum = 0;
        for (int u = first; u <= t; ++u) sum += std::exp(sc[u] - m);
        if (lse) (*lse)[(size_t(b) * s.hq + h) * s.seq + t] = m + std::log(sum);
        double* ot = &out[((size_t(b) * s.seq + t) * s.hq + h) * s.d];
        for (int u = first; u <= t; ++u) {
          const double p = std::exp(sc[u] - m) / sum;
          const double* vu = &v[((size_t(b) * s.seq + u) * s.hkv + kvh) * s.d];
          for (int j = 0; j < s.d; ++j) ot[j] += p * vu[j];
        }
      }
    }
  return out;
}

// Backward by the textbook formulas in double over the visible keys: P = softmax(S),
// dS = P∘(dP − rowsum(dP∘P)), dQ = dS·K·scale, dK = dSᵀ·Q·scale, dV = Pᵀ·dO.
void windowed_backward_ref(const AttnShape& s, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v,
                           const std::vector<double>& dout, double scale, int window,
                           std::vector<double>* dq, std::vector<double>* dk,
                           std::vector<double>* dv) {
  dq->assign(s.q_size(), 0.0), dk->assign(s.kv_size(), 0.0), dv->assign(s.kv_size(), 0.0);
  auto qi = [&](int b, int t, int h) { return ((size_t(b) * s.seq + t) * s.hq + h) * s.d; };
  auto ki = [&](int b, int t, int h) { return ((size_t(b) * s.seq + t) * s.hkv + h) * s.d; };
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.hq; ++h) {
      const int kvh = h / (s.hq / s.hkv);
      for (int t = 0; t < s.seq; ++t) {
        const int first = window > 0 ? std::max(0, t - window + 1) : 0;
        std::vector<double> p(t + 1, 0.0), dp(t + 1, 0.0);
        double m = -INFINITY, sum = 0.0, rowsum = 0.0;
        for (int u = first; u <= t; ++u) {
          double dd = 0.0, g = 0.0;
          for (int j = 0; j < s.d; ++j) {
            dd += q[qi(b, t, h) + j] * k[ki(b, u, kvh) + j];
            g += dout[qi(b, t, h) + j] * v[ki(b, u, kvh) + j];
          }
          p[u] = dd * scale, dp[u] = g;
          m = std::max(m, p[u]);
        }
        for (int u = first; u <= t; ++u) sum += (p[u] = std::exp(p[u] - m));
        for (int u = first; u <= t; ++u) rowsum += (p[u] /= sum) * dp[u];
        for (int u = first; u <= t; ++u) {
          const double ds = p[u] * (dp[u] - rowsum);
          for (int j = 0; j < s.d; ++j) {
            (*dq)[qi(b, t, h) + j] += ds * k[ki(b, u, kvh) + j] * scale;
            (*dk)[ki(b, u, kvh) + j] += ds * q[qi(b, t, h) + j] * scale;
            (*dv)[ki(b, u, kvh) + j] += p[u] * dout[qi(b, t, h) + j];
          }
        }
      }
    }
}

// Forward against the reference; the backward against its finite differences, and the textbook
// formulas (used for the longer shapes) against them too.
void check_windowed(const AttnShape& s, float scale, int window, uint32_t seed) {
  SCOPED_TRACE("seq " + std::to_string(s.seq) + " d " + std::to_string(s.d) + " window " +
               std::to_string(window));
  auto q = random_floats(s.q_size(), seed), k = random_floats(s.kv_size(), seed + 1),
       v = random_floats(s.kv_size(), seed + 2), dout = random_floats(s.q_size(), seed + 3);
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, attention_shapes(s.batch, s.seq, s.hq, s.hkv, s.d)));
  const AttentionParams params{scale, window};
  const Shape qs{s.batch, s.seq, s.hq, s.d}, kvs{s.batch, s.seq, s.hkv, s.d},
      ls{s.batch, s.hq, s.seq};
  std::vector<float> out(s.q_size()), lse(size_t(s.batch) * s.hq * s.seq);
  ASSERT_OK(be->attention_forward(f32(out.data(), qs), f32(lse.data(), ls), f32(q.data(), qs),
                                  f32(k.data(), kvs), f32(v.data(), kvs), 0, params));
  const auto qd = to_double(q), kd = to_double(k), vd = to_double(v), dod = to_double(dout);
  const double sc = scale > 0 ? scale : 1.0 / std::sqrt(double(s.d));
  std::vector<double> lse_ref;
  EXPECT_LT(rel_err(out, windowed_attention_ref(s, qd, kd, vd, sc, window, &lse_ref)), kDirectTol);
  EXPECT_LT(rel_err(lse, lse_ref), kDirectTol);

  std::vector<float> dq(s.q_size(), 7.0f), dk(s.kv_size(), 7.0f), dv(s.kv_size(), 7.0f);
  ASSERT_OK(be->attention_backward(f32(dq.data(), qs), f32(dk.data(), kvs), f32(dv.data(), kvs),
                                   f32(dout.data(), qs), f32(q.data(), qs), f32(k.data(), kvs),
                                   f32(v.data(), kvs), f32(out.data(), qs), f32(lse.data(), ls), 0,
                                   params));
  auto f = [&](const std::vector<double>& qq, const std::vector<double>& kk,
               const std::vector<double>& vv) {
    return dot(dod, windowed_attention_ref(s, qq, kk, vv, sc, window));
  };
  auto gq = fd_grad([&](const std::vector<double>& x) { return f(x, kd, vd); }, qd);
  auto gk = fd_grad([&](const std::vector<double>& x) { return f(qd, x, vd); }, kd);
  auto gv = fd_grad([&](const std::vector<double>& x) { return f(qd, kd, x); }, vd);
  EXPECT_LT(rel_err(dq, gq), kFdTol);
  EXPECT_LT(rel_err(dk, gk), kFdTol);
  EXPECT_LT(rel_err(dv, gv), kFdTol);
  std::vector<double> fq, fk, fv;
  windowed_backward_ref(s, qd, kd, vd, dod, sc, window, &fq, &fk, &fv);
  EXPECT_LT(rel_err(std::vector<float>(fq.begin(), fq.end()), gq), kFdTol);
  EXPECT_LT(rel_err(std::vector<float>(fk.begin(), fk.end()), gk), kFdTol);
  EXPECT_LT(rel_err(std::vector<float>(fv.begin(), fv.end()), gv), kFdTol);
}

TEST(AttentionWindow, WindowSmallerThanTheBlocks) {
  check_windowed({2, 11, 4, 2, 8}, 0.0f, 1, 100);  // each query sees only itself
  check_windowed({2, 11, 4, 2, 8}, 0.0f, 3, 110);  // shorter than a block of 4 rows
}

TEST(AttentionWindow, WindowAcrossBlocksWithAScale) {
  check_windowed({1, 19, 6, 3, 12}, 0.3f, 6, 120);
  check_windowed({1, 19, 2, 1, 16}, 1.0f / 16.0f, 9, 130);  // Gemma: query_pre_attn_scalar 256
}

TEST(AttentionWindow, WindowAtLeastTheSequenceIsPlainCausal) {
  const AttnShape s{1, 9, 2, 1, 8};
  auto q = random_floats(s.q_size(), 140), k = random_floats(s.kv_size(), 141),
       v = random_floats(s.kv_size(), 142);
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, attention_shapes(s.batch, s.seq, s.hq, s.hkv, s.d)));
  const Shape qs{1, s.seq, s.hq, s.d}, kvs{1, s.seq, s.hkv, s.d}, ls{1, s.hq, s.seq};
  std::vector<float> a(s.q_size()), b(s.q_size()), la(s.hq * s.seq), lb(s.hq * s.seq);
  ASSERT_OK(be->attention_forward(f32(a.data(), qs), f32(la.data(), ls), f32(q.data(), qs),
                                  f32(k.data(), kvs), f32(v.data(), kvs), 0));
  ASSERT_OK(be->attention_forward(f32(b.data(), qs), f32(lb.data(), ls), f32(q.data(), qs),
                                  f32(k.data(), kvs), f32(v.data(), kvs), 0,
                                  AttentionParams{0.0f, s.seq}));
  EXPECT_EQ(a, b);
  EXPECT_EQ(la, lb);
}

TEST(AttentionWindow, LongSequenceMatchesTheReference) {
  // Tiled sizes (head_dim 40: a 16-tile, an 8-tile and a tail; GQA) over many blocks of rows,
  // against the double formulas directly (finite differences would be slow here).
  const AttnShape s{2, 45, 4, 2, 40};
  const int window = 7;
  auto q = random_floats(s.q_size(), 150), k = random_floats(s.kv_size(), 151),
       v = random_floats(s.kv_size(), 152), dout = random_floats(s.q_size(), 153);
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, attention_shapes(s.batch, s.seq, s.hq, s.hkv, s.d)));
  const Shape qs{s.batch, s.seq, s.hq, s.d}, kvs{s.batch, s.seq, s.hkv, s.d},
      ls{s.batch, s.hq, s.seq};
  const AttentionParams params{0.0f, window};
  std::vector<float> out(s.q_size()), lse(size_t(s.batch) * s.hq * s.seq);
  ASSERT_OK(be->attention_forward(f32(out.data(), qs), f32(lse.data(), ls), f32(q.data(), qs),
                                  f32(k.data(), kvs), f32(v.data(), kvs), 0, params));
  const auto qd = to_double(q), kd = to_double(k), vd = to_double(v), dod = to_double(dout);
  const double sc = 1.0 / std::sqrt(double(s.d));
  EXPECT_LT(rel_err(out, windowed_attention_ref(s, qd, kd, vd, sc, window)), kDirectTol);
  std::vector<float> dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
  ASSERT_OK(be->attention_backward(f32(dq.data(), qs), f32(dk.data(), kvs), f32(dv.data(), kvs),
                                   f32(dout.data(), qs), f32(q.data(), qs), f32(k.data(), kvs),
                                   f32(v.data(), kvs), f32(out.data(), qs), f32(lse.data(), ls), 0,
                                   params));
  std::vector<double> gq, gk, gv;
  windowed_backward_ref(s, qd, kd, vd, dod, sc, window, &gq, &gk, &gv);
  EXPECT_LT(rel_err(dq, gq), kDirectTol);
  EXPECT_LT(rel_err(dk, gk), kDirectTol);
  EXPECT_LT(rel_err(dv, gv), kDirectTol);
}

TEST(AttentionWindow, RejectsANegativeWindow) {
  auto be = make_cpu_backend();
  std::vector<float> buf(1024);
  float* p = buf.data();
  EXPECT_EQ(be->attention_forward(f32(p, {1, 2, 2, 8}), f32(p, {1, 2, 2}), f32(p, {1, 2, 2, 8}),
                                  f32(p, {1, 2, 2, 8}), f32(p, {1, 2, 2, 8}), 0,
                                  AttentionParams{0.0f, -1})
                .code(),
            ErrorCode::kInvalidArgument);
}

// ---- Linear RoPE scaling (Gemma 3's global layers) ------------------------------------------

// transformers' _compute_linear_scaling_rope_parameters divides every frequency by the factor; the
// same factor for every pair (RopeScaling::ext_factors) does that, to float rounding.
TEST(RopeLinearScaling, DividesEveryFrequencyByTheFactor) {
  const int d = 256;
  RopeScaling linear;
  linear.ext_factors.assign(d / 2, 8.0f);
  auto plain = cpu::rope_inv_freq(d, 1e6f, RopeScaling{});
  auto scaled = cpu::rope_inv_freq(d, 1e6f, linear);
  ASSERT_TRUE(plain.ok() && scaled.ok());
  for (int i = 0; i < d / 2; ++i)
    EXPECT_NEAR((*scaled)[i], (*plain)[i] / 8.0f, 1e-7f * (*plain)[i]) << i;
  RopeScaling wrong;
  wrong.ext_factors.assign(3, 8.0f);  // not one per pair
  EXPECT_EQ(cpu::rope_inv_freq(d, 1e6f, wrong).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace spillway::compute
