// Packed rows (compute::Positions): several examples in one row, each with positions restarting
// at 0, give each example what it gets alone in a row of its own: RoPE, attention (forward, lse and
// backward, with and without a sliding window) and the key bias's gradient.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "backend-test-util.h"
#include "compute-test-util.h"
#include "compute/backend.h"

namespace spillway::compute {
namespace {

using namespace spillway::compute::testing;

constexpr int kHq = 4, kHkv = 2, kD = 16;
constexpr float kTol = 2e-6f;  // fp32: only the order of the sums differs

// Rows of examples of these lengths, packed: [rows, seq] positions and each example's (row, start).
struct Packing {
  int rows = 0, seq = 0;
  std::vector<int32_t> positions;
  struct Example {
    int row, start, length;
  };
  std::vector<Example> examples;
  std::vector<Example> padding;  // each row's padding after its examples

  explicit Packing(const std::vector<std::vector<int>>& lengths) {
    rows = static_cast<int>(lengths.size());
    for (const auto& r : lengths) seq = std::max(seq, std::accumulate(r.begin(), r.end(), 0));
    positions.assign(static_cast<size_t>(rows) * seq, 0);
    for (int r = 0; r < rows; ++r) {
      int at = 0;
      for (int len : lengths[r]) {
        examples.push_back({r, at, len});
        for (int i = 0; i < len; ++i) positions[static_cast<size_t>(r) * seq + at + i] = i;
        at += len;
      }
      for (int i = 0; at + i < seq; ++i)  // the padding after them: an example of its own
        positions[static_cast<size_t>(r) * seq + at + i] = i;
      padding.push_back({r, at, seq - at});
    }
  }
  Positions tensor() const { return i32(positions.data(), {rows, seq}); }
};

// Rows [t0, t0 + n) of row `row` of x[rows, seq, heads, d], as a [1, n, heads, d] tensor's data.
std::vector<float> slice(const std::vector<float>& x, int seq, int heads, int row, int t0, int n) {
  const size_t w = static_cast<size_t>(heads) * kD;
  auto begin = x.begin() + static_cast<ptrdiff_t>((static_cast<size_t>(row) * seq + t0) * w);
  return std::vector<float>(begin, begin + static_cast<ptrdiff_t>(n * w));
}

// The lse rows [t0, t0 + n) of row `row` of lse[rows, hq, seq], as [1, hq, n].
std::vector<float> slice_lse(const std::vector<float>& lse, int seq, int row, int t0, int n) {
  std::vector<float> out;
  for (int h = 0; h < kHq; ++h)
    for (int t = t0; t < t0 + n; ++t)
      out.push_back(lse[(static_cast<size_t>(row) * kHq + h) * seq + t]);
  return out;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - b[i]));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return a.size() == b.size() ? num / std::max(den, 1e-30) : INFINITY;
}

struct Attention {
  std::vector<float> out, lse, dq, dk, dv;
};

// Forward and backward of q, k, v, dout [b, t, heads, kD] on `be`.
Attention run_attention(Backend& be, int b, int t, const std::vector<float>& q,
                        const std::vector<float>& k, const std::vector<float>& v,
                        const std::vector<float>& dout, AttentionParams params) {
  EXPECT_OK(set_test_workspace(be, attention_shapes(b, t, kHq, kHkv, kD)));
  Attention a;
  const size_t nq = static_cast<size_t>(b) * t * kHq * kD,
               nkv = static_cast<size_t>(b) * t * kHkv * kD;
  a.out.resize(nq), a.lse.resize(static_cast<size_t>(b) * kHq * t);
  a.dq.resize(nq), a.dk.resize(nkv), a.dv.resize(nkv);
  const Shape qs{b, t, kHq, kD}, kvs{b, t, kHkv, kD};
  EXPECT_OK(be.attention_forward(f32(a.out.data(), qs), f32(a.lse.data(), {b, kHq, t}),
                                 f32(q.data(), qs), f32(k.data(), kvs), f32(v.data(), kvs), 0,
                                 params));
  EXPECT_OK(be.attention_backward(f32(a.dq.data(), qs), f32(a.dk.data(), kvs),
                                  f32(a.dv.data(), kvs), f32(dout.data(), qs), f32(q.data(), qs),
                                  f32(k.data(), kvs), f32(v.data(), kvs), f32(a.out.data(), qs),
                                  f32(a.lse.data(), {b, kHq, t}), 0, params));
  EXPECT_OK(be.device().synchronize_stream(0));
  return a;
}

void expect_each_example_alone(const Packing& p, int window) {
  const size_t nq = static_cast<size_t>(p.rows) * p.seq * kHq * kD;
  const size_t nkv = static_cast<size_t>(p.rows) * p.seq * kHkv * kD;
  const auto q = random_floats(nq, 1), k = random_floats(nkv, 2), v = random_floats(nkv, 3),
             dout = random_floats(nq, 4);
  auto be = make_poisoned_cpu_backend();
  AttentionParams params;
  params.sliding_window = window;
  params.positions = p.tensor();
  const Attention packed = run_attention(*be, p.rows, p.seq, q, k, v, dout, params);
  for (const Packing::Example& e : p.examples) {
    SCOPED_TRACE("example at row " + std::to_string(e.row) + ", token " + std::to_string(e.start) +
                 ", length " + std::to_string(e.length) + ", window " + std::to_string(window));
    auto cut_q = [&](const std::vector<float>& x) {
      return slice(x, p.seq, kHq, e.row, e.start, e.length);
    };
    auto cut_kv = [&](const std::vector<float>& x) {
      return slice(x, p.seq, kHkv, e.row, e.start, e.length);
    };
    AttentionParams alone_params;
    alone_params.sliding_window = window;
    const Attention alone =
        run_attention(*be, 1, e.length, cut_q(q), cut_kv(k), cut_kv(v), cut_q(dout), alone_params);
    EXPECT_LT(max_rel(cut_q(packed.out), alone.out), kTol);
    EXPECT_LT(max_rel(slice_lse(packed.lse, p.seq, e.row, e.start, e.length), alone.lse), kTol);
    EXPECT_LT(max_rel(cut_q(packed.dq), alone.dq), kTol);
    EXPECT_LT(max_rel(cut_kv(packed.dk), alone.dk), kTol);
    EXPECT_LT(max_rel(cut_kv(packed.dv), alone.dv), kTol);
  }
}

// Examples of 1 token, of more than the CPU kernel's 4-row blocks and its 16-key tiles, starting
// mid-block, and a row of one example with padding after it.
const Packing kRows({{10, 1, 20, 6, 3}, {16, 21, 2}, {29}});

TEST(PackedRows, AttentionGivesEachExampleWhatItGetsAlone) {
  expect_each_example_alone(kRows, 0);
}

TEST(PackedRows, AttentionWithASlidingWindowGivesEachExampleWhatItGetsAlone) {
  expect_each_example_alone(kRows, 7);
}

TEST(PackedRows, RopeRotatesEachExampleFromPositionZero) {
  const size_t n = static_cast<size_t>(kRows.rows) * kRows.seq * kHq * kD;
  const auto x = random_floats(n, 5);
  auto be = make_poisoned_cpu_backend();
  RopeScaling scaling;
  scaling.factor = 8.0f;  // Llama-3 scaling: the angles depend on the position alone
  std::vector<float> packed = x;
  ASSERT_OK(be->rope_forward(f32(packed.data(), {kRows.rows, kRows.seq, kHq, kD}), 1e4f, scaling, 0,
                             kRows.tensor()));
  std::vector<float> back = packed;
  ASSERT_OK(be->rope_backward(f32(back.data(), {kRows.rows, kRows.seq, kHq, kD}), 1e4f, scaling, 0,
                              kRows.tensor()));
  ASSERT_OK(be->device().synchronize_stream(0));
  EXPECT_LT(max_rel(back, x), 1e-6);  // the backward is the inverse rotation
  for (const Packing::Example& e : kRows.examples) {
    std::vector<float> alone = slice(x, kRows.seq, kHq, e.row, e.start, e.length);
    ASSERT_OK(be->rope_forward(f32(alone.data(), {1, e.length, kHq, kD}), 1e4f, scaling, 0));
    ASSERT_OK(be->device().synchronize_stream(0));
    // The same table rows and the same arithmetic: the same bits.
    EXPECT_EQ(slice(packed, kRows.seq, kHq, e.row, e.start, e.length), alone)
        << "example at row " << e.row << ", token " << e.start;
  }
}

TEST(PackedRows, KeyBiasGradientIsTheSumOverTheExamplesAlone) {
  const size_t nq = static_cast<size_t>(kRows.rows) * kRows.seq * kHq * kD;
  const size_t nkv = static_cast<size_t>(kRows.rows) * kRows.seq * kHkv * kD;
  const auto q = random_floats(nq, 6), k = random_floats(nkv, 7), v = random_floats(nkv, 8);
  auto dout = random_floats(nq, 9);
  for (const Packing::Example& pad : kRows.padding)  // padding has no loss: nothing flows back
    std::fill_n(dout.begin() + (static_cast<ptrdiff_t>(pad.row) * kRows.seq + pad.start) * kHq * kD,
                static_cast<ptrdiff_t>(pad.length) * kHq * kD, 0.0f);
  auto be = make_poisoned_cpu_backend();
  ASSERT_OK(set_test_workspace(*be, attention_shapes(kRows.rows, kRows.seq, kHq, kHkv, kD)));
  std::vector<float> packed(static_cast<size_t>(kHkv) * kD, 0.0f);
  const Shape qs{kRows.rows, kRows.seq, kHq, kD}, kvs{kRows.rows, kRows.seq, kHkv, kD};
  ASSERT_OK(be->attention_key_bias_backward(
      f32(packed.data(), {kHkv, kD}), f32(dout.data(), qs), f32(q.data(), qs), f32(k.data(), kvs),
      f32(v.data(), kvs), 1e4f, RopeScaling{}, 0, kRows.tensor()));
  std::vector<float> alone(packed.size(), 0.0f);  // accumulates over the examples
  for (const Packing::Example& e : kRows.examples) {
    auto cut_q = [&](const std::vector<float>& x) {
      return slice(x, kRows.seq, kHq, e.row, e.start, e.length);
    };
    auto cut_kv = [&](const std::vector<float>& x) {
      return slice(x, kRows.seq, kHkv, e.row, e.start, e.length);
    };
    const auto eq = cut_q(q), edo = cut_q(dout), ek = cut_kv(k), ev = cut_kv(v);
    ASSERT_OK(set_test_workspace(*be, attention_shapes(1, e.length, kHq, kHkv, kD)));
    ASSERT_OK(be->attention_key_bias_backward(
        f32(alone.data(), {kHkv, kD}), f32(edo.data(), {1, e.length, kHq, kD}),
        f32(eq.data(), {1, e.length, kHq, kD}), f32(ek.data(), {1, e.length, kHkv, kD}),
        f32(ev.data(), {1, e.length, kHkv, kD}), 1e4f, RopeScaling{}, 0));
    ASSERT_OK(be->device().synchronize_stream(0));
  }
  EXPECT_LT(max_rel(packed, alone), 1e-6);
}

// The bounds the CUDA backend plans cuDNN's ragged sequences by: the examples, padding included,
// counted across rows, and the longest; a row's first token starts an example whatever its
// position, so examples never run across rows.
TEST(PackedRows, BoundsCountTheExamplesAndTheLongest) {
  const Packing p({{5, 1, 9}, {3, 3}, {15}});  // seq 15: row 1 ends in 9 tokens of padding
  EXPECT_EQ(packed_bounds(p.positions, p.seq), (PackedBounds{7, 15}));
  const Packing two({{4, 4}, {2, 2, 2, 2}});
  EXPECT_EQ(packed_bounds(two.positions, two.seq), (PackedBounds{6, 4}));
  // A row that goes on counting from the row before still starts an example.
  const std::vector<int32_t> cont = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(packed_bounds(cont, 4), (PackedBounds{2, 4}));
  EXPECT_EQ(packed_bounds(cont, 8), (PackedBounds{1, 8}));
  const std::vector<int32_t> ones(6, 0);  // examples of one token
  EXPECT_EQ(packed_bounds(ones, 3), (PackedBounds{6, 1}));
  EXPECT_EQ(packed_bounds({}, 4), PackedBounds{});
  EXPECT_FALSE(PackedBounds{}.known());
  EXPECT_TRUE((PackedBounds{1, 1}.known()));
}

TEST(PackedRows, PositionsOfAnotherShapeAreRefused) {
  auto be = make_poisoned_cpu_backend();
  std::vector<float> x(static_cast<size_t>(2) * 8 * kHq * kD);
  std::vector<int32_t> pos(8, 0);
  const Status s = be->rope_forward(f32(x.data(), {2, 8, kHq, kD}), 1e4f, RopeScaling{}, 0,
                                    i32(pos.data(), {1, 8}));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("positions"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace spillway::compute
