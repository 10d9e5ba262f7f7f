// The streaming schedule against the PyTorch reference (../shared/data/golden): logits, loss and
// every gradient of one forward/backward, and the AdamW trajectory, with a device capacity of
// about two layers so that layers really stream, and with the batch split into micro-batches.
#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "train/optimizer.h"
#include "train/streaming-engine.h"
#include "golden-util.h"
#include "test-data.h"

namespace spillway {
namespace {

using testing::read_f32;
using testing::read_i32;
using testing::rel_l2;

struct Golden {
  std::string name;
  int B = 0, T = 0;
  nlohmann::json meta;
  std::unique_ptr<TensorStore> fb, traj;
  ParameterLayout layout;
};

Golden load_golden(const std::string& name) {
  Golden g;
  g.name = name;
  auto meta = read_file(testing::data_path("golden/" + name + "/meta.json"));
  EXPECT_TRUE(meta.ok());
  g.meta = nlohmann::json::parse(*meta);
  g.B = g.meta["B"];
  g.T = g.meta["T"];
  auto fb = TensorStore::open(testing::data_path("golden/" + name + "/forward_backward.safetensors"));
  auto traj = TensorStore::open(testing::data_path("golden/" + name + "/adamw_trajectory.safetensors"));
  EXPECT_TRUE(fb.ok() && traj.ok());
  g.fb = std::make_unique<TensorStore>(std::move(*fb));
  g.traj = std::make_unique<TensorStore>(std::move(*traj));
  auto config = ModelConfig::load(testing::data_path("models/" + name));
  EXPECT_TRUE(config.ok());
  g.layout = ParameterLayout::build(*config);
  return g;
}

struct Rig {
  std::unique_ptr<compute::Backend> backend;
  std::unique_ptr<ModelState> state;
  std::unique_ptr<StreamingEngine> engine;
};

// A device just big enough for 2 weight slots, the gradient buffers and one micro-batch's
// activations, so every checkpoint goes to host memory and every layer streams.
Rig make_setup(const Golden& g, int micro_batch_size, bool with_optimizer) {
  Rig s;
  StreamingConfig cfg;
  cfg.weight_slots = 2;
  cfg.micro_batch_size = micro_batch_size;
  cfg.max_micro_batches = g.B / micro_batch_size;
  cfg.seq_len = g.T;
  cfg.lm_head_chunk = 37;  // odd, so chunk edges are exercised
  const uint64_t need = StreamingEngine::required_device_bytes(g.layout, cfg, 4);
  s.backend = compute::make_cpu_backend(need + 1024);
  auto state = ModelState::create(g.layout, with_optimizer);
  EXPECT_TRUE(state.ok());
  s.state = std::move(*state);
  auto store = TensorStore::open(testing::data_path("models/" + g.name));
  EXPECT_TRUE(store.ok());
  EXPECT_TRUE(s.state->load_weights(*store).ok());
  auto engine = StreamingEngine::create(*s.backend, *s.state, cfg);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  s.engine = std::move(*engine);
  // Layers must really stream: the device holds 2 of the L + 2 blocks and no checkpoint.
  EXPECT_EQ(s.engine->memory_plan().checkpoint_bytes_device, 0u);
  EXPECT_GT(s.engine->memory_plan().checkpoint_bytes_host, 0u);
  return s;
}

StepBatch batch_of(const std::vector<int32_t>& ids, const std::vector<int32_t>& labels, int B, int T, int mb) {
  StepBatch b;
  b.micro_batches = B / mb;
  b.micro_batch_size = mb;
  b.seq_len = T;
  b.input_ids = ids;
  b.labels = labels;
  return b;
}

struct Param {
  std::string model;
  int micro_batch_size;
};

class GoldenTest : public ::testing::TestWithParam<Param> {};

TEST_P(GoldenTest, LogitsLossAndGradients) {
  SPILLWAY_REQUIRE_DATA();
  Golden g = load_golden(GetParam().model);
  if (g.B % GetParam().micro_batch_size) GTEST_SKIP() << "batch of " << g.B << " does not split";
  Rig s = make_setup(g, GetParam().micro_batch_size, false);
  auto ids = read_i32(*g.fb, "input_ids");
  auto labels = read_i32(*g.fb, "labels");
  StepBatch batch = batch_of(ids, labels, g.B, g.T, GetParam().micro_batch_size);

  auto ref_logits = read_f32(*g.fb, "logits");
  std::vector<float> logits(ref_logits.size());
  auto fwd = s.engine->forward(batch, logits.data());
  ASSERT_TRUE(fwd.ok()) << fwd.status().to_string();
  EXPECT_LT(rel_l2(logits.data(), ref_logits.data(), logits.size()), 1e-4);
  EXPECT_NEAR(fwd->loss(), g.meta["loss"].get<double>(), 1e-5);

  auto r = s.engine->forward_backward(batch);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NEAR(r->loss(), g.meta["loss"].get<double>(), 1e-5);
  double sq = 0;
  for (size_t b = 0; b < g.layout.num_blocks(); ++b) {
    for (const ParamView& p : g.layout.blocks()[b].params) {
      auto ref = read_f32(*g.fb, "grad." + p.name);
      ASSERT_EQ(ref.size(), p.numel) << p.name;
      EXPECT_LT(rel_l2(s.state->grad(b) + p.offset, ref.data(), p.numel), 1e-4) << p.name;
      for (size_t i = 0; i < p.numel; ++i) sq += double(s.state->grad(b)[p.offset + i]) * s.state->grad(b)[p.offset + i];
    }
  }
  EXPECT_NEAR(std::sqrt(sq), g.meta["grad_norm"].get<double>(), 1e-4 * g.meta["grad_norm"].get<double>());
  // Every layer crossed the link: forward L+2 blocks, backward at least L more.
  EXPECT_GE(s.engine->h2d_bytes(), (2 * g.layout.config().num_layers + 2) * g.layout.layer_block_numel() * 4);
}

// AdamW divides each gradient element by its own running RMS, so the update of an element whose
// gradient is within a few eps of zero is ill-conditioned: on step 1 it is lr·g/(|g| + eps), and
// float32 noise in g (~1e-10 absolute here, as in PyTorch's float32 gradients) moves it by up to
// lr. Such elements are accidents, 1 to 8 per model here, like one stories260K v_proj weight whose
// step-1 gradient is 8e-9 among neighbours of 1e-2; they move the later step losses by up to 1e-5.
// An element is ill-conditioned when its step-1 update from our gradient and from the reference's
// differ by more than 1% of lr.
bool ill_conditioned(float grad, float ref_grad, double clip, double ref_clip, double eps) {
  auto update = [&](double g, double c) { return g * c / (std::abs(g * c) + eps); };  // in units of lr
  return std::abs(update(grad, clip) - update(ref_grad, ref_clip)) > 0.01;
}

struct Trajectory {
  Rig rig;
  std::vector<double> losses, norms;  // per step, before the update
  std::vector<std::vector<bool>> ill;  // per block, per element
  size_t ill_count = 0;
  double loss_after = 0;  // on batch{steps}, after the last update
};

// The golden AdamW steps through the streaming engine and the Optimizer. With `force`, the
// ill-conditioned elements of the step-1 gradient take the reference's value before the update.
Trajectory run_trajectory(const Golden& g, int micro_batch_size, bool force) {
  Trajectory t;
  t.rig = make_setup(g, micro_batch_size, true);
  const auto& h = g.meta["adamw"];
  AdamWConfig cfg;
  cfg.beta1 = h["beta1"];
  cfg.beta2 = h["beta2"];
  cfg.eps = h["eps"];
  cfg.weight_decay = h["weight_decay"];
  const double clip = h["clip_grad_norm"];
  Optimizer opt(*t.rig.state, cfg, clip);
  t.rig.engine->set_weight_gate([&](size_t b) { opt.wait_block(b); });
  struct Ungate {  // the engine outlives `opt`
    StreamingEngine& e;
    ~Ungate() { e.set_weight_gate(nullptr); }
  } ungate{*t.rig.engine};
  const int steps = h["steps"];
  std::vector<int32_t> ids, labels;  // the StepBatch views them
  auto batch = [&](int step) {
    ids = read_i32(*g.traj, "batch" + std::to_string(step) + ".input_ids");
    labels = read_i32(*g.traj, "batch" + std::to_string(step) + ".labels");
    return batch_of(ids, labels, g.B, g.T, micro_batch_size);
  };
  EXPECT_EQ(read_i32(*g.traj, "batch0.input_ids"), read_i32(*g.fb, "input_ids")) << "step 1 is forward_backward's batch";
  for (int step = 0; step < steps; ++step) {
    auto r = t.rig.engine->forward_backward(batch(step));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return t;
    t.losses.push_back(r->loss());
    if (step == 0) {
      double sq = 0;  // our pre-clip norm, to know our clip coefficient before begin_step
      for (size_t b = 0; b < g.layout.num_blocks(); ++b)
        for (size_t i = 0; i < g.layout.blocks()[b].numel; ++i) sq += double(t.rig.state->grad(b)[i]) * t.rig.state->grad(b)[i];
      const double our_clip = std::min(1.0, clip / std::sqrt(sq));
      const double ref_clip = std::min(1.0, clip / g.meta["grad_norm"].get<double>());
      t.ill.resize(g.layout.num_blocks());
      for (size_t b = 0; b < g.layout.num_blocks(); ++b) {
        t.ill[b].assign(g.layout.blocks()[b].numel, false);
        for (const ParamView& p : g.layout.blocks()[b].params) {
          auto ref_grad = read_f32(*g.fb, "grad." + p.name);
          for (size_t i = 0; i < p.numel; ++i) {
            float& gi = t.rig.state->grad(b)[p.offset + i];
            if (!ill_conditioned(gi, ref_grad[i], our_clip, ref_clip, cfg.eps)) continue;
            t.ill[b][p.offset + i] = true;
            ++t.ill_count;
            if (force) gi = ref_grad[i];
          }
        }
      }
    }
    t.norms.push_back(opt.begin_step(h["lr"].get<double>()).grad_norm);
  }
  opt.wait_all();
  auto after = t.rig.engine->forward(batch(steps));
  EXPECT_TRUE(after.ok());
  if (after.ok()) t.loss_after = after->loss();
  return t;
}

// The 4 AdamW steps, twice: as trained, and with the few ill-conditioned step-1 gradient elements
// given the reference's value, which shows that they alone account for what float32 adds.
// The key biases are the one exception to 1e-4 in both: their exact gradient vanishes but for RoPE,
// and what is left (down to 3e-11 per element, below eps at every step, so AdamW's update is lr/eps =
// 1e5 times the gradient) is below what float32 activations carry, however it is summed
// (Backend::attention_key_bias_backward does it in double). They land at 2.9e-4 to 4.9e-4 on every
// BLAS kernel and micro-batch split, where PyTorch in float32 lands at 3.6e-4 to 8.9e-4
// (tests/bench/torch_golden_precision.py): held to 1e-3.
TEST_P(GoldenTest, AdamWTrajectory) {
  SPILLWAY_REQUIRE_DATA();
  Golden g = load_golden(GetParam().model);
  if (g.B % GetParam().micro_batch_size) GTEST_SKIP() << "batch of " << g.B << " does not split";
  const auto& h = g.meta["adamw"];
  const int steps = h["steps"];
  const double max_drift = 2.0 * h["lr"].get<double>() * steps;  // an update of the other sign each step
  for (bool force : {false, true}) {
    SCOPED_TRACE(force ? "ill-conditioned step-1 elements given the reference's gradient" : "as trained");
    Trajectory t = run_trajectory(g, GetParam().micro_batch_size, force);
    ASSERT_EQ(t.losses.size(), size_t(steps));
    for (int step = 0; step < steps; ++step) {
      EXPECT_NEAR(t.losses[step], g.meta["step_losses"][step].get<double>(),
                  force ? 1e-5 : testing::step_loss_tolerance(step))
          << "step " << step + 1;
      EXPECT_NEAR(t.norms[step], g.meta["step_grad_norms_before_clip"][step].get<double>(), 1e-4 * t.norms[step]);
    }
    EXPECT_NEAR(t.loss_after, g.meta["loss_after"].get<double>(), force ? 1e-5 : 2 * testing::step_loss_tolerance(steps));
    size_t total = 0;
    double num = 0, den = 0;
    for (size_t b = 0; b < g.layout.num_blocks(); ++b) {
      for (const ParamView& p : g.layout.blocks()[b].params) {
        auto ref = read_f32(*g.traj, p.name);
        ASSERT_EQ(ref.size(), p.numel) << p.name;
        const float* x = t.rig.state->master(b) + p.offset;
        double tn = 0, td = 0;  // this tensor; unforced, over its well-conditioned elements
        for (size_t i = 0; i < p.numel; ++i) {
          const double d = double(x[i]) - ref[i], r2 = double(ref[i]) * ref[i];
          num += d * d;
          den += r2;
          if (force || !t.ill[b][p.offset + i]) {
            tn += d * d;
            td += r2;
          } else {
            EXPECT_LE(std::abs(d), max_drift) << p.name << "[" << i << "]";
          }
        }
        total += p.numel;
        EXPECT_LT(std::sqrt(tn / std::max(td, 1e-30)), p.name.ends_with("k_proj.bias") ? 1e-3 : 1e-4) << p.name;
      }
    }
    EXPECT_LT(std::sqrt(num / den), 1e-4);
    EXPECT_LE(t.ill_count, total / 10000) << "ill-conditioned elements";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenTest,
                         ::testing::Values(Param{"stories260K", 4}, Param{"stories260K", 2}, Param{"stories260K", 1},
                                           Param{"qwen2-tiny", 3}, Param{"qwen2-tiny", 1},
                                           Param{"llama-mha-tiny", 2}, Param{"llama-mha-tiny", 1}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_mb" + std::to_string(info.param.micro_batch_size);
                           for (char& c : n) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(StreamingEngine, TooSmallDeviceSaysWhatIsNeeded) {
  SPILLWAY_REQUIRE_DATA();
  Golden g = load_golden("stories260K");
  auto backend = compute::make_cpu_backend(64 * 1024);
  auto state = ModelState::create(g.layout, false);
  ASSERT_TRUE(state.ok());
  StreamingConfig cfg;
  cfg.seq_len = 64;
  auto engine = StreamingEngine::create(*backend, **state, cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(engine.status().message().find("lower micro_batch_size or seq_len"), std::string::npos);
}

}  // namespace
}  // namespace spillway
