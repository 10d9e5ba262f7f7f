// End-to-end check of the CPU ops against PyTorch: the Llama/Qwen2 forward and backward composed
// from Backend calls (no layer streaming, every activation kept) must reproduce the golden logits,
// loss and every parameter gradient of ../shared/data/golden (float64 PyTorch) within the
// tolerances its README gives for a float32 CPU implementation. This pins the conventions (rope
// layout, GQA head mapping, tied heads, q/k/v biases, loss normalisation) that single-op tests
// cannot. Each model runs twice: on the synchronous CPU backend and on the strict one, where every
// op waits in stream 0's queue until the test synchronises (cpu/cpu-streams.h), so results the host
// reads too early, or buffers that go before their queued ops ran, would show.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "compute/backend.h"
#include "compute/cpu/cpu-backend.h"
#include "core/file-util.h"
#include "engine/train/golden-util.h"
#include "model/model-config.h"
#include "model/safetensors.h"
#include "test-data.h"

namespace spillway::compute {
namespace {

using Vec = std::vector<float>;

double rel_l2(const float* a, const float* ref, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

#define OK(expr)                                             \
  do {                                                       \
    ::spillway::Status s_ = (expr);                          \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

// (model folder, strict streams)
class GoldenModel : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(GoldenModel, ForwardBackwardMatchesPyTorch) {
  SPILLWAY_REQUIRE_DATA();
  const std::string name = std::get<0>(GetParam());
  const bool strict = std::get<1>(GetParam());
  const ::spillway::testing::GoldenCase files = ::spillway::testing::golden_case(name);
  auto cfg_r = ModelConfig::load(files.model);
  ASSERT_TRUE(cfg_r.ok()) << cfg_r.status().to_string();
  const ModelConfig& c = *cfg_r;
  auto weights_r = TensorStore::open(files.model);
  ASSERT_TRUE(weights_r.ok()) << weights_r.status().to_string();
  auto golden_r = TensorStore::open(files.file("forward_backward.safetensors"));
  ASSERT_TRUE(golden_r.ok()) << golden_r.status().to_string();
  const TensorStore& wts = *weights_r;
  const TensorStore& gold = *golden_r;

  auto load = [](const TensorStore& st, const std::string& n, Vec* out) -> Status {
    const TensorInfo* t = st.find(n);
    if (!t) return not_found("tensor " + n);
    out->resize(t->numel());
    return st.read_f32(*t, out->data(), out->size());
  };
  const TensorInfo* ids_info = gold.find("input_ids");
  ASSERT_NE(ids_info, nullptr);
  const int B = static_cast<int>(ids_info->shape[0]), T = static_cast<int>(ids_info->shape[1]);
  const int n = B * T, D = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int hq = c.num_heads, hkv = c.num_kv_heads, hd = c.head_dim;
  const int qd = c.q_dim(), kvd = c.kv_dim();
  std::vector<int32_t> ids(n), labels(n);
  {
    const TensorInfo* l = gold.find("labels");
    ASSERT_NE(l, nullptr);
    std::memcpy(ids.data(), gold.data(*ids_info), n * 4);
    std::memcpy(labels.data(), gold.data(*l), n * 4);
  }
  RopeScaling rs{c.rope_scaling_factor, c.rope_low_freq_factor, c.rope_high_freq_factor,
                 c.rope_original_max_position};

  // Parameters, by HF name; gradients alongside, zeroed.
  std::map<std::string, Vec> p, g;
  auto param = [&](const std::string& key) -> Status {
    SPW_RETURN_IF_ERROR(load(wts, key, &p[key]));
    g[key].assign(p[key].size(), 0.0f);
    return Status::ok_status();
  };
  const std::string emb = "model.embed_tokens.weight";
  const std::string head = c.tie_word_embeddings ? emb : "lm_head.weight";
  OK(param(emb));
  if (!c.tie_word_embeddings) OK(param(head));
  OK(param("model.norm.weight"));
  const char* kLayerParams[] = {"input_layernorm.weight",  "post_attention_layernorm.weight",
                                "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                "mlp.down_proj.weight"};
  auto L = [](int l, const std::string& s) {
    return "model.layers." + std::to_string(l) + "." + s;
  };
  for (int l = 0; l < c.num_layers; ++l) {
    for (const char* s : kLayerParams) OK(param(L(l, s)));
    if (c.attention_bias) {
      for (const char* s :
           {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"})
        OK(param(L(l, s)));
    }
  }
  auto bias = [&](int l, const char* s) -> const float* {
    return c.attention_bias ? p[L(l, s)].data() : nullptr;
  };
  auto dbias = [&](int l, const char* s) -> float* {
    return c.attention_bias ? g[L(l, s)].data() : nullptr;
  };

  // Poisoned: the workspace starts as NaN, so scratch an op reads before writing would show.
  auto be =
      make_cpu_backend(CpuBackendOptions{.poison_allocations = true, .strict_streams = strict});
  OpShapes shapes;
  shapes.tokens = n, shapes.batch = B, shapes.seq = T, shapes.hidden = D, shapes.heads = hq,
  shapes.kv_heads = hkv;
  shapes.head_dim = hd, shapes.intermediate = F, shapes.vocab = V, shapes.lm_head_chunk = 37;
  const size_t ws_bytes = be->workspace_bytes(shapes);
  auto ws = be->device().device_alloc(ws_bytes);
  ASSERT_TRUE(ws.ok()) << ws.status().to_string();
  OK(be->set_workspace(*ws, ws_bytes, shapes));
  // Host copies go through the stream (copy_d2d): the strict backend has not run the ops yet.
  auto copy = [&](Vec* dst, const Vec& src) {
    dst->resize(src.size());
    return be->device().copy_d2d(dst->data(), src.data(), src.size() * sizeof(float), 0);
  };
  // Saved activations per layer.
  struct Acts {
    Vec x, h1, rstd1, q, k, v, att, lse, x2, h2, rstd2, gate, up, act;
  };
  std::vector<Acts> acts(c.num_layers);
  Vec x(size_t(n) * D);
  // Per-layer temporaries live as long as the queued ops that use them.
  Vec o(size_t(n) * D), m(size_t(n) * D);
  OK(be->embedding_forward(f32(x.data(), {n, D}), i32(ids.data(), {n}), f32(p[emb].data(), {V, D}),
                           0));
  for (int l = 0; l < c.num_layers; ++l) {
    Acts& a = acts[l];
    OK(copy(&a.x, x));
    a.h1.resize(x.size()), a.rstd1.resize(n);
    OK(be->rmsnorm_forward(f32(a.h1.data(), {n, D}), f32(a.rstd1.data(), {n}),
                           f32(a.x.data(), {n, D}),
                           f32(p[L(l, "input_layernorm.weight")].data(), {D}), c.rms_norm_eps, 0));
    a.q.resize(size_t(n) * qd), a.k.resize(size_t(n) * kvd), a.v.resize(size_t(n) * kvd);
    OK(be->linear_forward(f32(a.q.data(), {n, qd}), f32(a.h1.data(), {n, D}),
                          f32(p[L(l, "self_attn.q_proj.weight")].data(), {qd, D}),
                          ConstTensor(bias(l, "self_attn.q_proj.bias"), DType::kF32, {qd}), 0));
    OK(be->linear_forward(f32(a.k.data(), {n, kvd}), f32(a.h1.data(), {n, D}),
                          f32(p[L(l, "self_attn.k_proj.weight")].data(), {kvd, D}),
                          ConstTensor(bias(l, "self_attn.k_proj.bias"), DType::kF32, {kvd}), 0));
    OK(be->linear_forward(f32(a.v.data(), {n, kvd}), f32(a.h1.data(), {n, D}),
                          f32(p[L(l, "self_attn.v_proj.weight")].data(), {kvd, D}),
                          ConstTensor(bias(l, "self_attn.v_proj.bias"), DType::kF32, {kvd}), 0));
    OK(be->rope_forward(f32(a.q.data(), {B, T, hq, hd}), c.rope_theta, rs, 0));
    OK(be->rope_forward(f32(a.k.data(), {B, T, hkv, hd}), c.rope_theta, rs, 0));
    a.att.resize(a.q.size()), a.lse.resize(size_t(B) * hq * T);
    OK(be->attention_forward(f32(a.att.data(), {B, T, hq, hd}), f32(a.lse.data(), {B, hq, T}),
                             f32(a.q.data(), {B, T, hq, hd}), f32(a.k.data(), {B, T, hkv, hd}),
                             f32(a.v.data(), {B, T, hkv, hd}), 0));
    OK(be->linear_forward(f32(o.data(), {n, D}), f32(a.att.data(), {n, qd}),
                          f32(p[L(l, "self_attn.o_proj.weight")].data(), {D, qd}),
                          ConstTensor(nullptr, DType::kF32, {D}), 0));
    OK(copy(&a.x2, a.x));
    OK(be->add_inplace(f32(a.x2.data(), {static_cast<int64_t>(a.x2.size())}),
                       f32(o.data(), {static_cast<int64_t>(a.x2.size())}), 0));
    a.h2.resize(x.size()), a.rstd2.resize(n);
    OK(be->rmsnorm_forward(
        f32(a.h2.data(), {n, D}), f32(a.rstd2.data(), {n}), f32(a.x2.data(), {n, D}),
        f32(p[L(l, "post_attention_layernorm.weight")].data(), {D}), c.rms_norm_eps, 0));
    a.gate.resize(size_t(n) * F), a.up.resize(size_t(n) * F), a.act.resize(size_t(n) * F);
    OK(be->linear_forward(f32(a.gate.data(), {n, F}), f32(a.h2.data(), {n, D}),
                          f32(p[L(l, "mlp.gate_proj.weight")].data(), {F, D}),
                          ConstTensor(nullptr, DType::kF32, {F}), 0));
    OK(be->linear_forward(f32(a.up.data(), {n, F}), f32(a.h2.data(), {n, D}),
                          f32(p[L(l, "mlp.up_proj.weight")].data(), {F, D}),
                          ConstTensor(nullptr, DType::kF32, {F}), 0));
    OK(be->swiglu_forward(f32(a.act.data(), {n, F}), f32(a.gate.data(), {n, F}),
                          f32(a.up.data(), {n, F}), 0));
    OK(be->linear_forward(f32(m.data(), {n, D}), f32(a.act.data(), {n, F}),
                          f32(p[L(l, "mlp.down_proj.weight")].data(), {D, F}),
                          ConstTensor(nullptr, DType::kF32, {D}), 0));
    OK(copy(&x, a.x2));
    OK(be->add_inplace(f32(x.data(), {static_cast<int64_t>(x.size())}),
                       f32(m.data(), {static_cast<int64_t>(x.size())}), 0));
  }
  Vec hf(x.size()), rstd_f(n), logits(size_t(n) * V), dhf(x.size());
  OK(be->rmsnorm_forward(f32(hf.data(), {n, D}), f32(rstd_f.data(), {n}), f32(x.data(), {n, D}),
                         f32(p["model.norm.weight"].data(), {D}), c.rms_norm_eps, 0));
  int targets = 0;
  for (int32_t t : labels) targets += t != -100;
  Vec losses(n);
  OK(be->lm_head_loss(f32(losses.data(), {n}), f32(dhf.data(), {n, D}), f32(g[head].data(), {V, D}),
                      f32(hf.data(), {n, D}), f32(p[head].data(), {V, D}), i32(labels.data(), {n}),
                      1.0f / targets, f32(logits.data(), {n, V}), 37, 0));

  OK(be->device().synchronize_stream(0));
  double loss_sum = 0.0;
  for (float t : losses) loss_sum += t;
  Vec ref;
  OK(load(gold, "logits", &ref));
  const double logits_err = rel_l2(logits.data(), ref.data(), ref.size());
  EXPECT_LT(logits_err, 1e-4) << "logits";
  const std::string meta = files.file("meta.json");
  auto meta_text = read_file(meta);
  ASSERT_TRUE(meta_text.ok());
  const double ref_loss = nlohmann::json::parse(*meta_text)["loss"].get<double>();
  EXPECT_NEAR(loss_sum / targets, ref_loss, 1e-5);

  // Backward.
  Vec dx(x.size());
  Vec dact(size_t(n) * F), dgate(dact.size()), dup(dact.size()), dh2(size_t(n) * D);
  Vec datt(size_t(n) * qd), dq(datt.size()), dk(size_t(n) * kvd), dv(dk.size()), dh1(size_t(n) * D);
  OK(be->rmsnorm_backward(f32(dx.data(), {n, D}), f32(g["model.norm.weight"].data(), {D}),
                          f32(dhf.data(), {n, D}), f32(x.data(), {n, D}),
                          f32(p["model.norm.weight"].data(), {D}), f32(rstd_f.data(), {n}), false,
                          0));
  for (int l = c.num_layers - 1; l >= 0; --l) {
    Acts& a = acts[l];
    // MLP: x3 = x2 + down(swiglu(gate(h2), up(h2)))
    OK(be->linear_backward(
        f32(dact.data(), {n, F}), f32(g[L(l, "mlp.down_proj.weight")].data(), {D, F}),
        Tensor(nullptr, DType::kF32, {D}), f32(dx.data(), {n, D}), f32(a.act.data(), {n, F}),
        f32(p[L(l, "mlp.down_proj.weight")].data(), {D, F}), false, 0));
    OK(be->swiglu_backward(f32(dgate.data(), {n, F}), f32(dup.data(), {n, F}),
                           f32(dact.data(), {n, F}), f32(a.gate.data(), {n, F}),
                           f32(a.up.data(), {n, F}), 0));
    OK(be->linear_backward(
        f32(dh2.data(), {n, D}), f32(g[L(l, "mlp.gate_proj.weight")].data(), {F, D}),
        Tensor(nullptr, DType::kF32, {F}), f32(dgate.data(), {n, F}), f32(a.h2.data(), {n, D}),
        f32(p[L(l, "mlp.gate_proj.weight")].data(), {F, D}), false, 0));
    OK(be->linear_backward(
        f32(dh2.data(), {n, D}), f32(g[L(l, "mlp.up_proj.weight")].data(), {F, D}),
        Tensor(nullptr, DType::kF32, {F}), f32(dup.data(), {n, F}), f32(a.h2.data(), {n, D}),
        f32(p[L(l, "mlp.up_proj.weight")].data(), {F, D}), true, 0));
    OK(be->rmsnorm_backward(f32(dx.data(), {n, D}),
                            f32(g[L(l, "post_attention_layernorm.weight")].data(), {D}),
                            f32(dh2.data(), {n, D}), f32(a.x2.data(), {n, D}),
                            f32(p[L(l, "post_attention_layernorm.weight")].data(), {D}),
                            f32(a.rstd2.data(), {n}), true, 0));
    // Attention: x2 = x + o_proj(attn(rope(q(h1)), rope(k(h1)), v(h1)))
    OK(be->linear_backward(
        f32(datt.data(), {n, qd}), f32(g[L(l, "self_attn.o_proj.weight")].data(), {D, qd}),
        Tensor(nullptr, DType::kF32, {D}), f32(dx.data(), {n, D}), f32(a.att.data(), {n, qd}),
        f32(p[L(l, "self_attn.o_proj.weight")].data(), {D, qd}), false, 0));
    OK(be->attention_backward(f32(dq.data(), {B, T, hq, hd}), f32(dk.data(), {B, T, hkv, hd}),
                              f32(dv.data(), {B, T, hkv, hd}), f32(datt.data(), {B, T, hq, hd}),
                              f32(a.q.data(), {B, T, hq, hd}), f32(a.k.data(), {B, T, hkv, hd}),
                              f32(a.v.data(), {B, T, hkv, hd}), f32(a.att.data(), {B, T, hq, hd}),
                              f32(a.lse.data(), {B, hq, T}), 0));
    OK(be->rope_backward(f32(dq.data(), {B, T, hq, hd}), c.rope_theta, rs, 0));
    OK(be->rope_backward(f32(dk.data(), {B, T, hkv, hd}), c.rope_theta, rs, 0));
    OK(be->linear_backward(f32(dh1.data(), {n, D}),
                           f32(g[L(l, "self_attn.q_proj.weight")].data(), {qd, D}),
                           Tensor(dbias(l, "self_attn.q_proj.bias"), DType::kF32, {qd}),
                           f32(dq.data(), {n, qd}), f32(a.h1.data(), {n, D}),
                           f32(p[L(l, "self_attn.q_proj.weight")].data(), {qd, D}), false, 0));
    OK(be->linear_backward(f32(dh1.data(), {n, D}),
                           f32(g[L(l, "self_attn.k_proj.weight")].data(), {kvd, D}),
                           Tensor(dbias(l, "self_attn.k_proj.bias"), DType::kF32, {kvd}),
                           f32(dk.data(), {n, kvd}), f32(a.h1.data(), {n, D}),
                           f32(p[L(l, "self_attn.k_proj.weight")].data(), {kvd, D}), true, 0));
    OK(be->linear_backward(f32(dh1.data(), {n, D}),
                           f32(g[L(l, "self_attn.v_proj.weight")].data(), {kvd, D}),
                           Tensor(dbias(l, "self_attn.v_proj.bias"), DType::kF32, {kvd}),
                           f32(dv.data(), {n, kvd}), f32(a.h1.data(), {n, D}),
                           f32(p[L(l, "self_attn.v_proj.weight")].data(), {kvd, D}), true, 0));
    OK(be->rmsnorm_backward(
        f32(dx.data(), {n, D}), f32(g[L(l, "input_layernorm.weight")].data(), {D}),
        f32(dh1.data(), {n, D}), f32(a.x.data(), {n, D}),
        f32(p[L(l, "input_layernorm.weight")].data(), {D}), f32(a.rstd1.data(), {n}), true, 0));
  }
  OK(be->embedding_backward(f32(g[emb].data(), {V, D}), i32(ids.data(), {n}),
                            f32(dx.data(), {n, D}), 0));
  OK(be->device().synchronize_stream(0));

  double worst = 0.0;
  std::string worst_key;
  for (const auto& [key, grad] : g) {
    Vec want;
    OK(load(gold, "grad." + key, &want));
    ASSERT_EQ(want.size(), grad.size()) << key;
    const double err = rel_l2(grad.data(), want.data(), want.size());
    EXPECT_LT(err, 1e-4) << "grad." << key;
    if (err > worst) worst = err, worst_key = key;
  }
  std::printf("%s%s: logits rel L2 %.2e, loss %.8f (ref %.8f), worst gradient rel L2 %.2e (%s)\n",
              name.c_str(), strict ? " (strict streams)" : "", logits_err, loss_sum / targets,
              ref_loss, worst, worst_key.c_str());
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenModel,
                         ::testing::Combine(::testing::Values("stories260K", "qwen2-tiny",
                                                              "llama-mha-tiny"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param);
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s + (std::get<1>(info.param) ? "_strict" : "_synchronous");
                         });

}  // namespace
}  // namespace spillway::compute
