// Every op of the Backend interface on the CUDA backend against the CPU backend (ggml's
// test-backend-ops): random, non-zero inputs rounded to bf16 and given to both, so the comparison
// measures the op (its bf16 outputs and its order of summation), not the rounding of its inputs.
// Tolerances are relative L2 errors: ~1e-2 for bf16 outputs (GEMMs, norms, elementwise), 2e-2 where
// a bf16 intermediate feeds a long sum (attention backward, the LM head's dW from bf16 dlogits, the
// key-bias gradient), tighter for fp32 outputs of identical bf16 inputs. Each op also runs twice on
// the GPU and must give the same bits (determinism). Shapes: tiny (the golden models' odd sizes,
// head_dim 8 to 64, GQA and MHA; Gemma 3's head_dim 256) and the llama-7B layer at sequence 2048.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "compute/backend-loader.h"
#include "compute/backend.h"
#include "compute/cpu/adamw.h"
#include "compute/cuda-workspace.h"
#include "core/dtype.h"
#include "engine/compute/adamw-test-util.h"
#include "engine/compute/compute-test-util.h"
#include "gpu-test-util.h"
#include "train/adamw.h"

namespace spillway::compute {
namespace {

using gpu_testing::bf16_rounded;
using gpu_testing::rel_l2;
using gpu_testing::same_bits;
using gpu_testing::Side;

struct Shape {
  const char* name;
  int batch, seq, hidden, heads, kv_heads, head_dim, intermediate, vocab, chunk;
  float theta;
  int tokens() const { return batch * seq; }
  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
  OpShapes op_shapes() const {
    OpShapes s;
    s.tokens = tokens();
    s.batch = batch;
    s.seq = seq;
    s.hidden = hidden;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.head_dim = head_dim;
    s.intermediate = intermediate;
    s.vocab = vocab;
    s.lm_head_chunk = chunk;
    return s;
  }
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.name;
}

// The golden models' shapes (stories260K: d 64, head_dim 8, FFN 172; qwen2-tiny: head_dim 16, GQA
// 6/2; llama-mha-tiny: MHA, head_dim 32), one with head_dim 64, and the llama-7B layer with GQA.
const Shape kShapes[] = {
    {"d64_hd8_gqa", 2, 37, 64, 8, 4, 8, 172, 512, 37, 10000.0f},
    {"d96_hd16_gqa", 3, 29, 96, 6, 2, 16, 172, 300, 16, 1e6f},
    {"d128_hd32_mha", 1, 64, 128, 4, 4, 32, 172, 1000, 64, 5e5f},
    {"d128_hd64_gqa", 2, 100, 128, 4, 2, 64, 344, 777, 50, 10000.0f},
    {"d64_hd256_gqa", 2, 45, 64, 2, 1, 256, 128, 300, 37, 10000.0f},  // gemma3-tiny's heads
    {"llama7b_s2048", 1, 2048, 4096, 32, 8, 128, 11008, 32000, 1024, 10000.0f},
};

// bf16 values in [-scale, scale], none near zero.
std::vector<float> input(size_t n, uint32_t seed, float scale = 1.0f) {
  return bf16_rounded(testing::random_floats(n, seed, -scale, scale));
}

// The initial contents of an accumulated output (fp32, small next to what the ops add).
std::vector<float> accumulator(size_t n, uint32_t seed) {
  std::vector<float> v = testing::random_floats(n, seed);
  for (float& x : v) x *= 0.01f;
  return v;
}

// What an accumulating op added to `before`.
std::vector<float> delta(std::vector<float> after, const std::vector<float>& before) {
  for (size_t i = 0; i < after.size() && i < before.size(); ++i) after[i] -= before[i];
  return after;
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

using Outputs = std::map<std::string, std::vector<float>>;
using OpRun = std::function<Outputs(Side&)>;

// Attention's forward on `cpu` (the CPU, or a GPU as a reference for another): the outputs the
// backward reads, out rounded to bf16 as the GPU's forward stores it, and lse. q, k, v as `input`
// makes them, [B, T, heads, head_dim].
void cpu_attention_forward(Backend& cpu, const Shape& s, const std::vector<float>& q,
                           const std::vector<float>& k, const std::vector<float>& v,
                           const std::vector<int32_t>& positions, const AttentionParams& params,
                           std::vector<float>* out_ref, std::vector<float>* lse_ref) {
  const int B = s.batch, T = s.seq, hq = s.heads, hkv = s.kv_heads, hd = s.head_dim;
  const size_t nq = size_t(B) * T * hq * hd, nl = size_t(B) * hq * T;
  Side side(cpu, s.op_shapes());
  AttentionParams p = params;
  if (!positions.empty()) p.positions = i32(side.i32(positions), {B, T});
  void* out = side.act_zeros(nq);
  float* lse = side.f32_zeros(nl);
  EXPECT_OK(cpu.attention_forward(
      Tensor(out, cpu.act_dtype(), {B, T, hq, hd}), Tensor(lse, DType::kF32, {B, hq, T}),
      ConstTensor(side.act(q), cpu.act_dtype(), {B, T, hq, hd}),
      ConstTensor(side.act(k), cpu.act_dtype(), {B, T, hkv, hd}),
      ConstTensor(side.act(v), cpu.act_dtype(), {B, T, hkv, hd}), 0, p));
  *out_ref = bf16_rounded(side.get_act(out, nq));
  *lse_ref = side.get_f32(lse, nl);
}

// Attention's forward (o[prefix + "forward.out"], "forward.lse") and backward from the reference's
// saved outputs ("backward.dq", "backward.dk", "backward.dv") on `side`, with `params` (whose
// positions, if any, are in side's memory).
void attention_outputs(Side& side, const Shape& s, const std::vector<float>& q,
                       const std::vector<float>& k, const std::vector<float>& v,
                       const std::vector<float>& dout, const std::vector<float>& out_ref,
                       const std::vector<float>& lse_ref, const AttentionParams& params,
                       const std::string& prefix, Outputs* o) {
  Backend& be = side.be();
  const DType act = be.act_dtype();
  const int B = s.batch, T = s.seq, hq = s.heads, hkv = s.kv_heads, hd = s.head_dim;
  const size_t nq = size_t(B) * T * hq * hd, nkv = size_t(B) * T * hkv * hd,
               nl = size_t(B) * hq * T;
  void* qd = side.act(q);
  void* kd = side.act(k);
  void* vd = side.act(v);
  void* out = side.act_zeros(nq);
  float* lse = side.f32_zeros(nl);
  EXPECT_OK(be.attention_forward(
      Tensor(out, act, {B, T, hq, hd}), Tensor(lse, DType::kF32, {B, hq, T}),
      ConstTensor(qd, act, {B, T, hq, hd}), ConstTensor(kd, act, {B, T, hkv, hd}),
      ConstTensor(vd, act, {B, T, hkv, hd}), 0, params));
  (*o)[prefix + "forward.out"] = side.get_act(out, nq);
  (*o)[prefix + "forward.lse"] = side.get_f32(lse, nl);
  void* dq = side.act_zeros(nq);
  void* dk = side.act_zeros(nkv);
  void* dv = side.act_zeros(nkv);
  EXPECT_OK(be.attention_backward(
      Tensor(dq, act, {B, T, hq, hd}), Tensor(dk, act, {B, T, hkv, hd}),
      Tensor(dv, act, {B, T, hkv, hd}), ConstTensor(side.act(dout), act, {B, T, hq, hd}),
      ConstTensor(qd, act, {B, T, hq, hd}), ConstTensor(kd, act, {B, T, hkv, hd}),
      ConstTensor(vd, act, {B, T, hkv, hd}), ConstTensor(side.act(out_ref), act, {B, T, hq, hd}),
      ConstTensor(side.f32(lse_ref), DType::kF32, {B, hq, T}), 0, params));
  (*o)[prefix + "backward.dq"] = side.get_act(dq, nq);
  (*o)[prefix + "backward.dk"] = side.get_act(dk, nkv);
  (*o)[prefix + "backward.dv"] = side.get_act(dv, nkv);
}

// The attention outputs' tolerances against the CPU, under `prefix`.
std::map<std::string, double> attention_tolerances(const std::string& prefix) {
  return {{prefix + "forward.out", 1e-2},
          {prefix + "forward.lse", 1e-3},
          {prefix + "backward.dq", 2e-2},
          {prefix + "backward.dk", 2e-2},
          {prefix + "backward.dv", 2e-2}};
}

class CudaOps : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    auto cuda = make_backend({.kind = "cuda"});
    if (!cuda.ok()) GTEST_SKIP() << "no usable CUDA backend: " << cuda.status().to_string();
    cuda_ = std::move(cuda->backend);
    cpu_ = make_cpu_backend();
  }

  // Runs `run` on the CPU and twice on CUDA (fresh buffers each time): every output of CUDA
  // within tol[output] of the CPU's, and the two CUDA runs bit for bit the same.
  void compare(const char* op, const OpRun& run, const std::map<std::string, double>& tol) {
    const OpShapes shapes = GetParam().op_shapes();
    Outputs ref, a, b;
    {
      Side s(*cpu_, shapes);
      ref = run(s);
    }
    {
      Side s(*cuda_, shapes);
      a = run(s);
    }
    {
      Side s(*cuda_, shapes);
      b = run(s);
    }
    for (const auto& [key, want] : ref) {
      auto t = tol.find(key);
      ASSERT_NE(t, tol.end()) << "no tolerance for " << op << "." << key;
      const double err = rel_l2(a[key], want);
      EXPECT_GT(norm(want), 0.0) << op << "." << key << ": the reference is all zero";
      EXPECT_LT(err, t->second) << op << "." << key;
      EXPECT_TRUE(same_bits(a[key], b[key])) << op << "." << key << ": two identical runs differ";
      std::printf("[%s] %s.%s: rel L2 %.2e (tolerance %.0e)\n", GetParam().name, op, key.c_str(),
                  err, t->second);
    }
  }

  std::unique_ptr<Backend> cuda_, cpu_;
};

TEST_P(CudaOps, Embedding) {
  const Shape& s = GetParam();
  const int n = s.tokens(), d = s.hidden, v = s.vocab;
  const auto table = input(size_t(v) * d, 1);
  const auto dout = input(size_t(n) * d, 2);
  const auto dtable0 = accumulator(size_t(v) * d, 3);
  std::vector<int32_t> ids(n);
  // Spread over the table, with every fifth token the same id (duplicates sum in token order).
  for (int i = 0; i < n; ++i) ids[i] = i % 5 == 0 ? 7 % v : int32_t((uint64_t(i) * 7919 + 13) % v);
  compare(
      "embedding",
      [&](Side& side) {
        Backend& be = side.be();
        Outputs o;
        int32_t* idd = side.i32(ids);
        void* out = side.act_zeros(size_t(n) * d);
        EXPECT_OK(be.embedding_forward(Tensor(out, be.act_dtype(), {n, d}), i32(idd, {n}),
                                       ConstTensor(side.act(table), be.act_dtype(), {v, d}), 0));
        o["forward.out"] = side.get_act(out, size_t(n) * d);
        float* dt = side.f32(dtable0);
        EXPECT_OK(be.embedding_backward(Tensor(dt, DType::kF32, {v, d}), i32(idd, {n}),
                                        ConstTensor(side.act(dout), be.act_dtype(), {n, d}), 0));
        o["backward.dtable"] = delta(side.get_f32(dt, size_t(v) * d), dtable0);
        return o;
      },
      {{"forward.out", 1e-6}, {"backward.dtable", 1e-5}});
}

TEST_P(CudaOps, RmsNorm) {
  const Shape& s = GetParam();
  const int n = s.tokens(), d = s.hidden;
  const float eps = 1e-5f;
  const auto x = input(size_t(n) * d, 10), w = input(d, 11), r = input(size_t(n) * d, 12);
  const auto dout = input(size_t(n) * d, 13), dx0 = input(size_t(n) * d, 14);
  const auto dw0 = accumulator(d, 15);
  std::vector<float> rstd(n);  // of x, in double: the backward's input on both sides
  for (int i = 0; i < n; ++i) {
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += double(x[size_t(i) * d + j]) * x[size_t(i) * d + j];
    rstd[i] = float(1.0 / std::sqrt(ss / d + eps));
  }
  compare("rmsnorm",
          [&](Side& side) {
            Backend& be = side.be();
            const size_t nd = size_t(n) * d;
            Outputs o;
            void* xd = side.act(x);
            void* wd = side.act(w);
            void* out = side.act_zeros(nd);
            float* rs = side.f32_zeros(n);
            EXPECT_OK(be.rmsnorm_forward(Tensor(out, be.act_dtype(), {n, d}),
                                         Tensor(rs, DType::kF32, {n}),
                                         ConstTensor(xd, be.act_dtype(), {n, d}),
                                         ConstTensor(wd, be.act_dtype(), {d}), eps, 0));
            o["forward.out"] = side.get_act(out, nd);
            o["forward.rstd"] = side.get_f32(rs, n);

            void* sum = side.act_zeros(nd);
            EXPECT_OK(be.residual_rmsnorm_forward(
                Tensor(sum, be.act_dtype(), {n, d}), Tensor(out, be.act_dtype(), {n, d}),
                Tensor(rs, DType::kF32, {n}), ConstTensor(xd, be.act_dtype(), {n, d}),
                ConstTensor(side.act(r), be.act_dtype(), {n, d}),
                ConstTensor(wd, be.act_dtype(), {d}), eps, 0));
            o["residual.sum"] = side.get_act(sum, nd);
            o["residual.out"] = side.get_act(out, nd);
            o["residual.rstd"] = side.get_f32(rs, n);
            void* xa = side.act(x);  // sum aliasing x, as the trainer's residual stream does
            EXPECT_OK(be.residual_rmsnorm_forward(
                Tensor(xa, be.act_dtype(), {n, d}), Tensor(out, be.act_dtype(), {n, d}),
                Tensor(rs, DType::kF32, {n}), ConstTensor(xa, be.act_dtype(), {n, d}),
                ConstTensor(side.act(r), be.act_dtype(), {n, d}),
                ConstTensor(wd, be.act_dtype(), {d}), eps, 0));
            o["residual_alias.sum"] = side.get_act(xa, nd);
            o["residual_alias.out"] = side.get_act(out, nd);

            float* rsd = side.f32(rstd);
            void* dx = side.act_zeros(nd);
            float* dw = side.f32(dw0);
            EXPECT_OK(be.rmsnorm_backward(
                Tensor(dx, be.act_dtype(), {n, d}), Tensor(dw, DType::kF32, {d}),
                ConstTensor(side.act(dout), be.act_dtype(), {n, d}),
                ConstTensor(xd, be.act_dtype(), {n, d}), ConstTensor(wd, be.act_dtype(), {d}),
                ConstTensor(rsd, DType::kF32, {n}), false, 0));
            o["backward.dx"] = side.get_act(dx, nd);
            o["backward.dw"] = delta(side.get_f32(dw, d), dw0);
            void* dxa = side.act(dx0);
            EXPECT_OK(be.rmsnorm_backward(
                Tensor(dxa, be.act_dtype(), {n, d}), Tensor(side.f32(dw0), DType::kF32, {d}),
                ConstTensor(side.act(dout), be.act_dtype(), {n, d}),
                ConstTensor(xd, be.act_dtype(), {n, d}), ConstTensor(wd, be.act_dtype(), {d}),
                ConstTensor(rsd, DType::kF32, {n}), true, 0));
            o["backward_accumulate.dx"] = side.get_act(dxa, nd);
            return o;
          },
          {{"forward.out", 1e-2},
           {"forward.rstd", 1e-4},
           {"residual.sum", 1e-2},
           {"residual.out", 1e-2},
           {"residual.rstd", 1e-2},
           {"residual_alias.sum", 1e-2},
           {"residual_alias.out", 1e-2},
           {"backward.dx", 1e-2},
           {"backward.dw", 1e-2},
           {"backward_accumulate.dx", 1e-2}});
}

// The MLP's up projection (hidden -> intermediate, no bias) and the query projection with a bias.
TEST_P(CudaOps, Linear) {
  const Shape& s = GetParam();
  const int n = s.tokens();
  struct Case {
    const char* name;
    int in, out;
    bool bias;
  };
  for (const Case& c :
       {Case{"up", s.hidden, s.intermediate, false}, Case{"q_bias", s.hidden, s.q_dim(), true}}) {
    SCOPED_TRACE(c.name);
    const int in = c.in, out = c.out;
    const auto x = input(size_t(n) * in, 20),
               w = input(size_t(out) * in, 21, 1.0f / std::sqrt(float(in)));
    const auto b = input(out, 22), dy = input(size_t(n) * out, 23), dx0 = input(size_t(n) * in, 24);
    const auto dw0 = accumulator(size_t(out) * in, 25);
    const auto db0 = accumulator(out, 26);
    const std::string p = std::string(c.name) + ".";
    compare("linear",
            [&](Side& side) {
              Backend& be = side.be();
              Outputs o;
              void* xd = side.act(x);
              void* wd = side.act(w);
              void* dyd = side.act(dy);
              void* y = side.act_zeros(size_t(n) * out);
              EXPECT_OK(be.linear_forward(
                  Tensor(y, be.act_dtype(), {n, out}), ConstTensor(xd, be.act_dtype(), {n, in}),
                  ConstTensor(wd, be.act_dtype(), {out, in}),
                  ConstTensor(c.bias ? side.act(b) : nullptr, be.act_dtype(), {out}), 0));
              o[p + "forward.y"] = side.get_act(y, size_t(n) * out);
              void* dx = side.act_zeros(size_t(n) * in);
              float* dw = side.f32(dw0);
              float* db = c.bias ? side.f32(db0) : nullptr;
              EXPECT_OK(be.linear_backward(
                  Tensor(dx, be.act_dtype(), {n, in}), Tensor(dw, DType::kF32, {out, in}),
                  Tensor(db, DType::kF32, {out}), ConstTensor(dyd, be.act_dtype(), {n, out}),
                  ConstTensor(xd, be.act_dtype(), {n, in}),
                  ConstTensor(wd, be.act_dtype(), {out, in}), false, 0));
              o[p + "backward.dx"] = side.get_act(dx, size_t(n) * in);
              o[p + "backward.dw"] = delta(side.get_f32(dw, size_t(out) * in), dw0);
              if (c.bias) o[p + "backward.db"] = delta(side.get_f32(db, out), db0);
              void* dxa = side.act(dx0);
              EXPECT_OK(be.linear_backward(Tensor(dxa, be.act_dtype(), {n, in}),
                                           Tensor(side.f32(dw0), DType::kF32, {out, in}),
                                           Tensor(nullptr, DType::kF32, {out}),
                                           ConstTensor(dyd, be.act_dtype(), {n, out}),
                                           ConstTensor(xd, be.act_dtype(), {n, in}),
                                           ConstTensor(wd, be.act_dtype(), {out, in}), true, 0));
              o[p + "backward_accumulate.dx"] = side.get_act(dxa, size_t(n) * in);
              float* dw_only = side.f32(dw0);
              EXPECT_OK(be.linear_backward(
                  Tensor(nullptr, be.act_dtype(), {n, in}), Tensor(dw_only, DType::kF32, {out, in}),
                  Tensor(nullptr, DType::kF32, {out}), ConstTensor(dyd, be.act_dtype(), {n, out}),
                  ConstTensor(xd, be.act_dtype(), {n, in}),
                  ConstTensor(wd, be.act_dtype(), {out, in}), false, 0));
              o[p + "backward_no_dx.dw"] = delta(side.get_f32(dw_only, size_t(out) * in), dw0);
              return o;
            },
            {{p + "forward.y", 1e-2},
             {p + "backward.dx", 1e-2},
             {p + "backward.dw", 1e-3},
             {p + "backward.db", 1e-3},
             {p + "backward_accumulate.dx", 1e-2},
             {p + "backward_no_dx.dw", 1e-3}});
  }
}

TEST_P(CudaOps, Rope) {
  const Shape& s = GetParam();
  const int B = s.batch, T = s.seq;
  const auto q = input(size_t(B) * T * s.q_dim(), 30), k = input(size_t(B) * T * s.kv_dim(), 31);
  // Llama-3 scaling with an original context short enough that all three frequency bands occur.
  RopeScaling llama3{8.0f, 1.0f, 4.0f, T >= 1024 ? 8192 : 100};
  // LongRoPE (Phi-3) with partial rotation (Phi-4-mini's 0.75 where head_dim / 4 pairs allow it,
  // else the whole head) and its attention factor.
  RopeScaling longrope;
  longrope.rotary_dim = s.head_dim % 8 == 0 ? s.head_dim * 3 / 4 : s.head_dim;
  for (int i = 0; i < longrope.rotary_dim / 2; ++i)
    longrope.ext_factors.push_back(1.0f + 0.37f * i);
  longrope.attention_factor = 1.1902381f;
  compare("rope",
          [&](Side& side) {
            Backend& be = side.be();
            Outputs o;
            using Named = std::pair<const char*, RopeScaling>;
            for (const auto& [name, sc] : {Named{"plain", RopeScaling{}}, Named{"llama3", llama3},
                                           Named{"longrope", longrope}}) {
              const std::string p = std::string(name) + ".";
              void* qd = side.act(q);
              void* kd = side.act(k);
              EXPECT_OK(be.rope_forward(Tensor(qd, be.act_dtype(), {B, T, s.heads, s.head_dim}),
                                        s.theta, sc, 0));
              EXPECT_OK(be.rope_forward(Tensor(kd, be.act_dtype(), {B, T, s.kv_heads, s.head_dim}),
                                        s.theta, sc, 0));
              o[p + "forward.q"] = side.get_act(qd, q.size());
              o[p + "forward.k"] = side.get_act(kd, k.size());
              void* dq = side.act(q);
              EXPECT_OK(be.rope_backward(Tensor(dq, be.act_dtype(), {B, T, s.heads, s.head_dim}),
                                         s.theta, sc, 0));
              o[p + "backward.dq"] = side.get_act(dq, q.size());
            }
            return o;
          },
          {{"plain.forward.q", 1e-2},
           {"plain.forward.k", 1e-2},
           {"plain.backward.dq", 1e-2},
           {"llama3.forward.q", 1e-2},
           {"llama3.forward.k", 1e-2},
           {"llama3.backward.dq", 1e-2},
           {"longrope.forward.q", 1e-2},
           {"longrope.forward.k", 1e-2},
           {"longrope.backward.dq", 1e-2}});
}

TEST_P(CudaOps, Attention) {
  const Shape& s = GetParam();
  const size_t nq = size_t(s.batch) * s.seq * s.heads * s.head_dim,
               nkv = size_t(s.batch) * s.seq * s.kv_heads * s.head_dim;
  const auto q = input(nq, 40), k = input(nkv, 41), v = input(nkv, 42), dout = input(nq, 43);
  std::vector<float> out_ref, lse_ref;
  cpu_attention_forward(*cpu_, s, q, k, v, {}, {}, &out_ref, &lse_ref);
  compare(
      "attention",
      [&](Side& side) {
        Outputs o;
        attention_outputs(side, s, q, k, v, dout, out_ref, lse_ref, {}, "", &o);
        return o;
      },
      attention_tolerances(""));
}

// The qwen2 key bias's gradient, against the CPU's double-precision one (cpu/attention-key-bias.h):
// a near-total cancellation, so this is the op where summation order shows most.
TEST_P(CudaOps, AttentionKeyBias) {
  const Shape& s = GetParam();
  const int B = s.batch, T = s.seq, hq = s.heads, hkv = s.kv_heads, hd = s.head_dim;
  const size_t nq = size_t(B) * T * hq * hd, nkv = size_t(B) * T * hkv * hd;
  const auto q = input(nq, 50), k = input(nkv, 51), v = input(nkv, 52), dout = input(nq, 53);
  const auto db0 = accumulator(size_t(hkv) * hd, 54);
  compare(
      "attention_key_bias",
      [&](Side& side) {
        Outputs o;
        float* db = side.f32(db0);
        EXPECT_OK(side.be().attention_key_bias_backward(
            f32(db, {hkv, hd}), ConstTensor(side.act(dout), side.be().act_dtype(), {B, T, hq, hd}),
            ConstTensor(side.act(q), side.be().act_dtype(), {B, T, hq, hd}),
            ConstTensor(side.act(k), side.be().act_dtype(), {B, T, hkv, hd}),
            ConstTensor(side.act(v), side.be().act_dtype(), {B, T, hkv, hd}), s.theta,
            RopeScaling{}, 0));
        o["db"] = delta(side.get_f32(db, db0.size()), db0);
        return o;
      },
      {{"db", 2e-2}});
}

TEST_P(CudaOps, SwiGluAndAdd) {
  const Shape& s = GetParam();
  const int n = s.tokens(), f = s.intermediate;
  const size_t nf = size_t(n) * f;
  const auto gate = input(nf, 60, 4.0f), up = input(nf, 61), dout = input(nf, 62),
             y0 = input(nf, 63);
  compare(
      "elementwise",
      [&](Side& side) {
        Backend& be = side.be();
        Outputs o;
        void* g = side.act(gate);
        void* u = side.act(up);
        void* out = side.act_zeros(nf);
        EXPECT_OK(be.swiglu_forward(Tensor(out, be.act_dtype(), {n, f}),
                                    ConstTensor(g, be.act_dtype(), {n, f}),
                                    ConstTensor(u, be.act_dtype(), {n, f}), 0));
        o["swiglu_forward.out"] = side.get_act(out, nf);
        void* dg = side.act_zeros(nf);
        void* du = side.act_zeros(nf);
        EXPECT_OK(be.swiglu_backward(
            Tensor(dg, be.act_dtype(), {n, f}), Tensor(du, be.act_dtype(), {n, f}),
            ConstTensor(side.act(dout), be.act_dtype(), {n, f}),
            ConstTensor(g, be.act_dtype(), {n, f}), ConstTensor(u, be.act_dtype(), {n, f}), 0));
        o["swiglu_backward.dgate"] = side.get_act(dg, nf);
        o["swiglu_backward.dup"] = side.get_act(du, nf);
        void* y = side.act(y0);
        EXPECT_OK(be.add_inplace(Tensor(y, be.act_dtype(), {static_cast<int64_t>(nf)}),
                                 ConstTensor(u, be.act_dtype(), {static_cast<int64_t>(nf)}), 0));
        o["add_inplace.y"] = side.get_act(y, nf);
        return o;
      },
      {{"swiglu_forward.out", 1e-2},
       {"swiglu_backward.dgate", 1e-2},
       {"swiglu_backward.dup", 1e-2},
       {"add_inplace.y", 1e-2}});
}

TEST_P(CudaOps, LmHeadLoss) {
  const Shape& s = GetParam();
  const int n = s.tokens(), d = s.hidden, v = s.vocab;
  const auto x = input(size_t(n) * d, 70), w = input(size_t(v) * d, 71, 4.0f / std::sqrt(float(d)));
  const auto dw0 = accumulator(size_t(v) * d, 72);
  std::vector<int32_t> labels(n);
  int targets = 0;
  for (int i = 0; i < n; ++i) {
    labels[i] = i % 7 == 3 ? -100 : int32_t((uint64_t(i) * 104729 + 17) % v);
    targets += labels[i] != -100;
  }
  const float scale = 1.0f / targets;
  const bool with_logits =
      size_t(n) * v <= (size_t(1) << 24);  // the 7B head's would be 262 MB a side
  std::map<std::string, double> tol = {
      {"losses", 1e-3}, {"dx", 1e-2}, {"dw", 2e-2}, {"eval.losses", 1e-3}};
  if (with_logits) tol["logits"] = 1e-3;
  compare(
      "lm_head_loss",
      [&](Side& side) {
        Backend& be = side.be();
        Outputs o;
        void* xd = side.act(x);
        void* wd = side.act(w);
        int32_t* ld = side.i32(labels);
        float* losses = side.f32_zeros(n);
        void* dx = side.act_zeros(size_t(n) * d);
        float* dw = side.f32(dw0);
        float* logits = with_logits ? side.f32_zeros(size_t(n) * v) : nullptr;
        EXPECT_OK(be.lm_head_loss(
            Tensor(losses, DType::kF32, {n}), Tensor(dx, be.act_dtype(), {n, d}),
            Tensor(dw, DType::kF32, {v, d}), ConstTensor(xd, be.act_dtype(), {n, d}),
            ConstTensor(wd, be.act_dtype(), {v, d}), i32(ld, {n}), scale,
            Tensor(logits, DType::kF32, {n, v}), s.chunk, 0));
        o["losses"] = side.get_f32(losses, n);
        o["dx"] = side.get_act(dx, size_t(n) * d);
        o["dw"] = delta(side.get_f32(dw, size_t(v) * d), dw0);
        if (with_logits) o["logits"] = side.get_f32(logits, size_t(n) * v);
        float* eval = side.f32_zeros(n);
        EXPECT_OK(be.lm_head_loss(
            Tensor(eval, DType::kF32, {n}), Tensor(nullptr, be.act_dtype(), {n, d}),
            Tensor(nullptr, DType::kF32, {v, d}), ConstTensor(xd, be.act_dtype(), {n, d}),
            ConstTensor(wd, be.act_dtype(), {v, d}), i32(ld, {n}), 0.0f,
            Tensor(nullptr, DType::kF32, {n, v}), s.chunk, 0));
        o["eval.losses"] = side.get_f32(eval, n);
        return o;
      },
      tol);
}

// Gemma 3's ops: RMSNorm with the (1 + w) weight, GeGLU with tanh GELU, the scaled embedding, and
// attention with query_pre_attn_scalar's scale and a sliding window — one shorter than a tile
// (7), one that cuts across tiles (40: the generic kernels' 32-row tiles and the flash kernels'
// 64-row ones), and none.
TEST_P(CudaOps, GemmaOps) {
  const Shape& s = GetParam();
  const int n = s.tokens(), d = s.hidden, f = s.intermediate, v = s.vocab;
  const float eps = 1e-6f, offset = 1.0f;
  const auto x = input(size_t(n) * d, 80), w = input(d, 81, 0.2f), r = input(size_t(n) * d, 82);
  const auto dout = input(size_t(n) * d, 83);
  const auto dw0 = accumulator(d, 84);
  std::vector<float> rstd(n);
  for (int i = 0; i < n; ++i) {
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += double(x[size_t(i) * d + j]) * x[size_t(i) * d + j];
    rstd[i] = float(1.0 / std::sqrt(ss / d + eps));
  }
  const auto gate = input(size_t(n) * f, 85, 4.0f), up = input(size_t(n) * f, 86),
             gdout = input(size_t(n) * f, 87);
  const auto table = input(size_t(v) * d, 88), edout = input(size_t(n) * d, 89);
  const auto dtable0 = accumulator(size_t(v) * d, 90);
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = int32_t((uint64_t(i) * 7919 + 13) % v);
  const float embed_scale = bf16_rounded({std::sqrt(float(d))})[0];  // cast to bf16 as Gemma's
  compare(
      "gemma",
      [&](Side& side) {
        Backend& be = side.be();
        const DType act = be.act_dtype();
        const size_t nd = size_t(n) * d, nf = size_t(n) * f;
        Outputs o;
        void* xd = side.act(x);
        void* wd = side.act(w);
        void* out = side.act_zeros(nd);
        float* rs = side.f32_zeros(n);
        EXPECT_OK(be.rmsnorm_forward(Tensor(out, act, {n, d}), Tensor(rs, DType::kF32, {n}),
                                     ConstTensor(xd, act, {n, d}), ConstTensor(wd, act, {d}), eps,
                                     0, offset));
        o["rmsnorm_offset.out"] = side.get_act(out, nd);
        void* sum = side.act_zeros(nd);
        EXPECT_OK(be.residual_rmsnorm_forward(
            Tensor(sum, act, {n, d}), Tensor(out, act, {n, d}), Tensor(rs, DType::kF32, {n}),
            ConstTensor(xd, act, {n, d}), ConstTensor(side.act(r), act, {n, d}),
            ConstTensor(wd, act, {d}), eps, 0, offset));
        o["residual_rmsnorm_offset.out"] = side.get_act(out, nd);
        void* dx = side.act_zeros(nd);
        float* dw = side.f32(dw0);
        EXPECT_OK(be.rmsnorm_backward(Tensor(dx, act, {n, d}), Tensor(dw, DType::kF32, {d}),
                                      ConstTensor(side.act(dout), act, {n, d}),
                                      ConstTensor(xd, act, {n, d}), ConstTensor(wd, act, {d}),
                                      ConstTensor(side.f32(rstd), DType::kF32, {n}), false, 0,
                                      offset));
        o["rmsnorm_offset_backward.dx"] = side.get_act(dx, nd);
        o["rmsnorm_offset_backward.dw"] = delta(side.get_f32(dw, d), dw0);

        void* g = side.act(gate);
        void* u = side.act(up);
        void* a = side.act_zeros(nf);
        EXPECT_OK(be.geglu_forward(Tensor(a, act, {n, f}), ConstTensor(g, act, {n, f}),
                                   ConstTensor(u, act, {n, f}), 0));
        o["geglu_forward.out"] = side.get_act(a, nf);
        void* dg = side.act_zeros(nf);
        void* du = side.act_zeros(nf);
        EXPECT_OK(be.geglu_backward(Tensor(dg, act, {n, f}), Tensor(du, act, {n, f}),
                                    ConstTensor(side.act(gdout), act, {n, f}),
                                    ConstTensor(g, act, {n, f}), ConstTensor(u, act, {n, f}), 0));
        o["geglu_backward.dgate"] = side.get_act(dg, nf);
        o["geglu_backward.dup"] = side.get_act(du, nf);

        int32_t* idd = side.i32(ids);
        void* emb = side.act_zeros(nd);
        EXPECT_OK(be.embedding_forward(Tensor(emb, act, {n, d}), i32(idd, {n}),
                                       ConstTensor(side.act(table), act, {v, d}), 0, embed_scale));
        o["embedding_scaled.out"] = side.get_act(emb, nd);
        float* dt = side.f32(dtable0);
        EXPECT_OK(be.embedding_backward(Tensor(dt, DType::kF32, {v, d}), i32(idd, {n}),
                                        ConstTensor(side.act(edout), act, {n, d}), 0, embed_scale));
        o["embedding_scaled.dtable"] = delta(side.get_f32(dt, size_t(v) * d), dtable0);
        return o;
      },
      {{"rmsnorm_offset.out", 1e-2},
       {"residual_rmsnorm_offset.out", 1e-2},
       {"rmsnorm_offset_backward.dx", 1e-2},
       {"rmsnorm_offset_backward.dw", 1e-2},
       {"geglu_forward.out", 1e-2},
       {"geglu_backward.dgate", 1e-2},
       {"geglu_backward.dup", 1e-2},
       {"embedding_scaled.out", 1e-2},
       {"embedding_scaled.dtable", 1e-5}});

  const size_t nq = size_t(s.batch) * s.seq * s.heads * s.head_dim,
               nkv = size_t(s.batch) * s.seq * s.kv_heads * s.head_dim;
  const auto q = input(nq, 91), k = input(nkv, 92), vv = input(nkv, 93), adout = input(nq, 94);
  // Windowed attention costs O(T·window) on the CPU side too; the 7B shape's unwindowed case is
  // the Attention test's.
  for (int window : s.seq >= 1024 ? std::vector<int>{7, 40} : std::vector<int>{7, 40, 0}) {
    SCOPED_TRACE("window " + std::to_string(window));
    const AttentionParams params{0.0625f, window};  // Gemma: query_pre_attn_scalar 256
    std::vector<float> out_ref, lse_ref;
    cpu_attention_forward(*cpu_, s, q, k, vv, {}, params, &out_ref, &lse_ref);
    const std::string p = "window" + std::to_string(window) + ".";
    compare(
        "attention_windowed",
        [&](Side& side) {
          Outputs o;
          attention_outputs(side, s, q, k, vv, adout, out_ref, lse_ref, params, p, &o);
          return o;
        },
        attention_tolerances(p));
  }
}

// Packed rows (compute::Positions): RoPE, attention with and without a window, and the key bias's
// gradient with each row cut into examples (one of a token, examples across the flash kernels' 64-
// row tiles, the padding after them an example of its own), against the CPU's packed ops.
TEST_P(CudaOps, PackedRows) {
  const Shape& s = GetParam();
  const int B = s.batch, T = s.seq, hq = s.heads, hkv = s.kv_heads, hd = s.head_dim;
  const size_t nq = size_t(B) * T * hq * hd, nkv = size_t(B) * T * hkv * hd;
  std::vector<int32_t> pos(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    // Examples of T/3, 1, T/4 + 3 tokens (when they fit), then padding: restarts at those cuts.
    const std::vector<int> cuts = {T / 3, T / 3 + 1, T / 3 + 1 + T / 4 + 3};
    int start = 0;
    for (int t = 0; t < T; ++t) {
      for (int c : cuts)
        if (t == c + b) start = t;  // each row cut a token later
      pos[size_t(b) * T + t] = t - start;
    }
  }
  const auto q = input(nq, 95), k = input(nkv, 96), vv = input(nkv, 97), adout = input(nq, 98);
  const auto db0 = accumulator(size_t(hkv) * hd, 99);
  for (int window : {0, 40}) {
    SCOPED_TRACE("window " + std::to_string(window));
    std::vector<float> out_ref, lse_ref;
    cpu_attention_forward(*cpu_, s, q, k, vv, pos, {0.0f, window}, &out_ref, &lse_ref);
    const std::string p = "window" + std::to_string(window) + ".";
    std::map<std::string, double> tol = attention_tolerances(p);
    tol[p + "rope.q"] = tol[p + "rope.backward.q"] = 1e-2;
    const bool key_bias = window == 0;
    if (key_bias) tol[p + "key_bias.db"] = 2e-2;
    compare(
        "packed_rows",
        [&](Side& side) {
          Backend& be = side.be();
          const DType act = be.act_dtype();
          const Positions positions = i32(side.i32(pos), {B, T});
          Outputs o;
          // With the bounds the trainer passes, so cuDNN runs the packed rows where it can.
          attention_outputs(side, s, q, k, vv, adout, out_ref, lse_ref,
                            {0.0f, window, positions, packed_bounds(pos, T)}, p, &o);
          void* rq = side.act(q);
          EXPECT_OK(be.rope_forward(Tensor(rq, act, {B, T, hq, hd}), s.theta, RopeScaling{}, 0,
                                    positions));
          o[p + "rope.q"] = side.get_act(rq, nq);
          EXPECT_OK(be.rope_backward(Tensor(rq, act, {B, T, hq, hd}), s.theta, RopeScaling{}, 0,
                                     positions));
          o[p + "rope.backward.q"] = side.get_act(rq, nq);
          if (key_bias) {
            float* db = side.f32(db0);
            EXPECT_OK(be.attention_key_bias_backward(
                f32(db, {hkv, hd}), ConstTensor(side.act(adout), act, {B, T, hq, hd}),
                ConstTensor(side.act(q), act, {B, T, hq, hd}),
                ConstTensor(side.act(k), act, {B, T, hkv, hd}),
                ConstTensor(side.act(vv), act, {B, T, hkv, hd}), s.theta, RopeScaling{}, 0,
                positions));
            o[p + "key_bias.db"] = delta(side.get_f32(db, db0.size()), db0);
          }
          return o;
        },
        tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaOps, ::testing::ValuesIn(kShapes),
                         [](const auto& info) { return std::string(info.param.name); });

// cuDNN's fused attention (the CUDA backend's default where cuDNN is installed) against the
// module's own kernels (SPILLWAY_CUDNN=0), GPU against GPU, so the shapes can be a training
// step's: GQA at 2048 with a micro-batch the backward runs in chunks (cuda-workspace.h), a length
// that is no multiple of 128, Gemma's head_dim 256 with a window and its scale; the same packed
// into examples (cuDNN's ragged sequences); and sequences long enough that the backward runs in
// chunks of heads. Forward and backward agree within the bf16
// tolerances the CPU comparisons use, and cuDNN gives the same bits twice. The CudaOps tests above
// compare the default path, cuDNN where it runs, with the CPU.
TEST(CudnnAttention, MatchesTheModulesKernelsAndRepeatsItsBits) {
  auto cudnn = make_backend({.kind = "cuda"});
  if (!cudnn.ok()) GTEST_SKIP() << "no usable CUDA backend: " << cudnn.status().to_string();
  const std::string runs = cudnn->backend->device_info().attention;
  if (runs.rfind("cuDNN", 0) != 0) GTEST_SKIP() << "attention does not run on cuDNN: " << runs;
  ::setenv("SPILLWAY_CUDNN", "0", 1);
  auto own = make_backend({.kind = "cuda"});
  ::unsetenv("SPILLWAY_CUDNN");
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  ASSERT_EQ(own->backend->device_info().attention.rfind("own kernels", 0), 0u);
  std::printf("cuDNN backend: %s; the other: %s\n", runs.c_str(),
              own->backend->device_info().attention.c_str());

  struct Case {
    Shape shape;
    AttentionParams params;
    // Packed rows: each row cut into examples of these lengths in turn (starting one further along
    // the list each row), the rest of the row an example of its own; none: unpacked.
    std::vector<int> examples = {};
  };
  const Case cases[] = {
      {{"gqa_b6_s2048", 6, 2048, 4096, 32, 8, 128, 1, 1, 1, 1e4f}, {}},
      {{"mha_b2_s1000", 2, 1000, 512, 8, 8, 64, 1, 1, 1, 1e4f}, {}},
      {{"hd256_window", 2, 700, 512, 4, 1, 256, 1, 1, 1, 1e4f}, {0.0625f, 100}},
      // A llama2-7b micro-batch of chat examples, lengths no multiple of 64, GQA.
      {{"packed_gqa_b4_s2048", 4, 2048, 4096, 32, 8, 128, 1, 1, 1, 1e4f},
       {},
       {517, 300, 901, 64, 777, 450, 833}},
      // Examples of one token and of a tile and one, MHA.
      {{"packed_mha_b2_s1000", 2, 1000, 512, 8, 8, 64, 1, 1, 1, 1e4f}, {}, {129, 1, 65, 300, 2}},
      // A window narrower than the examples: the forward on cuDNN, the backward on the module's.
      {{"packed_hd256_window", 2, 700, 512, 4, 1, 256, 1, 1, 1, 1e4f},
       {0.0625f, 100},
       {250, 130, 190}},
      // Sequences whose backward workspace is past 5 GiB, in chunks of heads (cuda-workspace.h):
      // one of 16K tokens with 12 query heads in groups of 2 (6.4 GB) in 2 calls of 6 heads; two
      // of 12K with 24 heads (7.2 GB each) in 2 × 2 calls of 12.
      {{"heads_gqa_b1_s16384", 1, 16384, 1536, 12, 6, 128, 1, 1, 1, 1e4f}, {}},
      {{"heads_mha_b2_s12288", 2, 12288, 3072, 24, 24, 128, 1, 1, 1, 1e4f}, {}},
  };
  for (const Case& c : cases) {
    const Shape& s = c.shape;
    SCOPED_TRACE(s.name);
    const size_t nq = size_t(s.batch) * s.seq * s.heads * s.head_dim,
                 nkv = size_t(s.batch) * s.seq * s.kv_heads * s.head_dim;
    const auto q = input(nq, 61), k = input(nkv, 62), v = input(nkv, 63), dout = input(nq, 64);
    std::vector<int32_t> pos;
    if (!c.examples.empty()) {
      pos.resize(size_t(s.batch) * s.seq);
      for (int b = 0; b < s.batch; ++b) {
        size_t e = b;
        for (int t = 0, start = 0; t < s.seq; ++t) {
          if (t - start == c.examples[e % c.examples.size()]) start = t, ++e;
          pos[size_t(b) * s.seq + t] = t - start;
        }
      }
      const PackedBounds bounds = packed_bounds(pos, s.seq);
      std::printf("  %-20s %d examples, the longest %d tokens\n", s.name, bounds.examples,
                  bounds.longest);
    }
    std::vector<float> out_ref, lse_ref;
    cpu_attention_forward(*own->backend, s, q, k, v, pos, c.params, &out_ref, &lse_ref);
    Outputs want, got, again;
    for (auto [be, o] :
         {std::pair{own->backend.get(), &want}, std::pair{cudnn->backend.get(), &got},
          std::pair{cudnn->backend.get(), &again}}) {
      Side side(*be, s.op_shapes());
      AttentionParams params = c.params;
      if (!pos.empty()) {
        params.positions = i32(side.i32(pos), {s.batch, s.seq});
        params.packed = packed_bounds(pos, s.seq);
      }
      attention_outputs(side, s, q, k, v, dout, out_ref, lse_ref, params, "", o);
    }
    for (const auto& [key, tol] : attention_tolerances("")) {
      const double err = rel_l2(got[key], want[key]);
      EXPECT_LE(err, tol) << key;
      EXPECT_TRUE(same_bits(got[key], again[key])) << key << ": cuDNN's bits differ between calls";
      std::printf("  %-20s %-12s rel_l2 %.2e\n", s.name, key.c_str(), err);
    }
    const cuda::CudnnBackwardChunk chunk =
        cuda::cudnn_attention_backward_chunk(s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
    if (pos.empty() && chunk.heads < s.heads) {
      // The chunks of heads ran on cuDNN, not the module's kernel: some bits differ from its.
      ASSERT_TRUE(chunk.covered());
      std::printf("  %-20s backward in %d calls of %d heads\n", s.name,
                  s.batch * (s.heads / chunk.heads), chunk.heads);
      EXPECT_FALSE(same_bits(got["backward.dq"], want["backward.dq"]))
          << "the backward of chunks of heads did not run on cuDNN (SPILLWAY_LOG=debug says why)";
    }
  }
}

// Bounds that say fewer examples than the positions hold: cuDNN's plan then has no room for the
// rest (their outputs stay unwritten), and the next packed call says so instead of computing.
TEST(CudnnAttention, PackedBoundsThatLieAreReported) {
  auto cudnn = make_backend({.kind = "cuda"});
  if (!cudnn.ok()) GTEST_SKIP() << "no usable CUDA backend: " << cudnn.status().to_string();
  if (cudnn->backend->device_info().attention.rfind("cuDNN", 0) != 0)
    GTEST_SKIP() << "attention does not run on cuDNN";
  Backend& be = *cudnn->backend;
  const Shape s{"packed_lie", 1, 256, 256, 4, 4, 64, 1, 1, 1, 1e4f};
  const int B = s.batch, T = s.seq, hq = s.heads, hd = s.head_dim;
  const size_t nq = size_t(B) * T * hq * hd;
  std::vector<int32_t> pos(size_t(B) * T);
  for (int t = 0; t < T; ++t) pos[t] = t % 64;  // four examples of 64
  ASSERT_EQ(packed_bounds(pos, T), (PackedBounds{4, 64}));
  const auto q = input(nq, 71), k = input(nq, 72), v = input(nq, 73);
  Side side(be, s.op_shapes());
  const DType act = be.act_dtype();
  AttentionParams params;
  params.positions = i32(side.i32(pos), {B, T});
  params.packed = {2, 64};
  void* out = side.act_zeros(nq);
  float* lse = side.f32_zeros(size_t(B) * hq * T);
  auto forward = [&] {
    return be.attention_forward(Tensor(out, act, {B, T, hq, hd}),
                                Tensor(lse, DType::kF32, {B, hq, T}),
                                ConstTensor(side.act(q), act, {B, T, hq, hd}),
                                ConstTensor(side.act(k), act, {B, T, hq, hd}),
                                ConstTensor(side.act(v), act, {B, T, hq, hd}), 0, params);
  };
  ASSERT_OK(forward());
  const std::vector<float> got = side.get_act(out, nq);  // waits for the GPU
  // The last example's outputs: zero where cuDNN left them out, computed where the module's
  // kernel ran the call (cuDNN refused the shape: the log says why).
  const bool left_out =
      std::all_of(got.end() - 64 * hq * hd, got.end(), [](float x) { return x == 0; });
  if (!left_out) GTEST_SKIP() << "cuDNN did not run the packed call";
  const Status again = forward();
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("PackedBounds"), std::string::npos) << again.to_string();
}

// --- the backend's own machinery
// ------------------------------------------------------------------

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cuda = make_backend({.kind = "cuda"});
    if (!cuda.ok()) GTEST_SKIP() << "no usable CUDA backend: " << cuda.status().to_string();
    be_ = std::move(cuda->backend);
    reason_ = cuda->reason;
  }
  std::unique_ptr<Backend> be_;
  std::string reason_;
};

TEST_F(CudaBackendTest, DescribesItsDevice) {
  const DeviceInfo info = be_->device_info();
  EXPECT_EQ(be_->name(), "cuda");
  EXPECT_EQ(be_->act_dtype(), DType::kBF16);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.compute_capability, 80);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.total_bytes, 1ull << 30);
  EXPECT_NE(info.driver.find("CUDA driver"), std::string::npos) << info.driver;
  EXPECT_TRUE(info.attention.rfind("cuDNN ", 0) == 0 || info.attention.rfind("own kernels", 0) == 0)
      << info.attention;
  EXPECT_EQ(reason_.rfind("cuda: " + info.name, 0), 0u) << reason_;
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_OK(be_->device_memory_info(&free_bytes, &total_bytes));
  EXPECT_GT(free_bytes, 0u);
  EXPECT_LE(free_bytes, total_bytes);
  std::printf("%s; %s; attention on %s\n", reason_.c_str(), info.driver.c_str(),
              info.attention.c_str());
}

// f32 -> bf16 rounds to nearest even exactly as core/dtype.h (torch's .to(torch.bfloat16)), for
// ties, subnormals, infinities and the largest floats; bf16 -> f32 is exact; F32 -> F32 copies.
TEST_F(CudaBackendTest, ConvertRoundTrips) {
  std::vector<float> h = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          1.0f + 0x1p-8f,
                          1.0f + 3 * 0x1p-8f,
                          -(1.0f + 0x1p-8f),
                          1e-40f,
                          -3e-39f,
                          0x1p-133f,
                          3.3895314e38f,
                          -3.3895314e38f,
                          INFINITY,
                          -INFINITY,
                          NAN};
  const auto random = testing::random_floats(1 << 20, 80, -1e4f, 1e4f);
  h.insert(h.end(), random.begin(), random.end());
  const size_t n = h.size();
  Side side(*be_, OpShapes{});
  float* src = side.f32(h);
  auto* b16 = static_cast<uint16_t*>(side.alloc(n * 2));
  float* back = static_cast<float*>(side.alloc(n * 4));
  float* copy = static_cast<float*>(side.alloc(n * 4));
  ASSERT_OK(be_->device().convert(b16, DType::kBF16, src, DType::kF32, n, 0));
  ASSERT_OK(be_->device().convert(back, DType::kF32, b16, DType::kBF16, n, 0));
  ASSERT_OK(be_->device().convert(copy, DType::kF32, src, DType::kF32, n, 0));
  std::vector<uint16_t> got16(n);
  ASSERT_OK(be_->device().copy_d2h(got16.data(), b16, n * 2, 0));
  const auto got = side.get_f32(back, n);
  const auto copied = side.get_f32(copy, n);
  EXPECT_TRUE(same_bits(copied, h));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(h[i])) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(got16[i])) && std::isnan(got[i])) << "NaN stays NaN";
      continue;
    }
    const uint16_t want = f32_to_bf16(h[i]);
    const float want_back = bf16_to_f32(want);
    if (got16[i] != want || std::memcmp(&got[i], &want_back, 4) != 0) {
      if (++bad <= 5)
        ADD_FAILURE() << "element " << i << " = " << h[i] << ": bf16 0x" << std::hex << got16[i]
                      << ", want 0x" << want;
    }
  }
  EXPECT_EQ(bad, 0u);
  Status s = be_->device().convert(copy, DType::kF16, src, DType::kF32, n, 0);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
}

// A copy on its own stream, ordered before a conversion on the compute stream by an event; ids
// of destroyed streams and events are reused; timing events measure GPU time.
TEST_F(CudaBackendTest, StreamsEventsAndTiming) {
  const size_t n = 16 << 20;  // 64 MB: long enough that a missing wait would read the old contents
  auto pinned = be_->device().host_alloc_pinned(n * 4);
  ASSERT_TRUE(pinned.ok()) << pinned.status().to_string();
  float* host = static_cast<float*>(*pinned);
  for (size_t i = 0; i < n; ++i) host[i] = float(i % 1000) - 500.0f;
  Side side(*be_, OpShapes{});
  float* dev = side.f32_zeros(n);
  auto* b16 = static_cast<uint16_t*>(side.alloc(n * 2));

  auto copy_stream = be_->device().create_stream();
  ASSERT_TRUE(copy_stream.ok()) << copy_stream.status().to_string();
  EXPECT_NE(copy_stream->id(), 0);
  auto copied = be_->device().create_event();
  auto start = be_->device().create_event(true), end = be_->device().create_event(true);
  ASSERT_TRUE(copied.ok() && start.ok() && end.ok());
  ASSERT_OK(be_->device().synchronize_event(*copied));  // never recorded: complete
  ASSERT_OK(be_->device().record_event(*start, *copy_stream));
  ASSERT_OK(be_->device().copy_h2d(dev, host, n * 4, *copy_stream));
  ASSERT_OK(be_->device().record_event(*copied, *copy_stream));
  ASSERT_OK(be_->device().record_event(*end, *copy_stream));
  ASSERT_OK(be_->device().stream_wait_event(0, *copied));
  ASSERT_OK(be_->device().convert(b16, DType::kBF16, dev, DType::kF32, n, 0));
  std::vector<uint16_t> got(n);
  ASSERT_OK(be_->device().copy_d2h(got.data(), b16, n * 2, 0));
  ASSERT_OK(be_->device().synchronize_stream(0));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += got[i] != f32_to_bf16(host[i]);
  EXPECT_EQ(bad, 0u) << "the conversion did not wait for the copy";

  auto t = be_->device().elapsed_s(*start, *end);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_GT(*t, 0.0);
  EXPECT_LT(*t, 10.0);
  std::printf("64 MB host-to-device from pinned memory: %.3f ms, %.1f GB/s\n", *t * 1e3,
              n * 4 / *t / 1e9);
  Status no_timing = be_->device().elapsed_s(*copied, *end).status();
  EXPECT_EQ(no_timing.code(), ErrorCode::kInvalidArgument) << no_timing.to_string();
  auto unrecorded = be_->device().create_event(true);
  ASSERT_TRUE(unrecorded.ok());
  EXPECT_EQ(be_->device().elapsed_s(*unrecorded, *end).status().code(),
            ErrorCode::kInvalidArgument);

  // Destroyed handles free their ids for reuse; a destroyed id is unknown until then.
  const StreamId sid = copy_stream->id();
  copy_stream->reset();
  EXPECT_EQ(be_->device().synchronize_stream(sid).code(), ErrorCode::kInvalidArgument);
  auto again = be_->device().create_stream();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id(), sid);
  const EventId eid = copied->id();
  copied->reset();
  EXPECT_EQ(be_->device().record_event(eid, 0).code(), ErrorCode::kInvalidArgument);
  auto again_event = be_->device().create_event();
  ASSERT_TRUE(again_event.ok());
  EXPECT_EQ(again_event->id(), eid);
  be_->device().host_free_pinned(host);
}

// cudaHostRegister'd memory copies both ways.
TEST_F(CudaBackendTest, HostRegister) {
  std::vector<float> host = testing::random_floats(1 << 20, 90);
  std::vector<float> back(host.size());
  ASSERT_OK(be_->device().host_register(host.data(), host.size() * 4));
  ASSERT_OK(be_->device().host_register(back.data(), back.size() * 4));
  EXPECT_EQ(be_->device().host_register(host.data(), host.size() * 4).code(),
            ErrorCode::kInvalidArgument);
  Side side(*be_, OpShapes{});
  float* dev = static_cast<float*>(side.alloc(host.size() * 4));
  ASSERT_OK(be_->device().copy_h2d(dev, host.data(), host.size() * 4, 0));
  ASSERT_OK(be_->device().copy_d2h(back.data(), dev, back.size() * 4, 0));
  ASSERT_OK(be_->device().synchronize_stream(0));
  EXPECT_TRUE(same_bits(back, host));
  be_->device().host_unregister(host.data());
  be_->device().host_unregister(back.data());
}

TEST_F(CudaBackendTest, ErrorsNameTheOpAndTheFix) {
  auto huge = be_->device().device_alloc(size_t(1) << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(huge.status().message().find("lower micro_batch_size or seq_len"), std::string::npos)
      << huge.status().to_string();
  EXPECT_NE(huge.status().message().find("free"), std::string::npos) << huge.status().to_string();
  // The failed allocation leaves the backend usable.
  Side side(*be_, OpShapes{});
  void* buf = side.alloc(1 << 20);
  ASSERT_NE(buf, nullptr);

  Status s = be_->rmsnorm_forward(Tensor(buf, be_->act_dtype(), {-1, 64}),
                                  Tensor(static_cast<float*>(buf), DType::kF32, {-1}),
                                  ConstTensor(buf, be_->act_dtype(), {-1, 64}),
                                  ConstTensor(buf, be_->act_dtype(), {64}), 1e-5f, 0);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rmsnorm_forward"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("n=-1"), std::string::npos) << s.to_string();
  s = be_->linear_forward(
      Tensor(buf, be_->act_dtype(), {4, 8}), ConstTensor(buf, be_->act_dtype(), {4, 0}),
      ConstTensor(buf, be_->act_dtype(), {8, 0}), ConstTensor(nullptr, be_->act_dtype(), {8}), 0);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("in=0"), std::string::npos) << s.to_string();
  s = be_->add_inplace(Tensor(buf, be_->act_dtype(), {static_cast<int64_t>(16)}),
                       ConstTensor(nullptr, be_->act_dtype(), {static_cast<int64_t>(16)}), 0);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = be_->swiglu_forward(Tensor(buf, be_->act_dtype(), {4, 8}),
                          ConstTensor(buf, be_->act_dtype(), {4, 8}),
                          ConstTensor(buf, be_->act_dtype(), {4, 8}), 99);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown stream 99"), std::string::npos) << s.to_string();
}

// fp32 values of either sign, uniform in (0, 1) scaled by 2^-8 .. 2^8: squares over 40 binades, so
// that the order of the additions shows. A cheap generator: the 7B case needs 200M of them.
std::vector<float> spread_floats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float unit = float((s >> 40) | 1) * 0x1p-24f;  // (0, 1)
    v[i] = std::ldexp((s >> 39) & 1 ? -unit : unit, int((s >> 32) % 17) - 8);
  }
  return v;
}

// *out of sum_squares over x[0, n) on `be` (stream 0), read back; `out` starts as NaN so that an
// op that writes nothing shows.
double sum_squares_on(Backend& be, double* out, const float* x, size_t n) {
  const double nan = NAN;
  EXPECT_OK(be.device().copy_h2d(out, &nan, sizeof(double), 0));
  EXPECT_OK(be.sum_squares(out, f32(x, {static_cast<int64_t>(n)}), 0));
  double got = NAN;
  EXPECT_OK(be.device().copy_d2h(&got, out, sizeof(double), 0));
  EXPECT_OK(be.device().synchronize_stream(0));
  return got;
}

// Σ x² in double (the per-block part of the gradient norm): the CUDA and CPU sums within 1e-13 of a
// long-double sum (each adds in its own fixed order: chains of up to 10^5 terms, whose rounding
// errors grow about as sqrt(length) · 2^-53; measured 2.7e-14 at 202M elements), the same bits on a
// rerun and from a copy that is not 16-byte aligned (scalar loads instead of float4, one order), 0
// for no elements. Sizes around the kernel's 4-element groups, its 16384-element chunks and its cap
// of 1024 chunks, and a llama-7B layer's gradient (202M floats), timed.
TEST_F(CudaBackendTest, SumSquares) {
  auto cpu = make_cpu_backend();
  const size_t layer_7b = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096;
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{5}, size_t{4095}, size_t{16383},
                   size_t{16384}, size_t{16385}, (size_t{1} << 20) + 3, size_t{16384} * 1024 + 7,
                   size_t{16384} * 3000 + 1, layer_7b}) {
    SCOPED_TRACE("count " + std::to_string(n));
    const std::vector<float> x = spread_floats(n, n);
    double want = NAN;
    {
      Side side(*cpu, OpShapes{});
      want = sum_squares_on(*cpu, static_cast<double*>(side.alloc(sizeof(double))), side.f32(x), n);
    }
    Side side(*be_, OpShapes{});
    auto* out = static_cast<double*>(side.alloc(sizeof(double)));
    const float* dx = side.f32(x);
    const double got = sum_squares_on(*be_, out, dx, n);
    if (n == 0) {
      EXPECT_EQ(want, 0.0);
      EXPECT_EQ(got, 0.0);
      continue;
    }
    long double exact = 0;
    for (float v : x) exact += static_cast<long double>(v) * v;
    const double ref = static_cast<double>(exact);
    EXPECT_LT(std::abs(got - ref) / ref, 1e-13) << "cuda " << got << ", long double " << ref;
    EXPECT_LT(std::abs(want - ref) / ref, 1e-13) << "cpu " << want << ", long double " << ref;
    if (n == layer_7b) {
      std::printf("sum_squares relative error vs long double at %zu floats: cuda %.2e, cpu %.2e\n",
                  n, std::abs(got - ref) / ref, std::abs(want - ref) / ref);
    }
    const double again = sum_squares_on(*be_, out, dx, n);
    EXPECT_EQ(std::memcmp(&got, &again, sizeof(double)), 0) << "two identical runs differ";
    float* shifted =
        static_cast<float*>(side.alloc((n + 1) * sizeof(float))) + 1;  // 4 bytes past 256
    ASSERT_OK(be_->device().copy_h2d(shifted, x.data(), n * sizeof(float), 0));
    const double unaligned = sum_squares_on(*be_, out, shifted, n);
    EXPECT_EQ(std::memcmp(&got, &unaligned, sizeof(double)), 0)
        << "the unaligned copy sums differently";
    if (n == layer_7b) {
      auto start = be_->device().create_event(true), end = be_->device().create_event(true);
      ASSERT_TRUE(start.ok() && end.ok());
      constexpr int kRuns = 10;
      ASSERT_OK(be_->device().record_event(*start, 0));
      for (int r = 0; r < kRuns; ++r)
        ASSERT_OK(be_->sum_squares(out, f32(dx, {static_cast<int64_t>(n)}), 0));
      ASSERT_OK(be_->device().record_event(*end, 0));
      ASSERT_OK(be_->device().synchronize_stream(0));
      auto t = be_->device().elapsed_s(*start, *end);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      const double s = *t / kRuns;
      std::printf("sum_squares of a llama-7B layer's gradient (%zu floats): %.3f ms, %.0f GB/s\n",
                  n, s * 1e3, n * sizeof(float) / s / 1e9);
    }
  }
}

TEST_F(CudaBackendTest, OpsNeedAWorkspaceOfTheirShapes) {
  // be_ has no workspace yet.
  auto buf = be_->device().device_alloc(64 << 20);
  ASSERT_TRUE(buf.ok());
  void* p = *buf;
  float* f = static_cast<float*>(p);
  Status s = be_->linear_forward(
      Tensor(p, be_->act_dtype(), {4, 64}), ConstTensor(p, be_->act_dtype(), {4, 64}),
      ConstTensor(p, be_->act_dtype(), {64, 64}), ConstTensor(nullptr, be_->act_dtype(), {64}), 0);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.to_string();
  s = be_->rmsnorm_backward(
      Tensor(p, be_->act_dtype(), {4, 64}), Tensor(f, DType::kF32, {64}),
      ConstTensor(p, be_->act_dtype(), {4, 64}), ConstTensor(p, be_->act_dtype(), {4, 64}),
      ConstTensor(p, be_->act_dtype(), {64}), ConstTensor(f, DType::kF32, {4}), false, 0);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.to_string();
  s = be_->sum_squares(static_cast<double*>(p), f32(f, {64}), 0);  // its partial sums
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.to_string();

  OpShapes small;
  small.tokens = 16;
  small.batch = 1;
  small.seq = 16;
  small.hidden = 64;
  small.heads = 2;
  small.kv_heads = 1;
  small.head_dim = 64;
  small.intermediate = 128;
  const size_t bytes = be_->workspace_bytes(small);
  EXPECT_EQ(bytes % 256, 0u);
  auto ws = be_->device().device_alloc(bytes);
  ASSERT_TRUE(ws.ok());
  EXPECT_EQ(be_->set_workspace(*ws, bytes - 256, small).code(), ErrorCode::kInvalidArgument);
  ASSERT_OK(be_->set_workspace(*ws, bytes, small));
  // Attention over a sequence 4096 times longer than the workspace was sized for (the buffers would
  // hold it: the check comes first).
  s = be_->attention_backward(Tensor(p, be_->act_dtype(), {1, 65536, 2, 64}),
                              Tensor(p, be_->act_dtype(), {1, 65536, 1, 64}),
                              Tensor(p, be_->act_dtype(), {1, 65536, 1, 64}),
                              ConstTensor(p, be_->act_dtype(), {1, 65536, 2, 64}),
                              ConstTensor(p, be_->act_dtype(), {1, 65536, 2, 64}),
                              ConstTensor(p, be_->act_dtype(), {1, 65536, 1, 64}),
                              ConstTensor(p, be_->act_dtype(), {1, 65536, 1, 64}),
                              ConstTensor(p, be_->act_dtype(), {1, 65536, 2, 64}),
                              ConstTensor(f, DType::kF32, {1, 2, 65536}), 0);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("attention_backward"), std::string::npos) << s.to_string();
  ASSERT_OK(be_->device().synchronize_stream(0));
  be_->device().device_free(*ws);
  be_->device().device_free(p);
}

// --- AdamW: the HBM state tier's update (cuda/adamw.cu), bit for bit the CPU optimizer's ---------

// The trainer's defaults (the job schema's) with a learning rate that moves parameters visibly.
constexpr AdamWConfig kAdamW{1e-3, 0.9, 0.95, 1e-8, 0.1};

// Where each of param, m, v, grad starts, in floats past a fresh (256-byte aligned) allocation:
// the kernel takes float4 loads only when all four are 16-byte aligned, else its scalar path.
struct AdamWPlacement {
  const char* name;
  std::array<size_t, 4> offset;  // param, m, v, grad
};
constexpr AdamWPlacement kAligned{"aligned", {0, 0, 0, 0}};
constexpr AdamWPlacement kAdamWPlacements[] = {
    kAligned,
    {"all one float past (scalar path)", {1, 1, 1, 1}},
    {"grad one float past (scalar path)", {0, 0, 0, 1}},
    {"16 bytes past (float4 path)", {4, 4, 4, 4}},
};

// One configuration of a step: weight decay on or off, a clip coefficient, the step number.
struct AdamWCase {
  bool decay;
  float grad_scale;
  int64_t step;
  std::string name() const {
    return std::string(decay ? "decay" : "no decay") + ", grad_scale " +
           std::to_string(grad_scale) + ", step " + std::to_string(step);
  }
};
constexpr AdamWCase kAdamWCases[] = {{true, 1.0f, 1},     {true, 1.0f, 1000},  {true, 0.37f, 1},
                                     {true, 0.37f, 1000}, {false, 1.0f, 1},    {false, 1.0f, 1000},
                                     {false, 0.37f, 1},   {false, 0.37f, 1000}};

// A state's four arrays on the device, placed as `at` says.
struct DeviceAdamWState {
  float *p, *m, *v, *g;
};

DeviceAdamWState upload_state(Side& side, const testing::State& s, const AdamWPlacement& at) {
  const size_t n = s.p.size();
  std::array<float*, 4> dev{};
  const std::vector<float>* host[] = {&s.p, &s.m, &s.v, &s.g};
  for (int i = 0; i < 4; ++i) {
    auto* base = static_cast<float*>(side.alloc((n + at.offset[i]) * sizeof(float)));
    if (base == nullptr) return {};
    dev[i] = base + at.offset[i];
    EXPECT_OK(side.be().device().copy_h2d(dev[i], host[i]->data(), n * sizeof(float), 0));
  }
  EXPECT_OK(side.be().device().synchronize_stream(0));
  return {dev[0], dev[1], dev[2], dev[3]};
}

Status adamw_on(Backend& be, const DeviceAdamWState& d, size_t n, const AdamWCoeffs& k,
                float grad_scale) {
  const compute::Shape shape{static_cast<int64_t>(n)};
  return be.adamw(f32(d.p, shape), f32(d.m, shape), f32(d.v, shape),
                  f32(static_cast<const float*>(d.g), shape), k, grad_scale, 0);
}

// The state the device holds (its gradient: the host's, unchanged by the step).
testing::State download_state(Side& side, const DeviceAdamWState& d, const testing::State& s) {
  const size_t n = s.p.size();
  return {side.get_f32(d.p, n), side.get_f32(d.m, n), side.get_f32(d.v, n), s.g};
}

// compute::cpu::adamw's step on a copy of `s`.
testing::State cpu_adamw(testing::State s, const AdamWCoeffs& k, float grad_scale) {
  cpu::adamw(s.p.data(), s.m.data(), s.v.data(), s.g.data(), s.p.size(), grad_scale, k);
  return s;
}

// Backend::adamw on the GPU equals compute::cpu::adamw and the optimizer's adamw_update_range bit
// for bit (memcmp of param, m and v): every size 1 to 9 (the kernel's 4-element groups and its
// tail), around a 64-element tile, a prime past a million, 2^24 + 3 and 8M; each placement of the
// four arrays (float4 and scalar paths); decay on and off, grad_scale 1 and 0.37, steps 1 and 1000;
// random states and hard ones (subnormal gradients, zeros of both signs, huge v, large gradients on
// large negative parameters: adamw-test-util.h). The two largest sizes run the hard states (two in
// three of their elements are random ones) on the first two placements only.
TEST_F(CudaBackendTest, AdamWEqualsTheCpuOptimizerBitForBit) {
  std::vector<size_t> sizes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 63, 64, 65, 1000003};
  const size_t big[] = {(size_t{1} << 24) + 3, size_t{8} << 20};
  sizes.insert(sizes.end(), std::begin(big), std::end(big));
  for (size_t n : sizes) {
    const bool is_big = n >= big[1];
    for (bool hard : {false, true}) {
      if (is_big && !hard) continue;
      const testing::State before = testing::make_state(n, 3 * n + hard, hard);
      for (const AdamWCase& c : kAdamWCases) {
        SCOPED_TRACE("count " + std::to_string(n) + (hard ? ", hard values, " : ", ") + c.name());
        const AdamWCoeffs k = adamw_coeffs(kAdamW, c.step, c.decay);
        const testing::State want = cpu_adamw(before, k, c.grad_scale);
        testing::State optimizer = before;
        adamw_update_range(optimizer.p.data(), optimizer.m.data(), optimizer.v.data(),
                           optimizer.g.data(), n, kAdamW, c.step, c.grad_scale, c.decay);
        testing::expect_same_state(optimizer, want, "adamw_update_range vs cpu::adamw");
        for (const AdamWPlacement& at : kAdamWPlacements) {
          if (is_big && &at - kAdamWPlacements >= 2) break;
          Side side(*be_, OpShapes{});
          const DeviceAdamWState d = upload_state(side, before, at);
          ASSERT_OK(adamw_on(*be_, d, n, k, c.grad_scale));
          const testing::State got = download_state(side, d, before);
          testing::expect_same_state(got, want, at.name);
          if (HasFailure()) return;  // one case's differences say enough
        }
      }
    }
  }
}

// Five steps of one tensor whose state stays on the GPU, each with a new gradient and clip
// coefficient, against the optimizer's five steps on the host: the same bits after every step, as
// a block in the HBM state tier must keep them (issue 24, point 2).
TEST_F(CudaBackendTest, AdamWTrajectoryStaysTheCpus) {
  const size_t n = 1000003;
  testing::State host = testing::make_state(n, 41, true);
  Side side(*be_, OpShapes{});
  const DeviceAdamWState d = upload_state(side, host, kAligned);
  const float scales[] = {1.0f, 0.37f, 0.9f, 1.0f, 0.05f};
  for (int64_t step = 1; step <= 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    host.g = testing::make_state(n, 100 + step, step % 2 == 0).g;
    ASSERT_OK(be_->device().copy_h2d(d.g, host.g.data(), n * sizeof(float), 0));
    const float scale = scales[step - 1];
    const bool decay = step != 3;
    ASSERT_OK(adamw_on(*be_, d, n, adamw_coeffs(kAdamW, step, decay), scale));
    adamw_update_range(host.p.data(), host.m.data(), host.v.data(), host.g.data(), n, kAdamW, step,
                       scale, decay);
    testing::expect_same_state(download_state(side, d, host), host, "after the step");
    if (HasFailure()) return;
  }
}

// The same input twice, into fresh buffers, gives the same bits (8M elements, both paths).
TEST_F(CudaBackendTest, AdamWIsDeterministic) {
  const size_t n = size_t{8} << 20;
  const testing::State before = testing::make_state(n, 52, true);
  const AdamWCoeffs k = adamw_coeffs(kAdamW, 7, true);
  for (const AdamWPlacement& at : {kAdamWPlacements[0], kAdamWPlacements[1]}) {
    SCOPED_TRACE(at.name);
    testing::State runs[2];
    for (testing::State& r : runs) {
      Side side(*be_, OpShapes{});
      const DeviceAdamWState d = upload_state(side, before, at);
      ASSERT_OK(adamw_on(*be_, d, n, k, 0.5f));
      r = download_state(side, d, before);
    }
    testing::expect_same_state(runs[1], runs[0], "two identical runs");
    EXPECT_FALSE(same_bits(runs[0].p, before.p)) << "the step changed no parameter";
  }
}

// A null tensor or an unknown stream is kInvalidArgument naming the op and what is wrong; no
// elements is success without touching anything.
TEST_F(CudaBackendTest, AdamWChecksItsArguments) {
  Side side(*be_, OpShapes{});
  const testing::State s = testing::make_state(64, 9, false);
  const DeviceAdamWState d = upload_state(side, s, kAligned);
  const AdamWCoeffs k = adamw_coeffs(kAdamW, 1, true);
  const compute::Shape shape{64};
  Status st = be_->adamw(f32(d.p, shape), f32(d.m, shape), f32(d.v, shape),
                         f32(static_cast<const float*>(nullptr), shape), k, 1.0f, 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("adamw: grad is null"), std::string::npos) << st.to_string();
  st = be_->adamw(f32(d.p, shape), f32(static_cast<float*>(nullptr), shape), f32(d.v, shape),
                  f32(static_cast<const float*>(d.g), shape), k, 1.0f, 0);
  EXPECT_NE(st.message().find("adamw: m is null"), std::string::npos) << st.to_string();
  st = be_->adamw(f32(d.p, shape), f32(d.m, shape), f32(d.v, shape),
                  f32(static_cast<const float*>(d.g), shape), k, 1.0f, 99);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("stream 99"), std::string::npos) << st.to_string();
  const compute::Shape none{int64_t{0}};
  ASSERT_OK(be_->adamw(f32(d.p, none), f32(d.m, none), f32(d.v, none),
                       f32(static_cast<const float*>(d.g), none), k, 1.0f, 0));
  testing::expect_same_state(download_state(side, d, s), s, "refused or empty calls");
}

}  // namespace
}  // namespace spillway::compute
