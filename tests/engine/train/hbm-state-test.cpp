// The HBM state tier (train/hbm-state.h) on the CPU backend, where its "device" is an arena of the
// CPU backend and Backend::adamw runs compute/cpu/adamw: the schedule, not the GPU kernel (whose
// bits cuda_ops_test holds to the CPU's). A run gives the same bits whether a block's state lives
// in the tier, in DRAM or on the SSD: every loss, gradient norm, master weight and moment, for
// tied and untied heads and any number of blocks in the tier; checkpoints do not depend on the
// placement, and a run resumes bit-exact under another one. Plus what crosses the link and what
// a tier too large for the device says.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "state-rig.h"
#include "test-data.h"
#include "train/checkpoint.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using testing::expect_identical;
using testing::Golden;
using testing::Placement;
using testing::Rig;
using testing::rig_config;

struct Case {
  std::string model;
  int micro_batch_size;
  int hbm_blocks;  // -2: every block
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return spillway::testing::test_name(
      c.model + "_mb" + std::to_string(c.micro_batch_size) + "_hbm" +
      (c.hbm_blocks < 0 ? std::string("all") : std::to_string(c.hbm_blocks)));
}

class HbmStateGolden : public ::testing::TestWithParam<Case> {};

// The golden trajectory with the first blocks' state in the tier: the DRAM run's bits, and the
// reference's values to golden-test.cpp's tolerances.
TEST_P(HbmStateGolden, SameBitsAsDramAndTheReference) {
  SPILLWAY_REQUIRE_DATA();
  const Case c = GetParam();
  Golden g(c.model);
  const int blocks = c.hbm_blocks < 0 ? static_cast<int>(g.layout.num_blocks()) : c.hbm_blocks;
  Rig dram, hbm;
  ASSERT_OK(dram.init(g, c.micro_batch_size, Placement::kDram, ""));
  ASSERT_OK(
      hbm.init(g, c.micro_batch_size, Placement::kDram, "", nullptr, StorageEnv::posix(), blocks));
  ASSERT_NE(hbm.engine->hbm_state(), nullptr);
  EXPECT_EQ(hbm.engine->hbm_state()->blocks(), static_cast<size_t>(blocks));
  EXPECT_EQ(hbm.engine->memory_plan().state_blocks, static_cast<size_t>(blocks));
  EXPECT_EQ(hbm.engine->memory_plan().state_bytes, HbmState::bytes(g.layout, blocks));
  const int steps = g.meta["adamw"]["steps"];
  std::vector<double> losses, norms, dram_losses, dram_norms;
  ASSERT_OK(dram.run(g, c.micro_batch_size, 0, steps, &dram_losses, &dram_norms));
  ASSERT_OK(hbm.run(g, c.micro_batch_size, 0, steps, &losses, &norms));
  testing::expect_golden_and_dram_steps(g, losses, norms, dram_losses, dram_norms);
  expect_identical(dram, hbm, "hbm " + std::to_string(blocks));
  // After the step and its update: the loss of the next batch, from the tier's own weights.
  auto after = hbm.engine->forward(g.batch(steps, c.micro_batch_size));
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  auto dram_after = dram.engine->forward(g.batch(steps, c.micro_batch_size));
  ASSERT_TRUE(dram_after.ok());
  EXPECT_EQ(after->loss(), dram_after->loss());
}

INSTANTIATE_TEST_SUITE_P(Cases, HbmStateGolden,
                         ::testing::Values(Case{"stories260K", 2, 1}, Case{"stories260K", 4, 3},
                                           Case{"stories260K", 1, -2}, Case{"qwen2-tiny", 3, 2},
                                           Case{"llama-mha-tiny", 2, -2},
                                           Case{"gemma3-tiny", 2, 1},  // tied: the embedding only
                                           Case{"gemma3-tiny", 1, -2}, Case{"qwen3-tiny", 3, 2},
                                           Case{"phi3-longrope", 2, 2}),
                         case_name);

// The same with the CPU device's strict streams (each stream's work held until someone waits for
// it, allocations poisoned): the tier's update, the slots filled from its master and its
// gradients are ordered by events, not by luck.
TEST(HbmState, OrderedByEventsOnStrictStreams) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("qwen3-tiny");
  Rig dram, hbm;
  ASSERT_OK(dram.init(g, 3, Placement::kDram, ""));
  ASSERT_OK(hbm.init(g, 3, Placement::kDram, "", nullptr, StorageEnv::posix(), 3, true));
  const int steps = g.meta["adamw"]["steps"];
  ASSERT_OK(dram.run(g, 3, 0, steps));
  ASSERT_OK(hbm.run(g, 3, 0, steps));
  expect_identical(dram, hbm, "strict streams");
}

// The tier beside the SSD store: the other blocks' moments and master on the SSD, the same bits
// as DRAM, and the SSD moves only the blocks outside the tier.
TEST(HbmState, BesideTheSsdTier) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("qwen2-tiny");
  spillway::testing::TempDir dir;
  Rig dram, mixed;
  ASSERT_OK(dram.init(g, 3, Placement::kDram, ""));
  ASSERT_OK(mixed.init(g, 3, Placement::kSsdMaster, dir.path() + "/state", nullptr,
                       StorageEnv::posix(), 2));
  const int steps = g.meta["adamw"]["steps"];
  ASSERT_OK(dram.run(g, 3, 0, steps));
  ASSERT_OK(mixed.run(g, 3, 0, steps));
  expect_identical(dram, mixed, "hbm 2 + ssd");
  uint64_t outside = 0;
  for (size_t b = 2; b < g.layout.num_blocks(); ++b) outside += g.layout.blocks()[b].numel * 4;
  // Per step: master, m and v of each block outside the tier, read and written once.
  EXPECT_EQ(mixed.store->ssd_read_bytes(), steps * 3 * outside);
  EXPECT_EQ(mixed.store->ssd_write_bytes(), steps * 3 * outside);
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A checkpoint's files do not depend on where the state lived, and a run resumes bit-exact into
// any placement: the tier's blocks into DRAM, DRAM into the tier, into the SSD.
TEST(HbmState, CheckpointsDoNotDependOnThePlacementAndResumeIntoAnother) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  spillway::testing::TempDir dir;
  TrainerState ts;
  ts.step = 2;
  Rig dram, hbm;
  ASSERT_OK(dram.init(g, 2, Placement::kDram, ""));
  ASSERT_OK(hbm.init(g, 2, Placement::kDram, "", nullptr, StorageEnv::posix(), 4));
  ASSERT_OK(dram.run(g, 2, 0, 2));
  ASSERT_OK(hbm.run(g, 2, 0, 2));
  auto a = save_checkpoint(dir.path() + "/dram", *dram.state, ts, dram.store.get());
  auto b = save_checkpoint(dir.path() + "/hbm", *hbm.state, ts, hbm.store.get());
  ASSERT_TRUE(a.ok() && b.ok());
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string fa = file_bytes(fs::path(*a) / f), fb = file_bytes(fs::path(*b) / f);
    EXPECT_FALSE(fa.empty()) << f;
    EXPECT_TRUE(fa == fb) << f << " differs between the placements";
  }
  ASSERT_OK(hbm.run(g, 2, 2, 4));

  struct Into {
    const char* name;
    Placement placement;
    int hbm_blocks;
  };
  for (const Into& into :
       {Into{"dram", Placement::kDram, 0}, Into{"hbm 1", Placement::kDram, 1},
        Into{"hbm all", Placement::kDram, 7}, Into{"ssd + hbm 2", Placement::kSsd, 2}}) {
    Rig resumed;
    ASSERT_OK(resumed.init(g, 2, into.placement,
                           dir.path() + "/resumed-" + std::to_string(into.hbm_blocks), nullptr,
                           StorageEnv::posix(), into.hbm_blocks));
    // The tier loads what the checkpoint put on the host.
    auto loaded = load_checkpoint(*b, *resumed.state, resumed.store.get());
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    ASSERT_OK(resumed.opt->set_hbm_state(resumed.engine->hbm_state()));
    ASSERT_OK(resumed.run(g, 2, 2, 4));
    expect_identical(hbm, resumed, std::string("resumed into ") + into.name);
  }
}

// The tier's blocks cross the link in neither direction: what the engine moves less with the tier
// is what the planner's plan_link_bytes says (the rig's device spills checkpoints to the host,
// whose traffic is the same with and without the tier).
TEST(HbmState, ItsBlocksDoNotCrossTheLink) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("qwen2-tiny");
  const StreamingConfig cfg = rig_config(g, 3);
  const auto all_dram = StreamingEngine::plan_link_bytes(g.layout, cfg, 0);
  uint64_t h2d_dram = 0, d2h_dram = 0;
  for (int blocks : {0, 2, static_cast<int>(g.layout.num_blocks())}) {
    Rig rig;
    ASSERT_OK(rig.init(g, 3, Placement::kDram, "", nullptr, StorageEnv::posix(), blocks));
    ASSERT_OK(rig.run(g, 3, 0, 1));
    if (blocks == 0) {
      h2d_dram = rig.engine->h2d_bytes();
      d2h_dram = rig.engine->d2h_bytes();
      continue;
    }
    const auto planned = StreamingEngine::plan_link_bytes(g.layout, cfg, blocks);
    EXPECT_LT(planned.h2d, all_dram.h2d);
    EXPECT_EQ(h2d_dram - rig.engine->h2d_bytes(), all_dram.h2d - planned.h2d)
        << blocks << " blocks in HBM";
    EXPECT_EQ(d2h_dram - rig.engine->d2h_bytes(), all_dram.d2h - planned.d2h)
        << blocks << " blocks in HBM";
  }
}

// The planner's trade as the engine runs it (StreamingConfig::device_checkpoint_layers): on a
// device with room for every checkpoint beside two blocks' state, the checkpoints of only the
// first k layers stay there and the others go to pinned host memory; the steps are the bits of
// every checkpoint on the device, and what the split adds to the link is what the planner counts
// for it: each spilled checkpoint down once and up twice a step, the head's input up once.
TEST(HbmState, CheckpointsMovedToTheHostTrainTheSameBits) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("qwen2-tiny");
  const int mb = 3, micro_batches = g.B / mb, layers = g.layout.config().num_layers + 1;
  StreamingConfig cfg = rig_config(g, mb, 2);
  const uint64_t every = StreamingEngine::device_checkpoint_bytes(g.layout, cfg, DType::kF32);
  const uint64_t buffer = every / ((layers + 1) * micro_batches);  // one [tokens, hidden] buffer
  ASSERT_EQ(every, (layers + 1ull) * micro_batches * buffer);
  Rig all;
  ASSERT_OK(all.init(g, mb, Placement::kDram, "", nullptr, StorageEnv::posix(), 2, false, {}, -1,
                     every + 1024));
  EXPECT_EQ(all.engine->memory_plan().checkpoint_bytes_device, every);
  EXPECT_EQ(all.engine->memory_plan().checkpoint_bytes_host, 0u);
  const int steps = g.meta["adamw"]["steps"];
  std::vector<double> losses, norms;
  ASSERT_OK(all.run(g, mb, 0, steps, &losses, &norms));
  const uint64_t h2d = all.engine->h2d_bytes(), d2h = all.engine->d2h_bytes();
  for (int kept : {layers - 1, 1, 0}) {
    Rig split;
    ASSERT_OK(split.init(g, mb, Placement::kDram, "", nullptr, StorageEnv::posix(), 2, false, {},
                         kept, every + 1024));
    // The activation gradients and the first `kept` layers' checkpoints stay; the rule that
    // sizes the HBM state tier counts only those.
    cfg.device_checkpoint_layers = kept;
    const uint64_t device = (kept + 1ull) * micro_batches * buffer;
    EXPECT_EQ(StreamingEngine::device_checkpoint_bytes(g.layout, cfg, DType::kF32), device);
    EXPECT_EQ(split.engine->memory_plan().checkpoint_bytes_device, device) << kept;
    const uint64_t spilled = every - device;
    EXPECT_EQ(split.engine->memory_plan().checkpoint_bytes_host, spilled) << kept;
    std::vector<double> split_losses, split_norms;
    ASSERT_OK(split.run(g, mb, 0, steps, &split_losses, &split_norms));
    EXPECT_EQ(split_losses, losses) << kept << " layers' checkpoints on the device";
    EXPECT_EQ(split_norms, norms) << kept << " layers' checkpoints on the device";
    expect_identical(all, split, std::to_string(kept) + " layers' checkpoints on the device");
    // Up twice, but for the head's input (the last layer's), which the head reads once.
    EXPECT_EQ(split.engine->h2d_bytes() - h2d, (2 * spilled - micro_batches * buffer) * steps)
        << kept;
    EXPECT_EQ(split.engine->d2h_bytes() - d2h, spilled * steps) << kept;
  }
}

// More blocks than the device holds: a clear error that names the key and what to do, before
// anything trains.
TEST(HbmState, MoreBlocksThanTheDeviceHoldsSaysWhatToChange) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  const StreamingConfig cfg = rig_config(g, 2, 3);
  // Room for streaming and two blocks' state, not three.
  auto backend = spillway::testing::engine_cpu_backend(g.layout, cfg, false,
                                                       1024 + HbmState::bytes(g.layout, 2));
  auto state = ModelState::create(g.layout, true);
  ASSERT_TRUE(state.ok());
  auto engine = StreamingEngine::create(*backend, **state, cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(engine.status().message().find("placement.hbm_state_blocks"), std::string::npos)
      << engine.status().message();
  EXPECT_NE(engine.status().message().find("first 3 blocks"), std::string::npos)
      << engine.status().message();
}

// The tier's blocks need no host gradient (ModelState::create's device_grad_blocks), and a block
// without one outside the tier is refused before anything trains.
TEST(HbmState, OnlyTheTiersBlocksGoWithoutAHostGradient) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  auto state = ModelState::create(g.layout, true, 3);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ((*state)->grad(0), nullptr);
  EXPECT_EQ((*state)->grad(2), nullptr);
  EXPECT_NE((*state)->grad(3), nullptr);
  uint64_t outside = 0;
  for (size_t b = 3; b < g.layout.num_blocks(); ++b) outside += g.layout.blocks()[b].numel * 4;
  EXPECT_EQ((*state)->gradient_bytes(), outside);
  const StreamingConfig cfg = rig_config(g, 2, 2);  // a tier of 2: block 2 has no gradient
  auto backend = spillway::testing::engine_cpu_backend(g.layout, cfg, false,
                                                       1024 + HbmState::bytes(g.layout, 3));
  auto engine = StreamingEngine::create(*backend, **state, cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("block layer.1 has no host gradient"), std::string::npos)
      << engine.status().message();
}

// "As many as fit" (-1): none on the CPU backend, whose device is DRAM already; on a GPU as many
// of the first blocks as fit beside streaming, every checkpoint and the reserve.
TEST(HbmState, AsManyAsFit) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  StreamingConfig cfg;
  cfg.weight_slots = 2;
  cfg.micro_batch_size = 2;
  cfg.max_micro_batches = 2;
  cfg.seq_len = g.T;
  cfg.hbm_state_blocks = -1;
  const DType act = DType::kBF16;
  const uint64_t ws = 1 << 20;
  const uint64_t fixed = StreamingEngine::plan_device_memory(g.layout, cfg, act, ws).fixed_bytes();
  const ModelConfig& m = g.layout.config();
  const uint64_t checkpoints =
      (m.num_layers + 2ull) * 2 * compute::align_to_device(2ull * g.T * m.hidden_size * 2);
  const uint64_t base = fixed + checkpoints + StreamingEngine::kHbmStateReserveBytes;
  EXPECT_EQ(StreamingEngine::hbm_state_blocks(g.layout, cfg, act, ws, base, false), 0u);
  EXPECT_EQ(StreamingEngine::hbm_state_blocks(g.layout, cfg, act, ws,
                                              base + HbmState::bytes(g.layout, 3), false),
            3u);
  EXPECT_EQ(StreamingEngine::hbm_state_blocks(g.layout, cfg, act, ws,
                                              base + HbmState::bytes(g.layout, 3) - 1, false),
            2u);
  EXPECT_EQ(StreamingEngine::hbm_state_blocks(g.layout, cfg, act, ws, uint64_t{1} << 40, false),
            g.layout.num_blocks());
  EXPECT_EQ(StreamingEngine::hbm_state_blocks(g.layout, cfg, act, ws, uint64_t{1} << 40, true), 0u);
  // Checkpoints moved to the host (the planner's trade) leave their room to blocks: with the
  // first layer's only, the others' bytes on top of `base`.
  cfg.device_checkpoint_layers = 1;
  const uint64_t moved =
      m.num_layers * 2 * compute::align_to_device(2ull * g.T * m.hidden_size * 2);
  EXPECT_EQ(StreamingEngine::device_checkpoint_bytes(g.layout, cfg, act), checkpoints - moved);
  EXPECT_EQ(StreamingEngine::hbm_state_blocks(g.layout, cfg, act, ws,
                                              base - moved + HbmState::bytes(g.layout, 3), false),
            3u);
  cfg.keep_checkpoints_on_device = false;  // none kept: none counted
  EXPECT_EQ(StreamingEngine::device_checkpoint_bytes(g.layout, cfg, act), 0u);
  EXPECT_EQ(StreamingEngine::hbm_state_blocks(
                g.layout, cfg, act, ws, base - checkpoints + HbmState::bytes(g.layout, 3), false),
            3u);
  cfg.keep_checkpoints_on_device = true;
  cfg.device_checkpoint_layers = -1;
  cfg.hbm_state_blocks = 100;  // at most every block
  EXPECT_EQ(StreamingEngine::hbm_state_blocks(g.layout, cfg, act, ws, 0, true),
            g.layout.num_blocks());
}

}  // namespace
}  // namespace spillway
