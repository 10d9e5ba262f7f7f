// A mix of host tiers per block (train/optimizer-state.h, BlockTiers): the first blocks' master
// and moments in DRAM, the next with their moments on the SSD, the last with master and moments
// there. The golden AdamW trajectory gives every master, m and v bit of the all-DRAM run, with
// and without the HBM state tier in front; the SSD moves only its own blocks; a checkpoint's files
// are the all-DRAM run's, byte for byte; and a run resumes bit-exact under another mix.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/file-util.h"
#include "state-rig.h"
#include "test-data.h"
#include "tiers/fault-env.h"
#include "train/checkpoint.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using testing::expect_identical;
using testing::Golden;
using testing::Placement;
using testing::Rig;

struct Case {
  std::string model;
  int micro_batch_size;
  BlockTiers mix;
  int hbm_blocks;
};

std::string mix_name(const BlockTiers& t) {
  return std::to_string(t.dram) + "_" + std::to_string(t.ssd_moments) + "_" + std::to_string(t.ssd);
}

class MixedStateGolden : public ::testing::TestWithParam<Case> {};

// Every loss, gradient norm, master weight and moment of the all-DRAM run, the reference's values
// to golden-test.cpp's tolerances, and per step the SSD blocks read and written once: m and v,
// and the master of the last ones (the HBM tier's blocks not at all).
TEST_P(MixedStateGolden, SameBitsAsDramAndTheReference) {
  SPILLWAY_REQUIRE_DATA();
  const Case c = GetParam();
  Golden g(c.model);
  ASSERT_EQ(c.mix.blocks(), g.layout.num_blocks());
  spillway::testing::TempDir dir;
  Rig dram, mixed;
  ASSERT_OK(dram.init(g, c.micro_batch_size, Placement::kDram, ""));
  ASSERT_OK(mixed.init(g, c.micro_batch_size, Placement::kMixed, dir.path() + "/state", nullptr,
                       StorageEnv::posix(), c.hbm_blocks, false, c.mix));
  EXPECT_EQ(mixed.store->tiers(), c.mix);
  for (size_t b = 0; b < g.layout.num_blocks(); ++b)
    EXPECT_EQ(mixed.state->exp_avg(b) != nullptr, b < c.mix.dram) << "block " << b;
  const int steps = g.meta["adamw"]["steps"];
  std::vector<double> losses, norms, dram_losses, dram_norms;
  ASSERT_OK(dram.run(g, c.micro_batch_size, 0, steps, &dram_losses, &dram_norms));
  ASSERT_OK(mixed.run(g, c.micro_batch_size, 0, steps, &losses, &norms));
  testing::expect_golden_and_dram_steps(g, losses, norms, dram_losses, dram_norms);
  expect_identical(dram, mixed, "mix " + mix_name(c.mix));
  uint64_t moved = 0;
  for (size_t b = std::max<size_t>(c.hbm_blocks, c.mix.dram); b < g.layout.num_blocks(); ++b)
    moved += g.layout.blocks()[b].numel * 4 * (c.mix.of(b) == BlockTiers::kSsd ? 3 : 2);
  EXPECT_EQ(mixed.store->ssd_read_bytes(), steps * moved);
  EXPECT_EQ(mixed.store->ssd_write_bytes(), steps * moved);
}

// stories260K: the embedding, layers 0-4 and the head (tied: its norm only); qwen2-tiny: the
// embedding, layers 0-2 and the head; llama-mha-tiny: the embedding, layers 0-1 and the head.
INSTANTIATE_TEST_SUITE_P(Cases, MixedStateGolden,
                         ::testing::Values(Case{"stories260K", 2, BlockTiers{2, 3, 2}, 0},
                                           Case{"stories260K", 4, BlockTiers{1, 0, 6}, 0},
                                           Case{"stories260K", 1, BlockTiers{5, 2, 0}, 0},
                                           Case{"stories260K", 2, BlockTiers{3, 2, 2}, 2},
                                           Case{"qwen2-tiny", 3, BlockTiers{1, 2, 2}, 0},
                                           Case{"qwen2-tiny", 1, BlockTiers{2, 1, 2}, 3},
                                           Case{"llama-mha-tiny", 2, BlockTiers{1, 2, 1}, 0}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return spillway::testing::test_name(
                               c.model + "_mb" + std::to_string(c.micro_batch_size) + "_mix" +
                               mix_name(c.mix) + "_hbm" + std::to_string(c.hbm_blocks));
                         });

// Every file of a checkpoint folder, by name.
std::map<std::string, std::string> folder_files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file())
      files[fs::relative(e.path(), dir).string()] = *read_file(e.path().string());
  }
  return files;
}

// A checkpoint's files do not depend on the placement: the same names and bytes from the
// all-DRAM, the all-SSD and a mixed run (the moments on the SSD streamed into the one
// optimizer.safetensors). Resumed from the mixed run's under another mix, every bit of the run
// that went straight on.
TEST(MixedState, CheckpointsAreTheDramRunsAndResumeUnderAnotherMix) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  spillway::testing::TempDir dir;
  TrainerState ts;
  ts.step = 2;
  Rig dram, ssd, mixed;
  ASSERT_OK(dram.init(g, 2, Placement::kDram, ""));
  ASSERT_OK(ssd.init(g, 2, Placement::kSsdMaster, dir.path() + "/ssd"));
  ASSERT_OK(mixed.init(g, 2, Placement::kMixed, dir.path() + "/mixed", nullptr, StorageEnv::posix(),
                       0, false, BlockTiers{2, 3, 2}));
  std::map<std::string, std::string> files[3];
  int i = 0;
  for (Rig* rig : {&dram, &ssd, &mixed}) {
    ASSERT_OK(rig->run(g, 2, 0, 2));
    auto saved = save_checkpoint(dir.path() + "/checkpoints-" + std::to_string(i), *rig->state, ts,
                                 rig->store.get());
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
    files[i++] = folder_files(*saved);
  }
  ASSERT_TRUE(files[0].contains("optimizer.safetensors"));
  ASSERT_TRUE(files[0].contains("model.safetensors"));
  for (int k : {1, 2}) {
    EXPECT_EQ(files[k].size(), files[0].size());
    for (const auto& [name, bytes] : files[0]) {
      EXPECT_TRUE(files[k].contains(name)) << name;
      EXPECT_TRUE(files[k][name] == bytes) << name << " differs from the all-DRAM run's ("
                                           << (k == 1 ? "all on the SSD" : "mixed") << ")";
    }
  }
  ASSERT_OK(mixed.run(g, 2, 2, 4));

  const std::string ckpt = dir.path() + "/checkpoints-2/step-000002";
  for (const BlockTiers& into : {BlockTiers{7, 0, 0}, BlockTiers{0, 7, 0}, BlockTiers{0, 0, 7},
                                 BlockTiers{4, 0, 3}, BlockTiers{1, 5, 1}}) {
    Rig resumed;
    ASSERT_OK(resumed.init(g, 2, Placement::kMixed, dir.path() + "/resumed-" + mix_name(into),
                           nullptr, StorageEnv::posix(), 0, false, into));
    auto loaded = load_checkpoint(ckpt, *resumed.state, resumed.store.get());
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(resumed.state->step, 2);
    ASSERT_OK(resumed.run(g, 2, 2, 4));
    expect_identical(mixed, resumed, "resumed into mix " + mix_name(into));
  }
}

// An SSD error in a mixed update (its first read): a clear, sticky error; every block, the DRAM
// ones too, is released, so the next forward runs, and no further update starts.
TEST(MixedState, AnSsdErrorIsStickyAndReleasesEveryBlock) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  spillway::testing::TempDir dir;
  FaultInjectingEnv env;
  Rig rig;
  ASSERT_OK(rig.init(g, 4, Placement::kMixed, dir.path() + "/state", nullptr, &env, 0, false,
                     BlockTiers{3, 2, 2}));
  ASSERT_OK(rig.run(g, 4, 0, 1));
  FaultPlan p;
  p.eio_on_op = env.ops() + 1;
  env.set_plan(p);
  Status st = rig.run(g, 4, 1, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("Input/output error"), std::string::npos) << st.to_string();
  const int64_t step = rig.state->step;
  auto r = rig.engine->forward_backward(g.batch(2, 4));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  rig.opt->begin_step(1e-3);
  rig.opt->wait_all();
  EXPECT_FALSE(rig.opt->status().ok());
  EXPECT_EQ(rig.state->step, step);
}

// Tiers that do not cover the model, or that say a block's moments are in DRAM where ModelState
// holds none: refused with what is wrong, before any file is made.
TEST(MixedState, TiersThatDoNotMatchTheModelAreRefused) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  spillway::testing::TempDir dir;
  auto state = ModelState::create(g.layout, true, 0, 2);
  ASSERT_TRUE(state.ok());
  SsdStateConfig sc;
  sc.store.folder = dir.path() + "/state";
  sc.tiers = BlockTiers{2, 3, 1};  // 6 of 7 blocks
  auto short_of_one = make_ssd_state(**state, sc);
  ASSERT_FALSE(short_of_one.ok());
  EXPECT_EQ(short_of_one.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(short_of_one.status().message().find("the tiers place 6 blocks"), std::string::npos)
      << short_of_one.status().message();
  sc.tiers = BlockTiers{3, 2, 2};  // ModelState holds the moments of 2
  auto mismatch = make_ssd_state(**state, sc);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("the moments of the first 3 blocks"),
            std::string::npos)
      << mismatch.status().message();
  EXPECT_FALSE(fs::exists(sc.store.folder));
}

}  // namespace
}  // namespace spillway
