// StepFigureRecorder: the median step after the first, link bytes per step over the same steps,
// the peak device memory; predicted_figures and compare_figures against a plan's JSON.
#include "train/run-figures.h"

#include <gtest/gtest.h>

namespace spillway {
namespace {

TEST(RunFigures, MedianAfterTheFirstStepAndLinkBytesOverTheSameSteps) {
  StepFigureRecorder r;
  EXPECT_FALSE(r.figures().step_s.has_value());
  // The first step is slow (algorithm choice, page faults) and moves the first step's bytes.
  r.add_step(9.0, 1000, 5'000, 100, 40);  // bytes moved by each step
  const StepFigures one = r.figures();
  EXPECT_DOUBLE_EQ(*one.step_s, 9.0);  // with one step, that one
  EXPECT_DOUBLE_EQ(*one.h2d_bytes, 100);
  r.add_step(2.0, 1000, 7'000, 90, 40);
  r.add_step(4.0, 1000, 6'000, 110, 40);
  r.add_step(3.0, 1000, 6'500, 100, 40);
  const StepFigures f = r.figures();
  EXPECT_EQ(r.steps(), 4);
  EXPECT_DOUBLE_EQ(*f.step_s, 3.0);                 // median of 2, 4, 3
  EXPECT_DOUBLE_EQ(*f.tokens_per_s, 3000.0 / 9.0);  // the same steps' tokens over their time
  EXPECT_EQ(*f.peak_hbm_bytes, 7'000u);
  EXPECT_DOUBLE_EQ(*f.h2d_bytes, 100.0);  // (90 + 110 + 100) / 3
  EXPECT_DOUBLE_EQ(*f.d2h_bytes, 40.0);
  ASSERT_TRUE(f.peak_dram_bytes.has_value());  // this process's VmHWM
  EXPECT_GT(*f.peak_dram_bytes, 1u << 20);
}

// A long run keeps no figure per step (the 40,000-step soak grew 2.5 MiB when it did): the median
// is over the last kMedianSteps steps, the sums over all after the first.
TEST(RunFigures, ALongRunKeepsBoundedMemoryAndTheRecentMedian) {
  StepFigureRecorder r;
  r.add_step(100.0, 10, 0, 1, 1);  // the first: left out
  const size_t n = StepFigureRecorder::kMedianSteps;
  for (size_t i = 0; i < n; ++i) r.add_step(5.0, 10, 0, 2, 2);
  for (size_t i = 0; i < n; ++i) r.add_step(1.0, 10, 0, 2, 2);  // the last kMedianSteps
  const StepFigures f = r.figures();
  EXPECT_EQ(r.steps(), static_cast<int64_t>(2 * n + 1));
  EXPECT_DOUBLE_EQ(*f.step_s, 1.0);
  EXPECT_DOUBLE_EQ(*f.tokens_per_s, 10.0 * 2 * n / (6.0 * n));
  EXPECT_DOUBLE_EQ(*f.h2d_bytes, 2.0);
}

TEST(RunFigures, NoDeviceMeansNoHbmFigure) {
  StepFigureRecorder r;
  r.add_step(1.0, 10, 0, 0, 0);
  EXPECT_FALSE(r.figures().peak_hbm_bytes.has_value());
}

TEST(RunFigures, ComparedWithThePlan) {
  const nlohmann::json plan = {
      {"fits", true},
      {"backend", "cuda"},
      {"tiers",
       {{"hbm", {{"needed_bytes", 19.5e9}, {"runtime_bytes", 0.5e9}, {"total_bytes", 80e9}}},
        {"dram", {{"needed_bytes", 100e9}}}}},
      {"step",
       {{"step_s", 6.4}, {"tokens_per_s", 10240.0}, {"h2d_bytes", 52e9}, {"d2h_bytes", 27e9}}}};
  const StepFigures p = predicted_figures(plan_from_json(plan).value());
  EXPECT_DOUBLE_EQ(*p.step_s, 6.4);
  EXPECT_EQ(*p.peak_hbm_bytes, 20'000'000'000u);  // the engine's and the runtime's
  EXPECT_EQ(*p.peak_dram_bytes, 100'000'000'000u);
  StepFigures m;
  m.step_s = 6.46;
  m.peak_hbm_bytes = 21'000'000'000u;
  const nlohmann::json v = to_json(compare_figures(p, m));
  EXPECT_NEAR(v["step_s"]["ratio"].get<double>(), 6.46 / 6.4, 1e-12);
  EXPECT_NEAR(v["peak_hbm_bytes"]["ratio"].get<double>(), 1.05, 1e-12);
  EXPECT_TRUE(v["peak_dram_bytes"]["measured"].is_null());
  EXPECT_TRUE(v["peak_dram_bytes"]["ratio"].is_null());
  EXPECT_DOUBLE_EQ(v["h2d_bytes"]["predicted"].get<double>(), 52e9);
  // A CPU plan without a device cap predicts no HBM: its "device" is DRAM.
  nlohmann::json cpu = plan;
  cpu["backend"] = "cpu";
  cpu["tiers"]["hbm"]["total_bytes"] = 0;
  EXPECT_FALSE(predicted_figures(plan_from_json(cpu).value()).peak_hbm_bytes.has_value());
  EXPECT_TRUE(to_json(m)["tokens_per_s"].is_null());
  // Two GPUs: the plan's link bytes are one GPU's, the engine counts both GPUs' links; HBM is
  // each GPU's, as the run measures rank 0's.
  nlohmann::json two = plan;
  two["devices"] = {{"count", 2}, {"indices", {0, 1}}};
  const StepFigures both = predicted_figures(plan_from_json(two).value());
  EXPECT_DOUBLE_EQ(*both.h2d_bytes, 2 * 52e9);
  EXPECT_DOUBLE_EQ(*both.d2h_bytes, 2 * 27e9);
  EXPECT_EQ(*both.peak_hbm_bytes, 20'000'000'000u);
}

}  // namespace
}  // namespace spillway
