// A golden AdamW trajectory (../shared/data/golden, as golden-test.cpp) and a rig that trains it
// through the streaming engine and the optimizer with the state in a chosen place: DRAM, the SSD
// tier (moments, or moments and master), a mix of those per block, and the first blocks in the HBM
// state tier. Shared by the SSD, mixed and HBM state tests, which hold every placement to the same
// bits.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/file-util.h"
#include "engine-util.h"
#include "golden-util.h"
#include "model/safetensors.h"
#include "train/data-parallel-engine.h"
#include "train/hbm-state.h"
#include "train/optimizer-state.h"
#include "train/optimizer.h"
#include "train/streaming-engine.h"

namespace spillway::testing {

// Fails the test with the status's message unless `expr` (a Status) is ok.
#define ASSERT_OK(expr)                       \
  do {                                        \
    const Status st_ = (expr);                \
    ASSERT_TRUE(st_.ok()) << st_.to_string(); \
  } while (0)

// kMixed: the three host tiers at once (optimizer-state.h, BlockTiers), the rig's `mix` counts.
enum class Placement { kDram, kSsd, kSsdMaster, kMixed };

inline const char* placement_name(Placement p) {
  return p == Placement::kDram        ? "dram"
         : p == Placement::kSsd       ? "ssd"
         : p == Placement::kSsdMaster ? "ssd_master"
                                      : "mixed";
}

// One model's reference: meta.json and the batches and final parameters of the trajectory.
struct Golden {
  std::string name;
  testing::GoldenCase files;
  int B = 0, T = 0;
  nlohmann::json meta;
  std::unique_ptr<TensorStore> traj;
  ParameterLayout layout;

  explicit Golden(const std::string& n) : name(n), files(golden_case(n)) {
    meta = nlohmann::json::parse(*read_file(files.file("meta.json")));
    B = meta["B"];
    T = meta["T"];
    auto t = TensorStore::open(files.file("adamw_trajectory.safetensors"));
    EXPECT_TRUE(t.ok());
    traj = std::make_unique<TensorStore>(std::move(*t));
    layout = ParameterLayout::build(*ModelConfig::load(files.model));
  }
  // StepBatch views the tokens: they stay in `tokens`, one pair per step.
  StepBatch batch(int step, int mb) {
    auto& [ids, labels] = tokens[step];
    if (ids.empty()) {
      ids = read_i32(*traj, "batch" + std::to_string(step) + ".input_ids");
      labels = read_i32(*traj, "batch" + std::to_string(step) + ".labels");
    }
    return StepBatch{B / mb, mb, T, ids, labels};
  }
  std::map<int, std::pair<std::vector<int32_t>, std::vector<int32_t>>> tokens;
  AdamWConfig adamw() const {
    const auto& h = meta["adamw"];
    AdamWConfig c;
    c.lr = h["lr"];
    c.beta1 = h["beta1"];
    c.beta2 = h["beta2"];
    c.eps = h["eps"];
    c.weight_decay = h["weight_decay"];
    return c;
  }
};

// One step's result and each block's host gradient after it.
struct Step {
  StepResult result;
  std::vector<std::vector<float>> grads;  // each block's host gradient; empty: not held here
};

// The golden model's weights in a host state.
inline Result<std::unique_ptr<ModelState>> golden_state(const Golden& g) {
  SPW_ASSIGN_OR_RETURN(std::unique_ptr<ModelState> state, ModelState::create(g.layout, true));
  SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(g.files.model));
  SPW_RETURN_IF_ERROR(state->load_weights(weights));
  return state;
}

// One forward and backward of `engine` (a StreamingEngine or a DataParallelEngine) on `state`.
template <class Engine>
Result<Step> step_of(Engine& engine, ModelState& state, const StepBatch& batch) {
  Step s;
  SPW_ASSIGN_OR_RETURN(s.result, engine.forward_backward(batch));
  for (size_t b = 0; b < state.num_blocks(); ++b) {
    const float* p = state.grad(b);
    if (state.holds(b))
      s.grads.emplace_back(p, p + state.layout().blocks()[b].numel);
    else
      s.grads.emplace_back();  // another machine's block (block-owners.h)
  }
  return s;
}

// The same step over `ranks` CPU devices (train/data-parallel-engine.h) on engines of `cfg`: each
// takes its share of the micro-batches, positions included.
inline Result<Step> data_parallel_step(const Golden& g, const StepBatch& batch, int ranks,
                                       StreamingConfig cfg) {
  cfg.max_micro_batches = batch.micro_batches / ranks;
  StreamingConfig sized = cfg;
  sized.data_parallel_ranks = ranks;  // the padded gradient buffers
  std::vector<std::unique_ptr<compute::Backend>> backends;
  std::vector<compute::Backend*> group;
  for (int r = 0; r < ranks; ++r) {
    backends.push_back(engine_cpu_backend(g.layout, sized, true, size_t{256} << 20));
    group.push_back(backends.back().get());
  }
  SPW_ASSIGN_OR_RETURN(std::unique_ptr<ModelState> state, golden_state(g));
  SPW_ASSIGN_OR_RETURN(auto engine, DataParallelEngine::create(group, *state, cfg));
  return step_of(*engine, *state, batch);
}

// The rig's engine: two weight slots, so that layers stream; micro-batches of `mb` sequences;
// the first `hbm_blocks` blocks' state in the HBM tier.
inline StreamingConfig rig_config(const Golden& g, int mb, int hbm_blocks = 0) {
  StreamingConfig cfg;
  cfg.weight_slots = 2;
  cfg.micro_batch_size = mb;
  cfg.max_micro_batches = g.B / mb;
  cfg.seq_len = g.T;
  cfg.hbm_state_blocks = hbm_blocks;
  return cfg;
}

// Engine + optimizer over a device of two weight slots, so that layers stream, with the AdamW
// state in the chosen place. SSD blocks and pipeline pieces of 64 KiB: a parameter block is
// updated in several pieces that cut through tensors (bit-identity with DRAM's one pass per block
// checks the piecewise update) and its group ends mid SSD block.
constexpr size_t kChunkBytes = 64 << 10;
struct Rig {
  std::unique_ptr<compute::Backend> backend;
  std::unique_ptr<ModelState> state;
  std::unique_ptr<OptimizerStateStore> store;
  std::unique_ptr<StreamingEngine> engine;
  std::unique_ptr<Optimizer> opt;

  // `hbm_blocks`: the first blocks whose state the HBM tier holds (hbm-state.h), on a device
  // with room for just them beside what streaming needs and `extra_bytes`. `strict_streams`:
  // engine_cpu_backend's strict mode, where a missing wait between streams fails. `mix`: the host
  // tiers of Placement::kMixed. `device_checkpoint_layers`: StreamingConfig's (-1: as many as fit).
  Status init(const Golden& g, int mb, Placement p, const std::string& folder,
              TierCounters* counters = nullptr, StorageEnv* env = StorageEnv::posix(),
              int hbm_blocks = 0, bool strict_streams = false, BlockTiers mix = {},
              int device_checkpoint_layers = -1, size_t extra_bytes = 1024) {
    const size_t n = g.layout.num_blocks();
    const BlockTiers tiers = p == Placement::kDram  ? BlockTiers::all(n, BlockTiers::kDram)
                             : p == Placement::kSsd ? BlockTiers::all(n, BlockTiers::kSsdMoments)
                             : p == Placement::kSsdMaster ? BlockTiers::all(n, BlockTiers::kSsd)
                                                          : mix;
    StreamingConfig cfg = rig_config(g, mb, hbm_blocks);
    cfg.device_checkpoint_layers = device_checkpoint_layers;
    backend = engine_cpu_backend(
        g.layout, cfg, strict_streams,
        extra_bytes + HbmState::bytes(g.layout, static_cast<size_t>(hbm_blocks)));
    // The tier's blocks get no host gradient, as the trainer allocates them (run-assembly.cpp).
    SPW_ASSIGN_OR_RETURN(
        state, ModelState::create(g.layout, true, static_cast<size_t>(hbm_blocks), tiers.dram));
    SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(g.files.model));
    SPW_RETURN_IF_ERROR(state->load_weights(weights));
    if (!tiers.any_on_ssd()) {
      store = make_dram_state(*state);
    } else {
      SsdStateConfig sc;
      sc.store.folder = folder;
      sc.store.block_bytes = 64 << 10;
      sc.store.queue_depth = 8;
      sc.tiers = tiers;
      sc.chunk_bytes = kChunkBytes;
      SPW_ASSIGN_OR_RETURN(store, make_ssd_state(*state, sc, counters, env));
    }
    SPW_ASSIGN_OR_RETURN(engine, StreamingEngine::create(*backend, *state, cfg));
    opt = std::make_unique<Optimizer>(*state, g.adamw(),
                                      g.meta["adamw"]["clip_grad_norm"].get<double>(), store.get());
    Optimizer* o = opt.get();
    engine->set_weight_gate([o](size_t b) { o->wait_block(b); });
    return opt->set_hbm_state(engine->hbm_state());
  }

  // Golden steps [first, last): returns the first failure.
  Status run(Golden& g, int mb, int first, int last, std::vector<double>* losses = nullptr,
             std::vector<double>* norms = nullptr) {
    for (int s = first; s < last; ++s) {
      SPW_ASSIGN_OR_RETURN(StepResult r, engine->forward_backward(g.batch(s, mb)));
      StepStats st = opt->begin_step(g.meta["adamw"]["lr"].get<double>(), r.grad_sumsq);
      SPW_RETURN_IF_ERROR(opt->status());
      if (losses) losses->push_back(r.loss());
      if (norms) norms->push_back(st.grad_norm);
    }
    // Every block's state on the host, the HBM tier's too (block() and checkpoints read it).
    return opt->sync_host();
  }

  // master, m, v of block b as the store holds them.
  void block(size_t b, std::vector<float>* master, std::vector<float>* m, std::vector<float>* v) {
    const size_t n = state->layout().blocks()[b].numel;
    master->resize(n), m->resize(n), v->resize(n);
    ASSERT_TRUE(store->read_block(b, master->data(), m->data(), v->data()).ok());
  }
};

// A placement's losses and gradient norms: the reference's, to golden-test.cpp's tolerances, and
// the all-DRAM run's bit for bit.
inline void expect_golden_and_dram_steps(const Golden& g, const std::vector<double>& losses,
                                         const std::vector<double>& norms,
                                         const std::vector<double>& dram_losses,
                                         const std::vector<double>& dram_norms) {
  for (size_t s = 0; s < losses.size(); ++s) {
    EXPECT_NEAR(losses[s], g.meta["step_losses"][s].get<double>(),
                step_loss_tolerance(static_cast<int>(s)))
        << "step " << s + 1;
    EXPECT_NEAR(norms[s], g.meta["step_grad_norms_before_clip"][s].get<double>(), 1e-4 * norms[s]);
    EXPECT_EQ(losses[s], dram_losses[s]) << "step " << s + 1;
    EXPECT_EQ(norms[s], dram_norms[s]) << "step " << s + 1;
  }
}

// Every block's master, m and v of `a` and `b` are the same bits.
inline void expect_identical(Rig& a, Rig& b, const std::string& what) {
  std::vector<float> ma, mb, va, vb, pa, pb;
  for (size_t k = 0; k < a.state->num_blocks(); ++k) {
    a.block(k, &pa, &ma, &va);
    b.block(k, &pb, &mb, &vb);
    const std::string name = a.state->layout().blocks()[k].name;
    EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), pa.size() * 4))
        << what << ": master of " << name;
    EXPECT_EQ(0, std::memcmp(ma.data(), mb.data(), ma.size() * 4))
        << what << ": exp_avg of " << name;
    EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), va.size() * 4))
        << what << ": exp_avg_sq of " << name;
    // The compute copy the engine streams is the master itself on the CPU backend.
    EXPECT_EQ(0, std::memcmp(a.state->master(k), pa.data(), pa.size() * 4))
        << what << ": compute copy of " << name;
    EXPECT_EQ(0, std::memcmp(b.state->master(k), pb.data(), pb.size() * 4))
        << what << ": compute copy of " << name;
  }
}

// N CPU "devices" with the golden run's engine each, one host state in DRAM, one optimizer.
struct DpRig {
  std::vector<std::unique_ptr<compute::Backend>> backends;
  std::unique_ptr<ModelState> state;
  std::unique_ptr<OptimizerStateStore> store;
  std::unique_ptr<DataParallelEngine> engine;
  std::unique_ptr<Optimizer> opt;

  // `mb` sequences a micro-batch; the golden step's B / mb micro-batches split over `ranks`.
  Status init(const Golden& g, int mb, int ranks, bool strict = false, int hbm_blocks = 0) {
    StreamingConfig cfg = rig_config(g, mb, hbm_blocks);
    cfg.max_micro_batches = g.B / mb / ranks;
    StreamingConfig sized = cfg;
    sized.data_parallel_ranks = ranks;  // the padded gradient buffers
    std::vector<compute::Backend*> group;
    for (int r = 0; r < ranks; ++r) {
      // Room for every checkpoint: the link then carries only the step's own bytes.
      backends.push_back(engine_cpu_backend(g.layout, sized, strict, size_t{256} << 20));
      group.push_back(backends.back().get());
    }
    SPW_ASSIGN_OR_RETURN(state, ModelState::create(g.layout, true));
    SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(g.files.model));
    SPW_RETURN_IF_ERROR(state->load_weights(weights));
    store = make_dram_state(*state);
    SPW_ASSIGN_OR_RETURN(engine, DataParallelEngine::create(group, *state, cfg));
    opt = std::make_unique<Optimizer>(*state, g.adamw(),
                                      g.meta["adamw"]["clip_grad_norm"].get<double>(), store.get());
    Optimizer* o = opt.get();
    engine->set_weight_gate([o](size_t b) { o->wait_block(b); });
    return {};
  }

  Status run(Golden& g, int mb, int steps, std::vector<double>* losses,
             std::vector<double>* norms) {
    for (int s = 0; s < steps; ++s) {
      SPW_ASSIGN_OR_RETURN(StepResult r, engine->forward_backward(g.batch(s, mb)));
      StepStats st = opt->begin_step(g.meta["adamw"]["lr"].get<double>(), r.grad_sumsq);
      SPW_RETURN_IF_ERROR(opt->status());
      losses->push_back(r.loss());
      norms->push_back(st.grad_norm);
    }
    opt->wait_all();
    return {};
  }

  // Every block's master, m and v.
  std::vector<float> all_state() {
    std::vector<float> out, m, v, p;
    for (size_t b = 0; b < state->num_blocks(); ++b) {
      const size_t n = state->layout().blocks()[b].numel;
      p.resize(n), m.resize(n), v.resize(n);
      EXPECT_TRUE(store->read_block(b, p.data(), m.data(), v.data()).ok());
      out.insert(out.end(), p.begin(), p.end());
      out.insert(out.end(), m.begin(), m.end());
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

}  // namespace spillway::testing
