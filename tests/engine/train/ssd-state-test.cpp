// AdamW state on the SSD tier: the pipelined store gives the same update as DRAM, and each
// injected fault (EIO, short write, ENOSPC, a flipped byte) is a clear error that never touches
// the last good checkpoint.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/file-util.h"
#include "test-data.h"
#include "tiers/fault-env.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/streaming-engine.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;

struct Rig {
  std::unique_ptr<compute::Backend> backend = compute::make_cpu_backend(0);
  std::unique_ptr<ModelState> state;
  std::unique_ptr<OptimizerStateStore> store;
  std::unique_ptr<StreamingEngine> engine;
  std::unique_ptr<Optimizer> opt;
  std::vector<int32_t> ids, labels;

  Status init(bool on_ssd, bool master, const std::string& folder, StorageEnv* env) {
    auto config = ModelConfig::load(testing::data_path("models/stories260K"));
    if (!config.ok()) return config.status();
    SPW_ASSIGN_OR_RETURN(state, ModelState::create(ParameterLayout::build(*config), !on_ssd));
    SPW_ASSIGN_OR_RETURN(TensorStore weights,
                         TensorStore::open(testing::data_path("models/stories260K")));
    SPW_RETURN_IF_ERROR(state->load_weights(weights));
    if (on_ssd) {
      SsdConfig sc;
      sc.folder = folder;
      sc.block_bytes = 64 << 10;
      SPW_ASSIGN_OR_RETURN(store, make_ssd_state(*state, sc, master, nullptr, env));
    } else {
      store = make_dram_state(*state);
    }
    StreamingConfig cfg;
    cfg.micro_batch_size = 2;
    cfg.seq_len = 32;
    SPW_ASSIGN_OR_RETURN(engine, StreamingEngine::create(*backend, *state, cfg));
    opt = std::make_unique<Optimizer>(*state, AdamWConfig{1e-3, 0.9, 0.95, 1e-8, 0.1}, 1.0,
                                      store.get());
    Optimizer* o = opt.get();
    engine->set_weight_gate([o](size_t b) { o->wait_block(b); });
    for (int i = 0; i < 64; ++i)
      ids.push_back((i * 37 + 11) % 512), labels.push_back((i * 53 + 5) % 512);
    return {};
  }
  Status step() {
    SPW_ASSIGN_OR_RETURN(StepResult r, engine->forward_backward(StepBatch{1, 2, 32, ids, labels}));
    (void)r;
    opt->begin_step(1e-3);
    opt->wait_all();
    return opt->status();
  }
};

TEST(SsdState, SameUpdatesAsDramBitForBit) {
  SPILLWAY_REQUIRE_DATA();
  testing::TempDir dir;
  Rig dram, ssd, ssd_master;
  ASSERT_TRUE(dram.init(false, false, "", StorageEnv::posix()).ok());
  ASSERT_TRUE(ssd.init(true, false, dir.path() + "/a", StorageEnv::posix()).ok());
  ASSERT_TRUE(ssd_master.init(true, true, dir.path() + "/b", StorageEnv::posix()).ok());
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(dram.step().ok());
    ASSERT_TRUE(ssd.step().ok());
    ASSERT_TRUE(ssd_master.step().ok());
  }
  std::vector<float> m(dram.state->layout().max_block_numel()), v(m.size()), master(m.size());
  for (size_t b = 0; b < dram.state->num_blocks(); ++b) {
    const size_t n = dram.state->layout().blocks()[b].numel;
    EXPECT_EQ(0, std::memcmp(dram.state->master(b), ssd.state->master(b), n * 4)) << "block " << b;
    EXPECT_EQ(0, std::memcmp(dram.state->master(b), ssd_master.state->master(b), n * 4))
        << "block " << b;
    ASSERT_TRUE(ssd_master.store->read_block(b, master.data(), m.data(), v.data()).ok());
    EXPECT_EQ(0, std::memcmp(dram.state->master(b), master.data(), n * 4));
    EXPECT_EQ(0, std::memcmp(dram.state->exp_avg(b), m.data(), n * 4));
    EXPECT_EQ(0, std::memcmp(dram.state->exp_avg_sq(b), v.data(), n * 4));
  }
  EXPECT_GT(ssd.store->ssd_read_bytes(), 0u);
}

struct Fault {
  const char* name;
  FaultPlan (*plan)(int64_t ops, int64_t writes, int64_t reads);
  const char* message;  // part of the error
};

class SsdFaults : public ::testing::TestWithParam<Fault> {};

TEST_P(SsdFaults, ClearErrorAndLastCheckpointIntact) {
  SPILLWAY_REQUIRE_DATA();
  testing::TempDir dir;
  FaultInjectingEnv env;
  Rig rig;
  ASSERT_TRUE(rig.init(true, false, dir.path() + "/state", &env).ok());
  ASSERT_TRUE(rig.step().ok());
  TrainerState ts;
  ts.step = 1;
  auto good = save_checkpoint(dir.path() + "/checkpoints", *rig.state, ts, rig.store.get());
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  auto before = read_file(*good + "/optimizer.safetensors");
  ASSERT_TRUE(before.ok());

  env.set_plan(GetParam().plan(env.ops(), env.writes(), env.reads()));
  Status st = rig.step();
  if (st.ok()) {  // a fault on a later op: the next checkpoint reads every block
    ts.step = 2;
    st = save_checkpoint(dir.path() + "/checkpoints", *rig.state, ts, rig.store.get()).status();
  }
  ASSERT_FALSE(st.ok()) << GetParam().name;
  EXPECT_NE(st.to_string().find(GetParam().message), std::string::npos) << st.to_string();

  // The last good checkpoint is untouched and loads.
  auto after = read_file(*good + "/optimizer.safetensors");
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(*before == *after);
  EXPECT_FALSE(fs::exists(dir.path() + "/checkpoints/step-000002"));
  auto fresh = ModelState::create(rig.state->layout(), true);
  ASSERT_TRUE(fresh.ok());
  auto loaded = load_checkpoint(*good, **fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 1);
}

INSTANTIATE_TEST_SUITE_P(Kinds, SsdFaults,
                         ::testing::Values(Fault{"eio_on_read",
                                                 [](int64_t ops, int64_t, int64_t) {
                                                   FaultPlan p;
                                                   p.eio_on_op = ops + 1;
                                                   return p;
                                                 },
                                                 "Input/output error"},
                                           Fault{"short_write",
                                                 [](int64_t, int64_t w, int64_t) {
                                                   FaultPlan p;
                                                   p.short_write_on_write = w + 1;
                                                   return p;
                                                 },
                                                 "short"},
                                           Fault{"enospc",
                                                 [](int64_t, int64_t w, int64_t) {
                                                   FaultPlan p;
                                                   p.enospc_from_write = w + 1;
                                                   return p;
                                                 },
                                                 "is full"},
                                           Fault{"flipped_byte",
                                                 [](int64_t, int64_t, int64_t r) {
                                                   FaultPlan p;
                                                   p.flip_byte_on_read = r + 1;
                                                   return p;
                                                 },
                                                 "checksum"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace spillway
