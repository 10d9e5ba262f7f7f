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
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/backend.h"
#include "engine/compute/raw-ops.h"
#include "compute/cpu/cpu-backend.h"
#include "core/file-util.h"
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

#define OK(expr)                                      \
  do {                                                \
    ::spillway::Status s_ = (expr);                   \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

// (model folder, strict streams)
class GoldenModel : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(GoldenModel, ForwardBackwardMatchesPyTorch) {
  SPILLWAY_REQUIRE_DATA();
  const std::string name = std::get<0>(GetParam());
  const bool strict = std::get<1>(GetParam());
  auto cfg_r = ModelConfig::load(::spillway::testing::data_path("models/" + name));
  ASSERT_TRUE(cfg_r.ok()) << cfg_r.status().to_string();
  const ModelConfig& c = *cfg_r;
  auto weights_r = TensorStore::open(::spillway::testing::data_path("models/" + name));
  ASSERT_TRUE(weights_r.ok()) << weights_r.status().to_string();
  auto golden_r = TensorStore::open(
      ::spillway::testing::data_path("golden/" + name + "/forward_backward.safetensors"));
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
  const char* kLayerParams[] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                "mlp.down_proj.weight"};
  auto L = [](int l, const std::string& s) { return "model.layers." + std::to_string(l) + "." + s; };
  for (int l = 0; l < c.num_layers; ++l) {
    for (const char* s : kLayerParams) OK(param(L(l, s)));
    if (c.attention_bias) {
      for (const char* s : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"})
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
  auto be = make_cpu_backend(CpuBackendOptions{.poison_allocations = true, .strict_streams = strict});
  OpShapes shapes;
  shapes.tokens = n, shapes.batch = B, shapes.seq = T, shapes.hidden = D, shapes.heads = hq, shapes.kv_heads = hkv;
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
  OK(compute::raw_ops::embedding_forward(*be, x.data(), ids.data(), p[emb].data(), n, D, 0));
  for (int l = 0; l < c.num_layers; ++l) {
    Acts& a = acts[l];
    OK(copy(&a.x, x));
    a.h1.resize(x.size()), a.rstd1.resize(n);
    OK(compute::raw_ops::rmsnorm_forward(*be, a.h1.data(), a.rstd1.data(), a.x.data(), p[L(l, "input_layernorm.weight")].data(), n, D, c.rms_norm_eps, 0));
    a.q.resize(size_t(n) * qd), a.k.resize(size_t(n) * kvd), a.v.resize(size_t(n) * kvd);
    OK(compute::raw_ops::linear_forward(*be, a.q.data(), a.h1.data(), p[L(l, "self_attn.q_proj.weight")].data(), bias(l, "self_attn.q_proj.bias"), n, D, qd, 0));
    OK(compute::raw_ops::linear_forward(*be, a.k.data(), a.h1.data(), p[L(l, "self_attn.k_proj.weight")].data(), bias(l, "self_attn.k_proj.bias"), n, D, kvd, 0));
    OK(compute::raw_ops::linear_forward(*be, a.v.data(), a.h1.data(), p[L(l, "self_attn.v_proj.weight")].data(), bias(l, "self_attn.v_proj.bias"), n, D, kvd, 0));
    OK(compute::raw_ops::rope_forward(*be, a.q.data(), B, T, hq, hd, c.rope_theta, rs, 0));
    OK(compute::raw_ops::rope_forward(*be, a.k.data(), B, T, hkv, hd, c.rope_theta, rs, 0));
    a.att.resize(a.q.size()), a.lse.resize(size_t(B) * hq * T);
    OK(compute::raw_ops::attention_forward(*be, a.att.data(), a.lse.data(), a.q.data(), a.k.data(), a.v.data(), B, T, hq, hkv, hd, 0));
    OK(compute::raw_ops::linear_forward(*be, o.data(), a.att.data(), p[L(l, "self_attn.o_proj.weight")].data(), nullptr, n, qd, D, 0));
    OK(copy(&a.x2, a.x));
    OK(compute::raw_ops::add_inplace(*be, a.x2.data(), o.data(), a.x2.size(), 0));
    a.h2.resize(x.size()), a.rstd2.resize(n);
    OK(compute::raw_ops::rmsnorm_forward(*be, a.h2.data(), a.rstd2.data(), a.x2.data(), p[L(l, "post_attention_layernorm.weight")].data(), n, D, c.rms_norm_eps, 0));
    a.gate.resize(size_t(n) * F), a.up.resize(size_t(n) * F), a.act.resize(size_t(n) * F);
    OK(compute::raw_ops::linear_forward(*be, a.gate.data(), a.h2.data(), p[L(l, "mlp.gate_proj.weight")].data(), nullptr, n, D, F, 0));
    OK(compute::raw_ops::linear_forward(*be, a.up.data(), a.h2.data(), p[L(l, "mlp.up_proj.weight")].data(), nullptr, n, D, F, 0));
    OK(compute::raw_ops::swiglu_forward(*be, a.act.data(), a.gate.data(), a.up.data(), n, F, 0));
    OK(compute::raw_ops::linear_forward(*be, m.data(), a.act.data(), p[L(l, "mlp.down_proj.weight")].data(), nullptr, n, F, D, 0));
    OK(copy(&x, a.x2));
    OK(compute::raw_ops::add_inplace(*be, x.data(), m.data(), x.size(), 0));
  }
  Vec hf(x.size()), rstd_f(n), logits(size_t(n) * V), dhf(x.size());
  OK(compute::raw_ops::rmsnorm_forward(*be, hf.data(), rstd_f.data(), x.data(), p["model.norm.weight"].data(), n, D, c.rms_norm_eps, 0));
  int targets = 0;
  for (int32_t t : labels) targets += t != -100;
  Vec losses(n);
  OK(compute::raw_ops::lm_head_loss(*be, losses.data(), dhf.data(), g[head].data(), hf.data(), p[head].data(), labels.data(), n, D, V, 1.0f / targets, logits.data(), 37, 0));

  OK(be->device().synchronize_stream(0));
  double loss_sum = 0.0;
  for (float t : losses) loss_sum += t;
  Vec ref;
  OK(load(gold, "logits", &ref));
  const double logits_err = rel_l2(logits.data(), ref.data(), ref.size());
  EXPECT_LT(logits_err, 1e-4) << "logits";
  const std::string meta = ::spillway::testing::data_path("golden/" + name + "/meta.json");
  auto meta_text = read_file(meta);
  ASSERT_TRUE(meta_text.ok());
  const double ref_loss = nlohmann::json::parse(*meta_text)["loss"].get<double>();
  EXPECT_NEAR(loss_sum / targets, ref_loss, 1e-5);

  // Backward.
  Vec dx(x.size());
  Vec dact(size_t(n) * F), dgate(dact.size()), dup(dact.size()), dh2(size_t(n) * D);
  Vec datt(size_t(n) * qd), dq(datt.size()), dk(size_t(n) * kvd), dv(dk.size()), dh1(size_t(n) * D);
  OK(compute::raw_ops::rmsnorm_backward(*be, dx.data(), g["model.norm.weight"].data(), dhf.data(), x.data(), p["model.norm.weight"].data(), rstd_f.data(), n, D, false, 0));
  for (int l = c.num_layers - 1; l >= 0; --l) {
    Acts& a = acts[l];
    // MLP: x3 = x2 + down(swiglu(gate(h2), up(h2)))
    OK(compute::raw_ops::linear_backward(*be, dact.data(), g[L(l, "mlp.down_proj.weight")].data(), nullptr, dx.data(), a.act.data(), p[L(l, "mlp.down_proj.weight")].data(), n, F, D, false, 0));
    OK(compute::raw_ops::swiglu_backward(*be, dgate.data(), dup.data(), dact.data(), a.gate.data(), a.up.data(), n, F, 0));
    OK(compute::raw_ops::linear_backward(*be, dh2.data(), g[L(l, "mlp.gate_proj.weight")].data(), nullptr, dgate.data(), a.h2.data(), p[L(l, "mlp.gate_proj.weight")].data(), n, D, F, false, 0));
    OK(compute::raw_ops::linear_backward(*be, dh2.data(), g[L(l, "mlp.up_proj.weight")].data(), nullptr, dup.data(), a.h2.data(), p[L(l, "mlp.up_proj.weight")].data(), n, D, F, true, 0));
    OK(compute::raw_ops::rmsnorm_backward(*be, dx.data(), g[L(l, "post_attention_layernorm.weight")].data(), dh2.data(), a.x2.data(), p[L(l, "post_attention_layernorm.weight")].data(), a.rstd2.data(), n, D, true, 0));
    // Attention: x2 = x + o_proj(attn(rope(q(h1)), rope(k(h1)), v(h1)))
    OK(compute::raw_ops::linear_backward(*be, datt.data(), g[L(l, "self_attn.o_proj.weight")].data(), nullptr, dx.data(), a.att.data(), p[L(l, "self_attn.o_proj.weight")].data(), n, qd, D, false, 0));
    OK(compute::raw_ops::attention_backward(*be, dq.data(), dk.data(), dv.data(), datt.data(), a.q.data(), a.k.data(), a.v.data(), a.att.data(), a.lse.data(), B, T, hq, hkv, hd, 0));
    OK(compute::raw_ops::rope_backward(*be, dq.data(), B, T, hq, hd, c.rope_theta, rs, 0));
    OK(compute::raw_ops::rope_backward(*be, dk.data(), B, T, hkv, hd, c.rope_theta, rs, 0));
    OK(compute::raw_ops::linear_backward(*be, dh1.data(), g[L(l, "self_attn.q_proj.weight")].data(), dbias(l, "self_attn.q_proj.bias"), dq.data(), a.h1.data(), p[L(l, "self_attn.q_proj.weight")].data(), n, D, qd, false, 0));
    OK(compute::raw_ops::linear_backward(*be, dh1.data(), g[L(l, "self_attn.k_proj.weight")].data(), dbias(l, "self_attn.k_proj.bias"), dk.data(), a.h1.data(), p[L(l, "self_attn.k_proj.weight")].data(), n, D, kvd, true, 0));
    OK(compute::raw_ops::linear_backward(*be, dh1.data(), g[L(l, "self_attn.v_proj.weight")].data(), dbias(l, "self_attn.v_proj.bias"), dv.data(), a.h1.data(), p[L(l, "self_attn.v_proj.weight")].data(), n, D, kvd, true, 0));
    OK(compute::raw_ops::rmsnorm_backward(*be, dx.data(), g[L(l, "input_layernorm.weight")].data(), dh1.data(), a.x.data(), p[L(l, "input_layernorm.weight")].data(), a.rstd1.data(), n, D, true, 0));
  }
  OK(compute::raw_ops::embedding_backward(*be, g[emb].data(), ids.data(), dx.data(), n, D, 0));
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
              name.c_str(), strict ? " (strict streams)" : "", logits_err, loss_sum / targets, ref_loss, worst, worst_key.c_str());
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenModel,
                         ::testing::Combine(::testing::Values("stories260K", "qwen2-tiny", "llama-mha-tiny"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           std::string s = std::get<0>(info.param);
                           for (char& ch : s) if (ch == '-') ch = '_';
                           return s + (std::get<1>(info.param) ? "_strict" : "_synchronous");
                         });

}  // namespace
}  // namespace spillway::compute
