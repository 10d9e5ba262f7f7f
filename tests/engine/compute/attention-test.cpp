// Causal GQA attention against a double-precision softmax reference; the backward against central
// finite differences of that reference.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend-test-util.h"
#include "compute-test-util.h"
#include "compute/backend.h"
#include "compute/cpu/attention-key-bias.h"
#include "compute/cpu/rope.h"
#include "core/buffer.h"

namespace spillway::compute {
namespace {

using namespace spillway::compute::testing;

struct Shape {
  int batch, seq, hq, hkv, d;
  size_t q_size() const { return static_cast<size_t>(batch) * seq * hq * d; }
  size_t kv_size() const { return static_cast<size_t>(batch) * seq * hkv * d; }
};

// out[b, t, hq, d]; lse[b, hq, t] when non-null.
std::vector<double> attention_ref(const Shape& s, const std::vector<double>& q,
                                  const std::vector<double>& k, const std::vector<double>& v,
                                  std::vector<double>* lse = nullptr) {
  std::vector<double> out(s.q_size());
  if (lse) lse->assign(static_cast<size_t>(s.batch) * s.hq * s.seq, 0.0);
  const double scale = 1.0 / std::sqrt(double(s.d));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.hq; ++h) {
      const int kvh = h / (s.hq / s.hkv);
      for (int t = 0; t < s.seq; ++t) {
        const double* qt = &q[((size_t(b) * s.seq + t) * s.hq + h) * s.d];
        std::vector<double> sc(t + 1);
        double m = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          const double* ku = &k[((size_t(b) * s.seq + u) * s.hkv + kvh) * s.d];
          double dd = 0;
          for (int j = 0; j < s.d; ++j) dd += qt[j] * ku[j];
          sc[u] = dd * scale;
          m = std::max(m, sc[u]);
        }
        double sum = 0;
        for (auto& x : sc) sum += std::exp(x - m);
        if (lse) (*lse)[(size_t(b) * s.hq + h) * s.seq + t] = m + std::log(sum);
        double* ot = &out[((size_t(b) * s.seq + t) * s.hq + h) * s.d];
        for (int u = 0; u <= t; ++u) {
          const double p = std::exp(sc[u] - m) / sum;
          const double* vu = &v[((size_t(b) * s.seq + u) * s.hkv + kvh) * s.d];
          for (int j = 0; j < s.d; ++j) ot[j] += p * vu[j];
        }
      }
    }
  return out;
}

// Backward by the textbook formulas in double: P = softmax(S), dP = dO·Vᵀ,
// dS = P∘(dP − rowsum(dP∘P)), dQ = dS·K·scale, dK = dSᵀ·Q·scale, dV = Pᵀ·dO.
void attention_backward_ref(const Shape& s, const std::vector<double>& q,
                            const std::vector<double>& k, const std::vector<double>& v,
                            const std::vector<double>& dout, std::vector<double>* dq,
                            std::vector<double>* dk, std::vector<double>* dv) {
  dq->assign(s.q_size(), 0.0), dk->assign(s.kv_size(), 0.0), dv->assign(s.kv_size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(s.d));
  auto qi = [&](int b, int t, int h) { return ((size_t(b) * s.seq + t) * s.hq + h) * s.d; };
  auto ki = [&](int b, int t, int h) { return ((size_t(b) * s.seq + t) * s.hkv + h) * s.d; };
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.hq; ++h) {
      const int kvh = h / (s.hq / s.hkv);
      for (int t = 0; t < s.seq; ++t) {
        std::vector<double> p(t + 1), dp(t + 1);
        double m = -INFINITY, sum = 0.0;
        for (int u = 0; u <= t; ++u) {
          double dd = 0.0, g = 0.0;
          for (int j = 0; j < s.d; ++j) {
            dd += q[qi(b, t, h) + j] * k[ki(b, u, kvh) + j];
            g += dout[qi(b, t, h) + j] * v[ki(b, u, kvh) + j];
          }
          p[u] = dd * scale, dp[u] = g;
          m = std::max(m, p[u]);
        }
        for (auto& x : p) sum += (x = std::exp(x - m));
        double rowsum = 0.0;
        for (int u = 0; u <= t; ++u) rowsum += (p[u] /= sum) * dp[u];
        for (int u = 0; u <= t; ++u) {
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

void check_attention(const Shape& s, uint32_t seed) {
  auto q = random_floats(s.q_size(), seed), k = random_floats(s.kv_size(), seed + 1),
       v = random_floats(s.kv_size(), seed + 2), dout = random_floats(s.q_size(), seed + 3);
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, attention_shapes(s.batch, s.seq, s.hq, s.hkv, s.d)));
  std::vector<float> out(s.q_size()), lse(size_t(s.batch) * s.hq * s.seq);
  ASSERT_TRUE(be->attention_forward(f32(out.data(), {s.batch, s.seq, s.hq, s.d}),
                                    f32(lse.data(), {s.batch, s.hq, s.seq}),
                                    f32(q.data(), {s.batch, s.seq, s.hq, s.d}),
                                    f32(k.data(), {s.batch, s.seq, s.hkv, s.d}),
                                    f32(v.data(), {s.batch, s.seq, s.hkv, s.d}), 0)
                  .ok());
  const auto qd = to_double(q), kd = to_double(k), vd = to_double(v), dod = to_double(dout);
  std::vector<double> lse_ref;
  EXPECT_LT(rel_err(out, attention_ref(s, qd, kd, vd, &lse_ref)), kDirectTol);
  EXPECT_LT(rel_err(lse, lse_ref), kDirectTol);

  // Outputs are overwritten: start from garbage.
  std::vector<float> dq(s.q_size(), 7.0f), dk(s.kv_size(), 7.0f), dv(s.kv_size(), 7.0f);
  ASSERT_TRUE(be->attention_backward(f32(dq.data(), {s.batch, s.seq, s.hq, s.d}),
                                     f32(dk.data(), {s.batch, s.seq, s.hkv, s.d}),
                                     f32(dv.data(), {s.batch, s.seq, s.hkv, s.d}),
                                     f32(dout.data(), {s.batch, s.seq, s.hq, s.d}),
                                     f32(q.data(), {s.batch, s.seq, s.hq, s.d}),
                                     f32(k.data(), {s.batch, s.seq, s.hkv, s.d}),
                                     f32(v.data(), {s.batch, s.seq, s.hkv, s.d}),
                                     f32(out.data(), {s.batch, s.seq, s.hq, s.d}),
                                     f32(lse.data(), {s.batch, s.hq, s.seq}), 0)
                  .ok());
  auto gq = fd_grad(
      [&](const std::vector<double>& x) { return dot(dod, attention_ref(s, x, kd, vd)); }, qd);
  auto gk = fd_grad(
      [&](const std::vector<double>& x) { return dot(dod, attention_ref(s, qd, x, vd)); }, kd);
  auto gv = fd_grad(
      [&](const std::vector<double>& x) { return dot(dod, attention_ref(s, qd, kd, x)); }, vd);
  EXPECT_LT(rel_err(dq, gq), kFdTol);
  EXPECT_LT(rel_err(dk, gk), kFdTol);
  EXPECT_LT(rel_err(dv, gv), kFdTol);

  // The double formulas used for larger shapes agree with the finite differences too.
  std::vector<double> fq, fk, fv;
  attention_backward_ref(s, qd, kd, vd, dod, &fq, &fk, &fv);
  auto rel = [](const std::vector<double>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);  // seq 1: dq = dk = 0
  };
  EXPECT_LT(rel(fq, gq), 1e-6);
  EXPECT_LT(rel(fk, gk), 1e-6);
  EXPECT_LT(rel(fv, gv), 1e-6);
}

TEST(Attention, GroupedQueryOddSizes) {
  check_attention({2, 5, 6, 2, 8}, 1);
}
TEST(Attention, MultiHead) {
  check_attention({1, 7, 4, 4, 8}, 10);
}
TEST(Attention, MultiQueryOddHeadDim) {
  check_attention({1, 6, 3, 1, 13}, 20);
}
TEST(Attention, SingleToken) {
  check_attention({3, 1, 2, 1, 8}, 30);
}

TEST(Attention, TiledShapesMatchDirectReference) {
  // Real head sizes (64: two 16-wide tiles per row block; 40: a tile, an 8-tile and a tail) and
  // sequences that end mid-tile, checked against the double formulas directly (finite differences
  // would be slow here; the formulas themselves are checked against them above).
  for (const Shape& s : {Shape{2, 37, 4, 2, 64}, Shape{1, 50, 3, 3, 40}}) {
    auto q = random_floats(s.q_size(), 50), k = random_floats(s.kv_size(), 51),
         v = random_floats(s.kv_size(), 52), dout = random_floats(s.q_size(), 53);
    auto be = make_poisoned_cpu_backend();
    ASSERT_OK(set_test_workspace(*be, attention_shapes(s.batch, s.seq, s.hq, s.hkv, s.d)));
    std::vector<float> out(s.q_size()), lse(size_t(s.batch) * s.hq * s.seq);
    ASSERT_TRUE(be->attention_forward(f32(out.data(), {s.batch, s.seq, s.hq, s.d}),
                                      f32(lse.data(), {s.batch, s.hq, s.seq}),
                                      f32(q.data(), {s.batch, s.seq, s.hq, s.d}),
                                      f32(k.data(), {s.batch, s.seq, s.hkv, s.d}),
                                      f32(v.data(), {s.batch, s.seq, s.hkv, s.d}), 0)
                    .ok());
    const auto qd = to_double(q), kd = to_double(k), vd = to_double(v), dod = to_double(dout);
    std::vector<double> lse_ref, gq, gk, gv;
    EXPECT_LT(rel_err(out, attention_ref(s, qd, kd, vd, &lse_ref)), kDirectTol) << s.d;
    EXPECT_LT(rel_err(lse, lse_ref), kDirectTol);
    std::vector<float> dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
    ASSERT_TRUE(be->attention_backward(f32(dq.data(), {s.batch, s.seq, s.hq, s.d}),
                                       f32(dk.data(), {s.batch, s.seq, s.hkv, s.d}),
                                       f32(dv.data(), {s.batch, s.seq, s.hkv, s.d}),
                                       f32(dout.data(), {s.batch, s.seq, s.hq, s.d}),
                                       f32(q.data(), {s.batch, s.seq, s.hq, s.d}),
                                       f32(k.data(), {s.batch, s.seq, s.hkv, s.d}),
                                       f32(v.data(), {s.batch, s.seq, s.hkv, s.d}),
                                       f32(out.data(), {s.batch, s.seq, s.hq, s.d}),
                                       f32(lse.data(), {s.batch, s.hq, s.seq}), 0)
                    .ok());
    attention_backward_ref(s, qd, kd, vd, dod, &gq, &gk, &gv);
    EXPECT_LT(rel_err(dq, gq), kDirectTol) << s.d;
    EXPECT_LT(rel_err(dk, gk), kDirectTol) << s.d;
    EXPECT_LT(rel_err(dv, gv), kDirectTol) << s.d;
    // lse may be omitted when no backward follows.
    std::vector<float> out2(s.q_size());
    ASSERT_TRUE(be->attention_forward(f32(out2.data(), {s.batch, s.seq, s.hq, s.d}), Tensor{},
                                      f32(q.data(), {s.batch, s.seq, s.hq, s.d}),
                                      f32(k.data(), {s.batch, s.seq, s.hkv, s.d}),
                                      f32(v.data(), {s.batch, s.seq, s.hkv, s.d}), 0)
                    .ok());
    EXPECT_EQ(out, out2);
  }
}

TEST(Attention, LargeScoresStayFinite) {
  // Scores of ±hundreds: a softmax without the max shift would overflow.
  const Shape s{1, 9, 2, 1, 8};
  auto q = random_floats(s.q_size(), 40, -30.0f, 30.0f),
       k = random_floats(s.kv_size(), 41, -30.0f, 30.0f), v = random_floats(s.kv_size(), 42);
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, attention_shapes(s.batch, s.seq, s.hq, s.hkv, s.d)));
  std::vector<float> out(s.q_size()), lse(s.hq * s.seq);
  ASSERT_TRUE(be->attention_forward(
                    f32(out.data(), {1, s.seq, s.hq, s.d}), f32(lse.data(), {1, s.hq, s.seq}),
                    f32(q.data(), {1, s.seq, s.hq, s.d}), f32(k.data(), {1, s.seq, s.hkv, s.d}),
                    f32(v.data(), {1, s.seq, s.hkv, s.d}), 0)
                  .ok());
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(rel_err(out, attention_ref(s, to_double(q), to_double(k), to_double(v))), 1e-4);
}

// db[g] = Σ_b Σ_j R_jᵀ dk[b, j, g] from the double reference's dk, rotations from `table`.
std::vector<double> key_bias_ref(const Shape& s, const std::vector<double>& dk,
                                 const cpu::RopeTable& table) {
  std::vector<double> db(static_cast<size_t>(s.hkv) * s.d, 0.0);
  const int half = s.d / 2;
  for (int b = 0; b < s.batch; ++b)
    for (int j = 0; j < s.seq; ++j)
      for (int g = 0; g < s.hkv; ++g) {
        const double* y = &dk[((size_t(b) * s.seq + j) * s.hkv + g) * s.d];
        for (int f = 0; f < half; ++f) {
          const double c = table.cos[size_t(j) * half + f], sn = table.sin[size_t(j) * half + f];
          db[size_t(g) * s.d + f] += y[f] * c + y[f + half] * sn;
          db[size_t(g) * s.d + f + half] += y[f + half] * c - y[f] * sn;
        }
      }
  return db;
}

TEST(AttentionKeyBias, MatchesTheDoubleReference) {
  const Shape s{2, 37, 6, 2, 16};
  auto q = random_floats(s.q_size(), 40), k = random_floats(s.kv_size(), 41),
       v = random_floats(s.kv_size(), 42), dout = random_floats(s.q_size(), 43);
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, attention_shapes(s.batch, s.seq, s.hq, s.hkv, s.d)));
  std::vector<float> db(size_t(s.hkv) * s.d, 0.0f);
  for (int call = 0; call < 2; ++call) {  // the second call accumulates onto the first
    ASSERT_TRUE(be->attention_key_bias_backward(
                      f32(db.data(), {s.hkv, s.d}), f32(dout.data(), {s.batch, s.seq, s.hq, s.d}),
                      f32(q.data(), {s.batch, s.seq, s.hq, s.d}),
                      f32(k.data(), {s.batch, s.seq, s.hkv, s.d}),
                      f32(v.data(), {s.batch, s.seq, s.hkv, s.d}), 1e4f, RopeScaling{}, 0)
                    .ok());
  }
  std::vector<double> fq, fk, fv;
  attention_backward_ref(s, to_double(q), to_double(k), to_double(v), to_double(dout), &fq, &fk,
                         &fv);
  auto table = cpu::make_rope_table(s.seq, s.d, 1e4f, RopeScaling{});
  ASSERT_TRUE(table.ok());
  auto ref = key_bias_ref(s, fk, *table);
  for (auto& x : ref) x *= 2;
  EXPECT_LT(rel_err(db, ref), 1e-6);
}

// Without rotation the key bias's gradient vanishes exactly (softmax ignores a per-row shift): the
// double path gives ~0 where summing float32 dk leaves rounding noise.
TEST(AttentionKeyBias, VanishesWithoutRotation) {
  const Shape s{1, 64, 4, 2, 8};
  auto q = random_floats(s.q_size(), 50), k = random_floats(s.kv_size(), 51),
       v = random_floats(s.kv_size(), 52), dout = random_floats(s.q_size(), 53);
  cpu::RopeTable identity;
  identity.seq = s.seq, identity.head_dim = s.d, identity.rotary_dim = s.d;
  identity.cos.assign(size_t(s.seq) * s.d / 2, 1.0f);
  identity.sin.assign(size_t(s.seq) * s.d / 2, 0.0f);
  std::vector<float> db(size_t(s.hkv) * s.d, 0.0f);
  auto scratch = AlignedBuffer::allocate(
      cpu::attention_key_bias_scratch_bytes(s.batch, s.seq, s.hq, s.hkv, s.d));
  ASSERT_TRUE(scratch.ok());
  ASSERT_OK(cpu::attention_key_bias_backward(db.data(), dout.data(), q.data(), k.data(), v.data(),
                                             s.batch, s.seq, s.hq, s.hkv, s.d, identity,
                                             scratch->data()));
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, attention_shapes(s.batch, s.seq, s.hq, s.hkv, s.d)));
  std::vector<float> out(s.q_size()), lse(size_t(s.hq) * s.seq), dq(s.q_size()), dk(s.kv_size()),
      dv(s.kv_size());
  ASSERT_TRUE(be->attention_forward(
                    f32(out.data(), {1, s.seq, s.hq, s.d}), f32(lse.data(), {1, s.hq, s.seq}),
                    f32(q.data(), {1, s.seq, s.hq, s.d}), f32(k.data(), {1, s.seq, s.hkv, s.d}),
                    f32(v.data(), {1, s.seq, s.hkv, s.d}), 0)
                  .ok());
  ASSERT_TRUE(be->attention_backward(
                    f32(dq.data(), {1, s.seq, s.hq, s.d}), f32(dk.data(), {1, s.seq, s.hkv, s.d}),
                    f32(dv.data(), {1, s.seq, s.hkv, s.d}), f32(dout.data(), {1, s.seq, s.hq, s.d}),
                    f32(q.data(), {1, s.seq, s.hq, s.d}), f32(k.data(), {1, s.seq, s.hkv, s.d}),
                    f32(v.data(), {1, s.seq, s.hkv, s.d}), f32(out.data(), {1, s.seq, s.hq, s.d}),
                    f32(lse.data(), {1, s.hq, s.seq}), 0)
                  .ok());
  double float_sum = 0, dk_scale = 0;  // |Σ_j dk_j| of the float path, and the size of one dk row
  for (int e = 0; e < s.d; ++e) {
    double acc = 0;
    for (int j = 0; j < s.seq; ++j) acc += dk[size_t(j) * s.hkv * s.d + e];
    float_sum = std::max(float_sum, std::abs(acc));
  }
  for (float x : dk) dk_scale = std::max(dk_scale, double(std::abs(x)));
  double ours = 0;
  for (float x : db) ours = std::max(ours, double(std::abs(x)));
  EXPECT_GT(float_sum, 1e-9 * dk_scale);  // the float32 sum is noise well above...
  EXPECT_LT(ours, 1e-12 * dk_scale);      // ...what the double path leaves
}

TEST(AttentionKeyBias, RejectsBadShapes) {
  auto be = make_cpu_backend();
  std::vector<float> buf(1024);
  float* p = buf.data();
  EXPECT_EQ(be->attention_key_bias_backward(f32(p, {4, 8}), f32(p, {1, 2, 6, 8}),
                                            f32(p, {1, 2, 6, 8}), f32(p, {1, 2, 4, 8}),
                                            f32(p, {1, 2, 4, 8}), 1e4f, RopeScaling{}, 0)
                .code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->attention_key_bias_backward(f32(p, {4, 7}), f32(p, {1, 2, 4, 7}),
                                            f32(p, {1, 2, 4, 7}), f32(p, {1, 2, 4, 7}),
                                            f32(p, {1, 2, 4, 7}), 1e4f, RopeScaling{}, 0)
                .code(),
            ErrorCode::kInvalidArgument);
}

TEST(Attention, RejectsBadHeads) {
  auto be = make_cpu_backend();
  std::vector<float> buf(1024);
  float* p = buf.data();
  EXPECT_EQ(be->attention_forward(f32(p, {1, 2, 6, 8}), f32(p, {1, 6, 2}), f32(p, {1, 2, 6, 8}),
                                  f32(p, {1, 2, 4, 8}), f32(p, {1, 2, 4, 8}), 0)
                .code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->attention_forward(f32(p, {1, 2, 4, 0}), f32(p, {1, 4, 2}), f32(p, {1, 2, 4, 0}),
                                  f32(p, {1, 2, 4, 0}), f32(p, {1, 2, 4, 0}), 0)
                .code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->attention_backward(f32(p, {1, 2, 4, 8}), f32(p, {1, 2, 0, 8}), f32(p, {1, 2, 0, 8}),
                                   f32(p, {1, 2, 4, 8}), f32(p, {1, 2, 4, 8}), f32(p, {1, 2, 0, 8}),
                                   f32(p, {1, 2, 0, 8}), f32(p, {1, 2, 4, 8}), f32(p, {1, 4, 2}), 0)
                .code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace spillway::compute
