// Packed rows through the whole model (StepBatch::positions): a step over rows that pack several
// examples gives the loss and every block's gradient of the same examples one to a row, padded.
// On the golden models, so that each layer shape is covered: Llama (stories260K), the key bias
// (qwen2-tiny, whose gradient has an op of its own), Gemma 3's sliding window and sandwich norms
// (gemma3-tiny) and Qwen3's q/k norms (qwen3-tiny).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "compute/cpu/cpu-backend.h"
#include "state-rig.h"
#include "test-data.h"
#include "train/data-parallel-engine.h"

namespace spillway {
namespace {
using testing::Golden;
using testing::golden_state;
using testing::Step;
using testing::step_of;

// The golden step-0 batch's rows cut into examples of these lengths (each row's lengths sum to
// T), each keeping its tokens and labels.
struct Layouts {
  int T = 0, packed_rows = 0, padded_rows = 0;
  std::vector<int32_t> packed_ids, packed_labels, positions;  // [packed_rows, T]
  std::vector<int32_t> padded_ids, padded_labels;             // [padded_rows, T]
  int64_t targets = 0;

  Layouts(const StepBatch& golden, const std::vector<std::vector<int>>& cuts) {
    T = golden.seq_len;
    packed_rows = static_cast<int>(cuts.size());
    for (int r = 0; r < packed_rows; ++r) {
      int at = 0;
      for (int len : cuts[r]) {
        for (int i = 0; i < T; ++i) {  // the example alone: its tokens, then padding
          const size_t src = static_cast<size_t>(r) * T + at + i;
          padded_ids.push_back(i < len ? golden.input_ids[src] : 0);
          padded_labels.push_back(i < len ? golden.labels[src] : -100);
        }
        for (int i = 0; i < len; ++i) {
          const size_t src = static_cast<size_t>(r) * T + at + i;
          packed_ids.push_back(golden.input_ids[src]);
          packed_labels.push_back(golden.labels[src]);
          positions.push_back(i);
          targets += golden.labels[src] != -100;
        }
        at += len;
        ++padded_rows;
      }
      EXPECT_EQ(at, T) << "row " << r << "'s cuts must cover it";
    }
  }
  StepBatch packed() const {
    StepBatch b{packed_rows, 1, T, packed_ids, packed_labels};
    b.positions = positions;
    return b;
  }
  StepBatch padded() const { return StepBatch{padded_rows, 1, T, padded_ids, padded_labels}; }
};

Result<Step> run_step(Golden& g, const StepBatch& batch, int max_micro_batches) {
  StreamingConfig cfg = testing::rig_config(g, 1);
  cfg.max_micro_batches = max_micro_batches;
  auto be = testing::engine_cpu_backend(g.layout, cfg, /*strict=*/true, size_t{256} << 20);
  SPW_ASSIGN_OR_RETURN(std::unique_ptr<ModelState> state, golden_state(g));
  SPW_ASSIGN_OR_RETURN(auto engine, StreamingEngine::create(*be, *state, cfg));
  return step_of(*engine, *state, batch);
}

class PackedStep : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedStep, EqualsTheStepWithOneExampleARow) {
  SPILLWAY_REQUIRE_DATA();
  Golden g(GetParam());
  if (!g.traj) GTEST_SKIP() << "golden data missing";
  ASSERT_GE(g.T, 24);
  const int T = g.T;
  // Examples of 1 token, of a few, and of most of a row; the last row one example.
  std::vector<std::vector<int>> cuts;
  for (int r = 0; r < g.B; ++r) {
    if (r + 1 == g.B)
      cuts.push_back({T});
    else if (r % 2 == 0)
      cuts.push_back({T / 3, 1, T - T / 3 - 1 - 5, 5});
    else
      cuts.push_back({7, T - 7});
  }
  const Layouts l(g.batch(0, 1), cuts);
  auto packed = run_step(g, l.packed(), l.padded_rows);
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  auto padded = run_step(g, l.padded(), l.padded_rows);
  ASSERT_TRUE(padded.ok()) << padded.status().to_string();

  EXPECT_EQ(packed->result.targets, l.targets);
  EXPECT_EQ(padded->result.targets, l.targets);
  EXPECT_NEAR(packed->result.loss(), padded->result.loss(), 1e-5 * padded->result.loss());
  for (size_t b = 0; b < packed->grads.size(); ++b) {
    const std::vector<float>& x = packed->grads[b];
    EXPECT_LT(testing::rel_l2(x.data(), padded->grads[b].data(), x.size()), 1e-4) << "block " << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PackedStep,
                         ::testing::Values("stories260K", "qwen2-tiny", "gemma3-tiny",
                                           "qwen3-tiny"),
                         [](const auto& info) { return testing::test_name(info.param); });

// Two CPU ranks split the packed micro-batches, each with its rows' positions: the one device's
// loss and gradients.
TEST(PackedStep, DataParallelRanksTakeTheirRowsPositions) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  const int T = g.T;
  std::vector<std::vector<int>> cuts;
  for (int r = 0; r < g.B; ++r)
    cuts.push_back(r % 2 ? std::vector<int>{T} : std::vector<int>{5, T - 5});
  const Layouts l(g.batch(0, 1), cuts);
  ASSERT_EQ(l.packed_rows % 2, 0);
  auto one = run_step(g, l.packed(), l.packed_rows);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto two = testing::data_parallel_step(g, l.packed(), 2, testing::rig_config(g, 1));
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(two->result.targets, one->result.targets);
  EXPECT_NEAR(two->result.loss(), one->result.loss(), 1e-6 * one->result.loss());
  for (size_t b = 0; b < one->grads.size(); ++b)
    EXPECT_LT(testing::rel_l2(two->grads[b].data(), one->grads[b].data(), one->grads[b].size()),
              1e-5)
        << "block " << b;
}

TEST(PackedStep, PositionsThatBreakTheConventionAreRefused) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  StepBatch golden = g.batch(0, 1);
  std::vector<int32_t> pos(golden.input_ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i % g.T);
  pos[5] = 3;  // neither 0 nor one more than the token before
  golden.positions = pos;
  auto s = run_step(g, golden, g.B);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("position 3 at token 5"), std::string::npos)
      << s.status().to_string();
}

}  // namespace
}  // namespace spillway
