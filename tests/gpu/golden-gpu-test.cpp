// The three golden cases of ../shared/data/golden (PyTorch in float64) through the StreamingEngine
// on the CUDA backend, as tests/engine/train/golden-test.cpp runs them on the CPU: logits, loss and
// every parameter gradient of one forward/backward, and the 4-step AdamW trajectory, within the
// bf16 GPU tolerances of ../shared/data/README.md (2e-2 relative L2; losses 2e-2 absolute). Each
// case runs with the whole batch as one micro-batch and checkpoints on the device, and with
// micro-batches of one sequence and checkpoints in pinned host memory. And the same job twice
// gives the same bits: step losses and master weights after 3 steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <ostream>

#include "compute/backend-loader.h"
#include "core/file-util.h"
#include "engine/train/golden-util.h"
#include "gpu-test-util.h"
#include "test-data.h"
#include "train/data-parallel-engine.h"
#include "train/optimizer.h"
#include "train/streaming-engine.h"

namespace spillway {
namespace {

using testing::read_f32;
using testing::read_i32;
using testing::rel_l2;

// ../shared/data/README.md: a bf16 GPU path's logits and gradients within 2e-2 relative L2, its
// losses within 2e-2 absolute.
constexpr double kTol = 2e-2;

// Per-tensor gradient bound. 2e-2, except for stories260K: a trained model whose loss (1.63) is a
// small residual of confident predictions, so a bf16 forward's logit error (~6e-3 relative) moves
// the softmax, and with it every gradient, by several percent. That is the bf16 floor, not an
// engine error: PyTorch itself on the same GPU (tests/bench/torch_bf16_gradient_floor.py) lands all
// 47 of stories260K's gradients above 2e-2 in pure bf16 (worst 0.109) and 42 of 47 under autocast
// with fp32 weights (worst 0.063); this engine's worst is 0.074, with its whole-model gradient norm
// within 2e-2. The two random-initialised models meet 2e-2 on every tensor.
// gemma3-tiny too sits above 2e-2 in bf16 whoever computes it: PyTorch's own bf16 lands its logits
// at 2.1e-2 (pure) and 1.5e-2 (autocast) and 40 and 38 of its 41 gradients above 2e-2, worst 0.048
// and 0.036 (post_feedforward_layernorm; tests/bench/torch_bf16_gradient_floor.py on the CPU's
// bf16, 2026-11-27): its logits are held to 4e-2 and its gradients to 0.08, as stories260K's.
// The repository's random-initialised cases of the newer families (std 0.1 weights and perturbed
// norms, so that attention is far from uniform) also sit at the bf16 floor: PyTorch's pure bf16
// puts 18 of qwen3-tiny's 25 gradients above 2e-2 (worst 0.037, q_norm), 1 of phi3-tiny's 15
// (0.024) and 12 of phi3-longrope's 14 (0.030) (torch_bf16_gradient_floor.py, CPU bf16,
// 2026-11-27); this engine measured 0.032, 0.022 and 0.025 on the H100 the same day. Their
// gradients are held to 0.04, their logits to 2e-2.
double grad_tolerance(const std::string& model) {
  if (model == "stories260K" || model == "gemma3-tiny") return 0.08;
  if (model == "qwen3-tiny" || model == "phi3-tiny" || model == "phi3-longrope") return 0.04;
  return kTol;
}
double logits_tolerance(const std::string& model) {
  return model == "gemma3-tiny" ? 4e-2 : kTol;
}

struct Golden {
  std::string name;
  testing::GoldenCase files;
  int B = 0, T = 0;
  nlohmann::json meta;
  std::unique_ptr<TensorStore> fb, traj, weights;
  ParameterLayout layout;
};

Golden load_golden(const std::string& name) {
  Golden g;
  g.name = name;
  g.files = testing::golden_case(name);
  auto meta = read_file(g.files.file("meta.json"));
  EXPECT_TRUE(meta.ok()) << meta.status().to_string();
  g.meta = nlohmann::json::parse(*meta);
  g.B = g.meta["B"];
  g.T = g.meta["T"];
  auto fb = TensorStore::open(g.files.file("forward_backward.safetensors"));
  auto traj = TensorStore::open(g.files.file("adamw_trajectory.safetensors"));
  auto weights = TensorStore::open(g.files.model);
  EXPECT_TRUE(fb.ok() && traj.ok() && weights.ok());
  g.fb = std::make_unique<TensorStore>(std::move(*fb));
  g.traj = std::make_unique<TensorStore>(std::move(*traj));
  g.weights = std::make_unique<TensorStore>(std::move(*weights));
  auto config = ModelConfig::load(g.files.model);
  EXPECT_TRUE(config.ok());
  g.layout = ParameterLayout::build(*config);
  return g;
}

struct Param {
  std::string model;
  int micro_batch_size;
  bool checkpoints_on_device;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << p.model << " micro-batch " << p.micro_batch_size << ", checkpoints on the "
      << (p.checkpoints_on_device ? "device" : "host");
}

// The model's state and an engine on `backend` (which must outlive it).
struct Rig {
  std::unique_ptr<ModelState> state;
  std::unique_ptr<StreamingEngine> engine;
};

// `hbm_blocks`: the first blocks whose state stays on the GPU (the HBM state tier).
Rig make_rig(const Golden& g, compute::Backend& backend, const Param& p, bool with_optimizer,
             int hbm_blocks = 0) {
  Rig r;
  StreamingConfig cfg;
  cfg.hbm_state_blocks = hbm_blocks;
  cfg.weight_slots = 2;
  cfg.micro_batch_size = p.micro_batch_size;
  cfg.max_micro_batches = g.B / p.micro_batch_size;
  cfg.seq_len = g.T;
  cfg.lm_head_chunk = 37;  // odd, so chunk edges are exercised
  cfg.keep_checkpoints_on_device = p.checkpoints_on_device;
  cfg.logits_tokens =
      p.micro_batch_size * g.T;  // forward() hands back the logits (tiny vocabularies)
  auto state = ModelState::create(g.layout, with_optimizer);
  EXPECT_TRUE(state.ok()) << state.status().to_string();
  if (!state.ok()) return r;
  r.state = std::move(*state);
  EXPECT_TRUE(r.state->load_weights(*g.weights).ok());
  auto engine = StreamingEngine::create(backend, *r.state, cfg);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (engine.ok()) r.engine = std::move(*engine);
  return r;
}

StepBatch batch_of(const std::vector<int32_t>& ids, const std::vector<int32_t>& labels, int B,
                   int T, int mb) {
  StepBatch b;
  b.micro_batches = B / mb;
  b.micro_batch_size = mb;
  b.seq_len = T;
  b.input_ids = ids;
  b.labels = labels;
  return b;
}

// Step losses, pre-clip norms and the master weights after `steps` AdamW steps on the golden
// batches.
struct Trajectory {
  std::vector<double> losses, norms;
  std::vector<std::vector<float>> master, m, v;  // per block
};

Trajectory run_steps(const Golden& g, compute::Backend& backend, const Param& p, int steps,
                     int hbm_blocks = 0) {
  Trajectory t;
  Rig rig = make_rig(g, backend, p, true, hbm_blocks);
  if (!rig.engine) return t;
  const auto& h = g.meta["adamw"];
  AdamWConfig cfg;
  cfg.beta1 = h["beta1"];
  cfg.beta2 = h["beta2"];
  cfg.eps = h["eps"];
  cfg.weight_decay = h["weight_decay"];
  Optimizer opt(*rig.state, cfg, h["clip_grad_norm"].get<double>());
  rig.engine->set_weight_gate([&](size_t b) { opt.wait_block(b); });
  EXPECT_TRUE(opt.set_hbm_state(rig.engine->hbm_state()).ok());
  struct Ungate {  // the engine outlives `opt`
    StreamingEngine& e;
    ~Ungate() { e.set_weight_gate(nullptr); }
  } ungate{*rig.engine};
  for (int step = 0; step < steps; ++step) {
    const auto ids = read_i32(*g.traj, "batch" + std::to_string(step) + ".input_ids");
    const auto labels = read_i32(*g.traj, "batch" + std::to_string(step) + ".labels");
    auto r = rig.engine->forward_backward(batch_of(ids, labels, g.B, g.T, p.micro_batch_size));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return t;
    t.losses.push_back(r->loss());
    t.norms.push_back(
        opt.begin_step(h["lr"].get<double>(), r->grad_sumsq).grad_norm);  // as the trainer
  }
  const Status synced = opt.sync_host();  // the HBM tier's blocks back on the host
  EXPECT_TRUE(synced.ok()) << synced.to_string();
  for (size_t b = 0; b < g.layout.num_blocks(); ++b) {
    const size_t n = g.layout.blocks()[b].numel;
    const float* w = rig.state->master(b);
    const float* m = rig.state->exp_avg(b);
    const float* v = rig.state->exp_avg_sq(b);
    t.master.emplace_back(w, w + n);
    t.m.emplace_back(m, m + n);
    t.v.emplace_back(v, v + n);
  }
  return t;
}

class GoldenGpu : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    SPILLWAY_REQUIRE_DATA();
    auto cuda = compute::make_backend({.kind = "cuda"});
    if (!cuda.ok()) GTEST_SKIP() << "no usable CUDA backend: " << cuda.status().to_string();
    backend_ = std::move(cuda->backend);
    g_ = load_golden(GetParam().model);
  }
  std::unique_ptr<compute::Backend> backend_;
  Golden g_;
};

TEST_P(GoldenGpu, LogitsLossAndGradients) {
  Rig rig = make_rig(g_, *backend_, GetParam(), false);
  ASSERT_TRUE(rig.engine);
  const auto ids = read_i32(*g_.fb, "input_ids");
  const auto labels = read_i32(*g_.fb, "labels");
  const StepBatch batch = batch_of(ids, labels, g_.B, g_.T, GetParam().micro_batch_size);
  const double ref_loss = g_.meta["loss"].get<double>();

  const auto ref_logits = read_f32(*g_.fb, "logits");
  std::vector<float> logits(ref_logits.size());
  auto fwd = rig.engine->forward(batch, logits.data());
  ASSERT_TRUE(fwd.ok()) << fwd.status().to_string();
  const double logits_err = rel_l2(logits.data(), ref_logits.data(), logits.size());
  EXPECT_LT(logits_err, logits_tolerance(GetParam().model)) << "logits";
  EXPECT_NEAR(fwd->loss(), ref_loss, kTol);

  auto r = rig.engine->forward_backward(batch);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NEAR(r->loss(), ref_loss, kTol);
  double sq = 0, worst = 0;
  std::string worst_name;
  for (size_t b = 0; b < g_.layout.num_blocks(); ++b) {
    for (const ParamView& p : g_.layout.blocks()[b].params) {
      const auto ref = read_f32(*g_.fb, "grad." + p.name);
      ASSERT_EQ(ref.size(), p.numel) << p.name;
      const float* grad = rig.state->grad(b) + p.offset;
      const double err = rel_l2(grad, ref.data(), p.numel);
      EXPECT_LT(err, grad_tolerance(GetParam().model)) << "grad." << p.name;
      if (err > worst) worst = err, worst_name = p.name;
      for (size_t i = 0; i < p.numel; ++i) sq += double(grad[i]) * grad[i];
    }
  }
  const double ref_norm = g_.meta["grad_norm"].get<double>();
  EXPECT_NEAR(std::sqrt(sq), ref_norm, kTol * ref_norm);
  // The per-block sums of squares reduced on the GPU are the host's over the downloaded gradients,
  // but for the order of the additions.
  ASSERT_EQ(r->grad_sumsq.size(), g_.layout.num_blocks());
  for (size_t b = 0; b < g_.layout.num_blocks(); ++b) {
    const double host = sum_of_squares(rig.state->grad(b), g_.layout.blocks()[b].numel);
    EXPECT_NEAR(r->grad_sumsq[b], host, 1e-14 * host) << "block " << b;
  }
  std::printf(
      "%s mb%d: logits rel L2 %.2e, loss %.6f (ref %.6f), worst gradient rel L2 %.2e (%s)\n",
      g_.name.c_str(), GetParam().micro_batch_size, logits_err, r->loss(), ref_loss, worst,
      worst_name.c_str());
}

TEST_P(GoldenGpu, AdamWTrajectory) {
  const int steps = g_.meta["adamw"]["steps"];
  const Trajectory t = run_steps(g_, *backend_, GetParam(), steps);
  ASSERT_EQ(t.losses.size(), size_t(steps));
  for (int step = 0; step < steps; ++step) {
    const double want = g_.meta["step_losses"][step].get<double>();
    EXPECT_NEAR(t.losses[step], want, kTol) << "step " << step + 1;
    std::printf("%s mb%d step %d: loss %.6f (ref %.6f), grad norm %.6f (ref %.6f)\n",
                g_.name.c_str(), GetParam().micro_batch_size, step + 1, t.losses[step], want,
                t.norms[step], g_.meta["step_grad_norms_before_clip"][step].get<double>());
  }
}

// The same job twice: bit-identical step losses and master weights (no atomics whose order
// changes results, fixed cuBLASLt algorithms, the CPU AdamW per element).
TEST_P(GoldenGpu, Deterministic) {
  const Trajectory a = run_steps(g_, *backend_, GetParam(), 3);
  const Trajectory b = run_steps(g_, *backend_, GetParam(), 3);
  ASSERT_EQ(a.losses.size(), 3u);
  ASSERT_EQ(b.losses.size(), 3u);
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(std::memcmp(&a.losses[step], &b.losses[step], sizeof(double)), 0)
        << "step " << step + 1 << ": " << a.losses[step] << " vs " << b.losses[step];
  }
  ASSERT_EQ(a.master.size(), b.master.size());
  for (size_t blk = 0; blk < a.master.size(); ++blk) {
    EXPECT_TRUE(gpu_testing::same_bits(a.master[blk], b.master[blk]))
        << "block " << blk << "'s weights differ";
  }
}

// The HBM state tier on the GPU: the AdamW trajectory with the first two blocks' state, and with
// every block's, on the device gives the all-DRAM run's bits: losses, master weights and moments
// (the GPU's AdamW is the CPU's operation for operation, compute/adamw-step.h).
TEST_P(GoldenGpu, SameBitsWithTheStateInHbm) {
  const int steps = g_.meta["adamw"]["steps"];
  const Trajectory dram = run_steps(g_, *backend_, GetParam(), steps, 0);
  for (int blocks : {2, static_cast<int>(g_.layout.num_blocks())}) {
    const Trajectory hbm = run_steps(g_, *backend_, GetParam(), steps, blocks);
    ASSERT_EQ(hbm.losses.size(), dram.losses.size()) << blocks << " blocks in HBM";
    for (size_t step = 0; step < dram.losses.size(); ++step) {
      EXPECT_EQ(std::memcmp(&hbm.losses[step], &dram.losses[step], sizeof(double)), 0)
          << blocks << " blocks in HBM, step " << step + 1;
      EXPECT_EQ(std::memcmp(&hbm.norms[step], &dram.norms[step], sizeof(double)), 0)
          << blocks << " blocks in HBM, step " << step + 1;
    }
    ASSERT_EQ(hbm.master.size(), dram.master.size());
    for (size_t blk = 0; blk < dram.master.size(); ++blk) {
      EXPECT_TRUE(gpu_testing::same_bits(hbm.master[blk], dram.master[blk]))
          << blocks << " blocks in HBM: block " << blk << "'s weights differ";
      EXPECT_TRUE(gpu_testing::same_bits(hbm.m[blk], dram.m[blk]))
          << blocks << " blocks in HBM: block " << blk << "'s exp_avg differs";
      EXPECT_TRUE(gpu_testing::same_bits(hbm.v[blk], dram.v[blk]))
          << blocks << " blocks in HBM: block " << blk << "'s exp_avg_sq differs";
    }
  }
}

// Data parallel over every GPU of the machine (two or more): the golden trajectory with the
// step's micro-batches split over the GPUs gives the reference's losses to the bf16 tolerance and
// the one-GPU run's within it, and the same bits twice (NCCL's reduce-scatter is deterministic for
// a given group).
TEST_P(GoldenGpu, DataParallelOverEveryGpu) {
  auto count = compute::cuda_device_count();
  if (!count.ok() || *count < 2) GTEST_SKIP() << "one GPU: data parallel needs two or more";
  const int mb = GetParam().micro_batch_size;
  int n = *count;
  while (n > 1 && (g_.B / mb) % n != 0) --n;
  if (n < 2) GTEST_SKIP() << g_.B / mb << " micro-batches do not split over the GPUs";
  std::vector<int> others;
  for (int d = 1; d < n; ++d) others.push_back(d);
  auto peers = compute::make_cuda_backends(others);
  ASSERT_TRUE(peers.ok()) << peers.status().to_string();
  std::vector<compute::Backend*> group = {backend_.get()};
  for (auto& b : *peers) group.push_back(b.get());
  const int steps = g_.meta["adamw"]["steps"];
  const auto& h = g_.meta["adamw"];
  auto trajectory = [&](std::vector<double>* losses) -> std::vector<std::vector<float>> {
    StreamingConfig cfg;
    cfg.weight_slots = 2;
    cfg.micro_batch_size = mb;
    cfg.max_micro_batches = g_.B / mb / n;
    cfg.seq_len = g_.T;
    cfg.keep_checkpoints_on_device = GetParam().checkpoints_on_device;
    auto state = ModelState::create(g_.layout, true);
    EXPECT_TRUE(state.ok());
    EXPECT_TRUE((*state)->load_weights(*g_.weights).ok());
    auto engine = DataParallelEngine::create(group, **state, cfg);
    EXPECT_TRUE(engine.ok()) << engine.status().to_string();
    if (!engine.ok()) return {};
    AdamWConfig ac;
    ac.beta1 = h["beta1"];
    ac.beta2 = h["beta2"];
    ac.eps = h["eps"];
    ac.weight_decay = h["weight_decay"];
    Optimizer opt(**state, ac, h["clip_grad_norm"].get<double>());
    (*engine)->set_weight_gate([&](size_t b) { opt.wait_block(b); });
    for (int step = 0; step < steps; ++step) {
      const auto ids = read_i32(*g_.traj, "batch" + std::to_string(step) + ".input_ids");
      const auto labels = read_i32(*g_.traj, "batch" + std::to_string(step) + ".labels");
      auto r = (*engine)->forward_backward(batch_of(ids, labels, g_.B, g_.T, mb));
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (!r.ok()) break;
      losses->push_back(r->loss());
      opt.begin_step(h["lr"].get<double>(), r->grad_sumsq);
    }
    opt.wait_all();
    (*engine)->set_weight_gate(nullptr);
    std::vector<std::vector<float>> master;
    for (size_t b = 0; b < g_.layout.num_blocks(); ++b)
      master.emplace_back((*state)->master(b), (*state)->master(b) + g_.layout.blocks()[b].numel);
    return master;
  };
  std::vector<double> a, b;
  const auto ma = trajectory(&a);
  const auto mb2 = trajectory(&b);
  const Trajectory one = run_steps(g_, *backend_, GetParam(), steps);
  ASSERT_EQ(a.size(), size_t(steps));
  ASSERT_EQ(b.size(), size_t(steps));
  for (int step = 0; step < steps; ++step) {
    const double want = g_.meta["step_losses"][step].get<double>();
    EXPECT_NEAR(a[step], want, kTol) << "step " << step + 1;
    EXPECT_NEAR(a[step], one.losses[step], kTol) << "step " << step + 1;
    EXPECT_EQ(std::memcmp(&a[step], &b[step], sizeof(double)), 0) << "step " << step + 1;
    std::printf("%s mb%d on %d GPUs, step %d: loss %.6f (one GPU %.6f, ref %.6f)\n",
                g_.name.c_str(), mb, n, step + 1, a[step], one.losses[step], want);
  }
  for (size_t blk = 0; blk < ma.size(); ++blk)
    EXPECT_TRUE(gpu_testing::same_bits(ma[blk], mb2[blk])) << "block " << blk << " twice";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GoldenGpu,
    ::testing::Values(Param{"stories260K", 4, true}, Param{"stories260K", 1, false},
                      Param{"qwen2-tiny", 3, true}, Param{"qwen2-tiny", 1, false},
                      Param{"llama-mha-tiny", 2, true}, Param{"llama-mha-tiny", 1, false},
                      Param{"qwen3-tiny", 3, true}, Param{"qwen3-tiny", 1, false},
                      Param{"phi3-tiny", 3, true}, Param{"phi3-tiny", 1, false},
                      Param{"phi3-longrope", 2, true}, Param{"phi3-longrope", 1, false},
                      Param{"gemma3-tiny", 2, true}, Param{"gemma3-tiny", 1, false},
                      Param{"llama-long", 1, true}, Param{"llama-long", 1, false}),
    [](const auto& info) {
      return testing::test_name(info.param.model + "_mb" +
                                std::to_string(info.param.micro_batch_size) +
                                (info.param.checkpoints_on_device ? "_device" : "_host"));
    });

}  // namespace
}  // namespace spillway
