// Selective activation checkpointing (StreamingConfig::saved_activation_layers and
// mlp_recompute_layers): the layers that keep their activations from the forward skip the
// recompute in the backward, or recompute only the MLP's gate, up and activation, and give the same
// bits as layers that recompute, on each layer shape of the golden models: Llama (stories260K),
// the key bias (qwen2-tiny), Gemma 3's sandwich norms and sliding window (gemma3-tiny) and Qwen3's
// q/k norms (qwen3-tiny). Strict streams with poisoned allocations: a view the backward reads
// that the saved forward did not write fails the comparison.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "state-rig.h"
#include "test-data.h"
#include "train/block-math.h"

namespace spillway {
namespace {
using testing::Golden;

struct SavedRun {
  std::vector<testing::Step> steps;  // two steps on one engine: the saved areas are reused
  DeviceMemoryPlan plan;
  int64_t activations_held = 0;  // the tier counters' device activations
};

Result<SavedRun> run_saved(const Golden& g, const StepBatch& batch, int saved_layers,
                           int mlp_recompute_layers = 0) {
  StreamingConfig cfg = testing::rig_config(g, 1);
  cfg.saved_activation_layers = saved_layers;
  cfg.mlp_recompute_layers = mlp_recompute_layers;
  auto be = testing::engine_cpu_backend(g.layout, cfg, /*strict=*/true, size_t{256} << 20);
  SPW_ASSIGN_OR_RETURN(std::unique_ptr<ModelState> state, testing::golden_state(g));
  TierCounters counters;
  SPW_ASSIGN_OR_RETURN(auto engine, StreamingEngine::create(*be, *state, cfg, &counters));
  SavedRun run;
  run.plan = engine->memory_plan();
  run.activations_held = counters.held(Tier::kHbm, Category::kActivations);
  for (int i = 0; i < 2; ++i) {
    SPW_ASSIGN_OR_RETURN(testing::Step s, testing::step_of(*engine, *state, batch));
    run.steps.push_back(std::move(s));
  }
  return run;
}

class SavedActivations : public ::testing::TestWithParam<std::string> {};

TEST_P(SavedActivations, ChangeNoBitAndTakeTheirBytes) {
  SPILLWAY_REQUIRE_DATA();
  Golden g(GetParam());
  if (!g.traj) GTEST_SKIP() << "golden data missing";
  const StepBatch batch = g.batch(0, 1);  // micro-batches of one sequence
  const ModelConfig& c = g.layout.config();
  const int L = c.num_layers;
  auto recomputed = run_saved(g, batch, 0);
  ASSERT_TRUE(recomputed.ok()) << recomputed.status().to_string();
  EXPECT_EQ(recomputed->plan.saved_activation_bytes, 0u);
  EXPECT_EQ(recomputed->activations_held, 0);
  // (whole, without the MLP's): the last layer whole, every layer whole, the first without, every
  // layer without, and one whole after the others without.
  const std::pair<int, int> counts[] = {{1, 0}, {L, 0}, {0, 1}, {0, L}, {1, L - 1}};
  for (auto [k, j] : counts) {
    SCOPED_TRACE("saved layers " + std::to_string(k) + ", MLP recomputed " + std::to_string(j));
    auto saved = run_saved(g, batch, k, j);
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
    EXPECT_EQ(saved->plan.saved_activation_bytes,
              uint64_t(batch.micro_batches) *
                  (k * BlockMath::saved_bytes(c, g.T, DType::kF32) +
                   j * BlockMath::saved_bytes(c, g.T, DType::kF32, /*mlp=*/false)));
    EXPECT_EQ(saved->plan.fixed_bytes() - recomputed->plan.fixed_bytes(),
              saved->plan.saved_activation_bytes);
    EXPECT_EQ(saved->activations_held, int64_t(saved->plan.saved_activation_bytes));
    for (size_t i = 0; i < saved->steps.size(); ++i) {
      const testing::Step& a = saved->steps[i];
      const testing::Step& b = recomputed->steps[i];
      EXPECT_EQ(a.result.loss_sum, b.result.loss_sum) << "step " << i;
      EXPECT_EQ(a.result.grad_sumsq, b.result.grad_sumsq) << "step " << i;
      for (size_t blk = 0; blk < a.grads.size(); ++blk)
        EXPECT_EQ(a.grads[blk], b.grads[blk]) << "step " << i << ", block " << blk;
    }
  }
  // Without the MLP's intermediates, [tokens, 3 · intermediate] less.
  EXPECT_GE(BlockMath::saved_bytes(c, g.T, DType::kF32) -
                BlockMath::saved_bytes(c, g.T, DType::kF32, /*mlp=*/false),
            uint64_t(g.T) * 3 * c.intermediate_size * 4);
}

INSTANTIATE_TEST_SUITE_P(Models, SavedActivations,
                         ::testing::Values("stories260K", "qwen2-tiny", "gemma3-tiny",
                                           "qwen3-tiny"),
                         [](const auto& info) { return testing::test_name(info.param); });

// Each GPU of a data-parallel group keeps its own micro-batches' saved activations: two CPU ranks
// with saved layers give the bits of the same two ranks recomputing every layer.
TEST(SavedActivations, DataParallelRanksSaveTheirOwn) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  if (!g.traj) GTEST_SKIP() << "golden data missing";
  const StepBatch batch = g.batch(0, 1);
  ASSERT_EQ(batch.micro_batches % 2, 0);
  StreamingConfig cfg = testing::rig_config(g, 1);
  auto recomputed = testing::data_parallel_step(g, batch, 2, cfg);
  ASSERT_TRUE(recomputed.ok()) << recomputed.status().to_string();
  cfg.saved_activation_layers = 1;
  cfg.mlp_recompute_layers = g.layout.config().num_layers - 1;
  auto saved = testing::data_parallel_step(g, batch, 2, cfg);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_EQ(saved->result.loss_sum, recomputed->result.loss_sum);
  for (size_t b = 0; b < saved->grads.size(); ++b)
    EXPECT_EQ(saved->grads[b], recomputed->grads[b]) << "block " << b;
}

TEST(SavedActivations, ACountBeyondTheLayersIsRefused) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  if (!g.traj) GTEST_SKIP() << "golden data missing";
  const int L = g.layout.config().num_layers;
  for (auto [k, j] : {std::pair{-1, 0}, {L + 1, 0}, {0, -1}, {1, L}}) {
    auto run = run_saved(g, g.batch(0, 1), k, j);
    ASSERT_FALSE(run.ok());
    EXPECT_EQ(run.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(run.status().message().find("saved_activation_layers " + std::to_string(k) +
                                          " and mlp_recompute_layers " + std::to_string(j) +
                                          " are not counts of the model's " + std::to_string(L) +
                                          " layers"),
              std::string::npos)
        << run.status().message();
  }
}

}  // namespace
}  // namespace spillway
