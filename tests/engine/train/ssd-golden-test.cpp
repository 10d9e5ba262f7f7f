// The AdamW trajectory against the PyTorch reference (../shared/data/golden, as golden-test.cpp)
// with the optimizer state on the SSD tier, and with the master weights there too: same losses,
// norms and final parameters to the same tolerances — and bit for bit the DRAM run's master weights
// and moments, since the update math is the same. Also: checkpoints taken with state on the SSD
// resume exactly (into either placement), faults while a checkpoint reads the state leave the last
// one intact, the tier counters and timeline spans, and orphaned scratch folders of killed runs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "state-rig.h"
#include "test-data.h"
#include "tiers/fault-env.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/scratch-folder.h"
#include "train/streaming-engine.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using testing::expect_identical;
using testing::Golden;
using testing::kChunkBytes;
using testing::Placement;
using testing::placement_name;
using testing::read_f32;
using testing::Rig;

struct Case {
  std::string model;
  int micro_batch_size;
  Placement placement;
};

class SsdGolden : public ::testing::TestWithParam<Case> {};

TEST_P(SsdGolden, AdamWTrajectoryMatchesReferenceAndDramBitForBit) {
  SPILLWAY_REQUIRE_DATA();
  const Case c = GetParam();
  Golden g(c.model);
  testing::TempDir dir;
  Rig dram, ssd;
  ASSERT_OK(dram.init(g, c.micro_batch_size, Placement::kDram, ""));
  Status st = ssd.init(g, c.micro_batch_size, c.placement, dir.path() + "/state");
  ASSERT_TRUE(st.ok()) << st.to_string();
  const int steps = g.meta["adamw"]["steps"];
  std::vector<double> losses, norms, dram_losses, dram_norms;
  ASSERT_OK(dram.run(g, c.micro_batch_size, 0, steps, &dram_losses, &dram_norms));
  st = ssd.run(g, c.micro_batch_size, 0, steps, &losses, &norms);
  ASSERT_TRUE(st.ok()) << st.to_string();

  // The reference, to golden-test.cpp's tolerances.
  testing::expect_golden_and_dram_steps(g, losses, norms, dram_losses, dram_norms);
  double num = 0, den = 0;
  for (size_t b = 0; b < g.layout.num_blocks(); ++b) {
    for (const ParamView& p : g.layout.blocks()[b].params) {
      auto ref = read_f32(*g.traj, p.name);
      const float* x = ssd.state->master(b) + p.offset;
      for (size_t i = 0; i < p.numel; ++i) {
        num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
        den += double(ref[i]) * ref[i];
      }
    }
  }
  EXPECT_LT(std::sqrt(num / den), 1e-4);
  auto after = ssd.engine->forward(g.batch(steps, c.micro_batch_size));
  ASSERT_TRUE(after.ok());
  EXPECT_NEAR(after->loss(), g.meta["loss_after"].get<double>(),
              2 * testing::step_loss_tolerance(steps));

  // The same math as DRAM: every bit of master, exp_avg and exp_avg_sq.
  expect_identical(dram, ssd, placement_name(c.placement));
  // Per step: each block read and written once, m and v (and the master).
  uint64_t fp32 = 0;
  for (const auto& b : g.layout.blocks()) fp32 += b.numel * 4;
  const uint64_t kinds = c.placement == Placement::kSsdMaster ? 3 : 2;
  EXPECT_EQ(ssd.store->ssd_read_bytes(), steps * kinds * fp32);
  EXPECT_EQ(ssd.store->ssd_write_bytes(), steps * kinds * fp32);
}

INSTANTIATE_TEST_SUITE_P(Cases, SsdGolden,
                         ::testing::Values(Case{"stories260K", 4, Placement::kSsd},
                                           Case{"stories260K", 2, Placement::kSsdMaster},
                                           Case{"qwen2-tiny", 3, Placement::kSsd},
                                           Case{"qwen2-tiny", 1, Placement::kSsdMaster},
                                           Case{"llama-mha-tiny", 2, Placement::kSsdMaster}),
                         [](const auto& info) {
                           return testing::test_name(info.param.model + "_mb" +
                                                     std::to_string(info.param.micro_batch_size) +
                                                     "_" + placement_name(info.param.placement));
                         });

// Two steps, a checkpoint, two more steps; against a run resumed from that checkpoint into a fresh
// rig of each placement: the same bits at the end. The checkpoint itself holds the SSD state's
// moments (self-contained safetensors), and resume writes them back into the new SSD store.
TEST(SsdCheckpoint, ResumesBitExactIntoEitherPlacement) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  testing::TempDir dir;
  Rig straight;
  ASSERT_OK(straight.init(g, 2, Placement::kSsdMaster, dir.path() + "/straight"));
  ASSERT_OK(straight.run(g, 2, 0, 2));
  TrainerState ts;
  ts.step = 2;
  auto ckpt =
      save_checkpoint(dir.path() + "/checkpoints", *straight.state, ts, straight.store.get());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  ASSERT_OK(straight.run(g, 2, 2, 4));

  for (Placement p : {Placement::kDram, Placement::kSsd, Placement::kSsdMaster}) {
    Rig resumed;
    ASSERT_OK(resumed.init(g, 2, p, dir.path() + "/resumed-" + placement_name(p)));
    auto loaded = load_checkpoint(*ckpt, *resumed.state, resumed.store.get());
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(loaded->step, 2);
    EXPECT_EQ(resumed.state->step, 2);
    ASSERT_OK(resumed.run(g, 2, 2, 4));
    expect_identical(straight, resumed, std::string("resumed into ") + placement_name(p));
  }
}

struct CheckpointFault {
  const char* name;
  FaultPlan (*plan)(const FaultInjectingEnv& env);
  const char* message;
};

class SsdCheckpointFaults : public ::testing::TestWithParam<CheckpointFault> {};

// A fault while the checkpoint reads the moments off the SSD: a clear error, no new checkpoint
// folder (nor a leftover temporary one), the previous checkpoint unchanged and loadable, and —
// since the fault was in the read path only — the next attempt succeeds.
TEST_P(SsdCheckpointFaults, ClearErrorLastCheckpointIntactRetrySucceeds) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  testing::TempDir dir;
  FaultInjectingEnv env;
  Rig rig;
  ASSERT_OK(rig.init(g, 4, Placement::kSsdMaster, dir.path() + "/state", nullptr, &env));
  ASSERT_OK(rig.run(g, 4, 0, 1));
  const std::string checkpoints = dir.path() + "/checkpoints";
  TrainerState ts;
  ts.step = 1;
  auto good = save_checkpoint(checkpoints, *rig.state, ts, rig.store.get());
  ASSERT_TRUE(good.ok());
  std::map<std::string, std::string> before;
  for (const auto& e : fs::recursive_directory_iterator(*good))
    if (e.is_regular_file()) before[e.path().string()] = *read_file(e.path().string());

  ASSERT_OK(rig.run(g, 4, 1, 2));
  env.set_plan(GetParam().plan(env));
  ts.step = 2;
  auto bad = save_checkpoint(checkpoints, *rig.state, ts, rig.store.get());
  ASSERT_FALSE(bad.ok()) << GetParam().name;
  const std::string msg = bad.status().to_string();
  EXPECT_NE(msg.find(GetParam().message), std::string::npos) << msg;
  EXPECT_NE(msg.find("checkpoint at step 2"), std::string::npos) << msg;
  EXPECT_EQ(list_checkpoints(checkpoints), std::vector<std::string>{*good});
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(checkpoints)) ++entries, (void)e;
  EXPECT_EQ(entries, 1u) << "a temporary folder was left behind";
  for (const auto& [path, bytes] : before)
    EXPECT_TRUE(*read_file(path) == bytes) << path << " changed";
  auto fresh = ModelState::create(g.layout, true);
  ASSERT_TRUE(fresh.ok());
  auto loaded = load_checkpoint(*good, **fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 1);

  env.set_plan(FaultPlan{});
  auto retry = save_checkpoint(checkpoints, *rig.state, ts, rig.store.get());
  EXPECT_TRUE(retry.ok()) << retry.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Kinds, SsdCheckpointFaults,
                         ::testing::Values(CheckpointFault{"eio",
                                                           [](const FaultInjectingEnv& e) {
                                                             FaultPlan p;
                                                             p.eio_on_op = e.ops() + 5;
                                                             return p;
                                                           },
                                                           "Input/output error"},
                                           CheckpointFault{"flipped_byte",
                                                           [](const FaultInjectingEnv& e) {
                                                             FaultPlan p;
                                                             p.flip_byte_on_read = e.reads() + 7;
                                                             return p;
                                                           },
                                                           "checksum"}),
                         [](const auto& info) { return std::string(info.param.name); });

// A failed update leaves a state that is no longer one step: the optimizer reports it and refuses
// to start another step, and the engine never waits forever on an unreleased block.
TEST(SsdOptimizer, ErrorIsStickyAndStopsFurtherSteps) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  testing::TempDir dir;
  FaultInjectingEnv env;
  Rig rig;
  ASSERT_OK(rig.init(g, 4, Placement::kSsd, dir.path() + "/state", nullptr, &env));
  ASSERT_OK(rig.run(g, 4, 0, 1));
  FaultPlan p;
  p.enospc_from_write = env.writes() + 3;
  env.set_plan(p);
  Status st = rig.run(g, 4, 1, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ErrorCode::kNoSpace) << st.to_string();
  const int64_t step = rig.state->step;
  const uint64_t reads = rig.store->ssd_read_bytes();
  // The next forward runs (no block is left unreleased); the next step starts nothing.
  auto r = rig.engine->forward_backward(g.batch(2, 4));
  ASSERT_TRUE(r.ok());
  rig.opt->begin_step(1e-3);
  rig.opt->wait_all();
  EXPECT_FALSE(rig.opt->status().ok());
  EXPECT_EQ(rig.state->step, step);
  EXPECT_EQ(rig.store->ssd_read_bytes(), reads);
}

// A disk too small for the whole state: one clear error up front with what is needed and free.
TEST(SsdOptimizer, DiskTooSmallSaysWhatIsNeeded) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  testing::TempDir dir;
  FaultInjectingEnv env;
  FaultPlan p;
  p.free_bytes_override = 1 << 20;
  env.set_plan(p);
  Rig rig;
  Status st = rig.init(g, 4, Placement::kSsdMaster, dir.path() + "/state", nullptr, &env);
  ASSERT_EQ(st.code(), ErrorCode::kNoSpace) << st.to_string();
  EXPECT_NE(st.message().find("AdamW state and master weights need"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(dir.path() + "/state"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("placement.ssd_dir"), std::string::npos) << st.message();
}

// Held bytes by tier and category, link bytes, and the per-block timeline spans.
TEST(SsdOptimizer, CountsBytesByCategoryAndEmitsSpans) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  testing::TempDir dir;
  TierCounters counters;
  uint64_t fp32 = 0, max_block = 0;
  for (const auto& b : g.layout.blocks())
    fp32 += b.numel * 4, max_block = std::max<uint64_t>(max_block, b.numel * 4);
  {
    Rig rig;
    ASSERT_OK(rig.init(g, 4, Placement::kSsdMaster, dir.path() + "/state", &counters));
    // Group files are padded to whole 64 KiB blocks.
    EXPECT_GE(counters.held(Tier::kSsd, Category::kOptimizer), static_cast<int64_t>(2 * fp32));
    EXPECT_LT(counters.held(Tier::kSsd, Category::kOptimizer),
              static_cast<int64_t>(2 * fp32 + 2 * g.layout.num_blocks() * (64 << 10)));
    EXPECT_GE(counters.held(Tier::kSsd, Category::kMaster), static_cast<int64_t>(fp32));
    EXPECT_LT(counters.held(Tier::kSsd, Category::kMaster),
              static_cast<int64_t>(fp32 + g.layout.num_blocks() * (64 << 10)));
    // Staging: three pieces of each kind.
    EXPECT_EQ(counters.held(Tier::kDram, Category::kOptimizer),
              static_cast<int64_t>(3 * 3 * std::min<uint64_t>(kChunkBytes, max_block)));

    std::mutex mu;
    std::map<std::string, std::vector<size_t>> spans;
    bool ordered = true;
    double t = 0;
    rig.opt->set_span_sink(
        [&](size_t b, const char* phase, double start, double end) {
          std::lock_guard lock(mu);
          spans[phase].push_back(b);
          ordered = ordered && start <= end;
        },
        [&] {
          std::lock_guard lock(mu);
          return t += 1.0;
        });
    const uint64_t read0 = counters.moved(Link::kSsdRead), write0 = counters.moved(Link::kSsdWrite);
    ASSERT_OK(rig.run(g, 4, 0, 1));
    EXPECT_GE(counters.moved(Link::kSsdRead) - read0, 3 * fp32);
    EXPECT_GE(counters.moved(Link::kSsdWrite) - write0, 3 * fp32);
    std::vector<size_t> all(g.layout.num_blocks());
    for (size_t b = 0; b < all.size(); ++b) all[b] = b;
    EXPECT_EQ(spans["ssd_read"], all);
    EXPECT_EQ(spans["optimizer"], all);
    EXPECT_EQ(spans["ssd_write"], all);
    EXPECT_TRUE(ordered);
  }
  // Closing the store returns every byte it held.
  EXPECT_EQ(counters.held(Tier::kSsd, Category::kOptimizer), 0);
  EXPECT_EQ(counters.held(Tier::kSsd, Category::kMaster), 0);
  EXPECT_EQ(counters.held(Tier::kDram, Category::kOptimizer), 0);
}

// A run that dies (here: a child that _exits without cleaning up) leaves its scratch folder; the
// next run over the same parent removes it, while a live run's folder is left alone.
TEST(ScratchFolder, OrphansOfDeadRunsAreRemovedLiveOnesKept) {
  testing::TempDir dir;
  auto live = ScratchFolder::create(dir.path(), "spillway-state-live", "spillway-state-");
  ASSERT_TRUE(live.ok());
  ASSERT_TRUE(write_file_atomic((*live)->path() + "/m.embed.blk", "x").ok());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto dead = ScratchFolder::create(dir.path(), "spillway-state-dead");
    if (!dead.ok() || !write_file_atomic((*dead)->path() + "/v.head.blk", "y").ok()) _exit(1);
    _exit(0);  // no destructor: like SIGKILL, the folder and its lock file stay
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(fs::exists(dir.path() + "/spillway-state-dead/v.head.blk"));
  fs::create_directories(dir.path() + "/unrelated");

  auto next = ScratchFolder::create(dir.path(), "spillway-state-next", "spillway-state-");
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(fs::exists(dir.path() + "/spillway-state-dead"));
  EXPECT_FALSE(fs::exists(dir.path() + "/spillway-state-dead.lock"));
  EXPECT_TRUE(fs::exists((*live)->path() + "/m.embed.blk"));
  EXPECT_TRUE(fs::exists(dir.path() + "/unrelated"));
  EXPECT_EQ(remove_orphaned_scratch(dir.path(), "spillway-state-"), 0);

  const std::string path = (*next)->path();
  next->reset();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".lock"));
}

// The SSD folder is the user's (placement.ssd_dir): a scratch folder's end removes only the SSD
// store's files and the folder Spillway made and marked. A user's file in it stays (with the
// folder and its lock file), and a folder named like a scratch folder, with a lock file beside it,
// but never made by Spillway (no marker) is not touched; create() does not take one over.
TEST(ScratchFolder, RemovesOnlyWhatSpillwayWrote) {
  testing::TempDir dir;
  auto scratch = ScratchFolder::create(dir.path(), "spillway-state-a", "spillway-state-");
  ASSERT_TRUE(scratch.ok());
  const std::string path = (*scratch)->path();
  for (const char* f : {"m.embed.blk", "m.embed.crc", "v.head.blk"})
    ASSERT_TRUE(write_file_atomic(path + "/" + f, "x").ok());
  ASSERT_TRUE(write_file_atomic(path + "/readme.txt", "the user's").ok());
  scratch->reset();
  EXPECT_EQ(*read_file(path + "/readme.txt"), "the user's");
  for (const char* f : {"m.embed.blk", "m.embed.crc", "v.head.blk"})
    EXPECT_FALSE(fs::exists(path + "/" + f)) << f;

  const std::string theirs = dir.path() + "/spillway-state-theirs";
  fs::create_directories(theirs);
  ASSERT_TRUE(write_file_atomic(theirs + "/data.blk", "precious").ok());
  ASSERT_TRUE(write_file_atomic(theirs + ".lock", "").ok());
  EXPECT_EQ(remove_orphaned_scratch(dir.path(), "spillway-state-"), 0);
  EXPECT_EQ(*read_file(theirs + "/data.blk"), "precious");
  EXPECT_EQ(*read_file(path + "/readme.txt"), "the user's");
  EXPECT_TRUE(fs::exists(path + ".lock"));
  auto taken = ScratchFolder::create(dir.path(), "spillway-state-theirs");
  EXPECT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find("exists already and is not this run's"),
            std::string::npos)
      << taken.status().message();
  EXPECT_EQ(*read_file(theirs + "/data.blk"), "precious");

  // Once the user's file is moved out, the next run removes the rest.
  fs::remove(path + "/readme.txt");
  EXPECT_EQ(remove_orphaned_scratch(dir.path(), "spillway-state-"), 1);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".lock"));
}

// A run killed after it made its scratch folder but before it marked it (2 and 4 of 100 runs of
// SsdResumeTest on 16 cores left one): its lock file, written before the folder was made, vouches
// for the folder, and the next run removes it, with a marker's temporary that the kill cut.
TEST(ScratchFolder, AFolderKilledBeforeItsMarkerIsStillCollected) {
  testing::TempDir dir;
  std::string path;
  {
    auto scratch = ScratchFolder::create(dir.path(), "spillway-state-k", "spillway-state-");
    ASSERT_TRUE(scratch.ok());
    path = (*scratch)->path();
    ASSERT_TRUE(write_file_atomic(path + "/m.embed.blk", "x").ok());
    // What the kill leaves: the folder without its marker, and the lock file; the lock held by a
    // process that is gone (released here by a copy of the files made while it was held).
    fs::copy(path, path + "-copy", fs::copy_options::recursive);
    fs::copy_file(path + ".lock", path + "-copy.lock");
  }
  const std::string killed = path + "-copy";
  fs::remove(killed + "/" + std::string(kScratchMarker));
  // The temporary of a marker written with write_file_atomic by an earlier build, cut by the kill.
  ASSERT_TRUE(write_file_atomic(killed + "/" + std::string(kScratchMarker) + ".tmp.4242", "").ok());
  ASSERT_TRUE(fs::exists(killed + "/m.embed.blk"));
  EXPECT_EQ(remove_orphaned_scratch(dir.path(), "spillway-state-"), 1);
  EXPECT_FALSE(fs::exists(killed));
  EXPECT_FALSE(fs::exists(killed + ".lock"));
}

}  // namespace
}  // namespace spillway
