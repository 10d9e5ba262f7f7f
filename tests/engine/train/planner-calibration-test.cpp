// The planner against measured steps: every run of tests/bench/figures/calibration-h100.json
// (plan --measure on the H100, with the machine figures that run probed) planned again with the
// model of today, held to the targets: step time within 10% for tinyllama-1.1b, llama3.2-3b,
// llama2-7b and qwen2.5-7b (22% off until the key bias's gradient was counted), peak HBM and DRAM
// within 5%, link bytes exact. A change to the step model that breaks them fails here, without a
// GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/model-config.h"
#include "train/planner.h"
#include "train/run-figures.h"
#include "train/streaming-engine.h"

namespace spillway {
namespace {

// The GPU machine a figures file measured on: `m` its probe's rates, `sizes` (the run, or the
// file) the DRAM and device sizes.
MachineProbe gpu_machine(const nlohmann::json& m, const nlohmann::json& sizes) {
  MachineProbe machine;
  machine.backend = "cuda";
  machine.device = m["device"];
  machine.compute_flops = m["compute_flops"];
  machine.h2d_bytes_per_s = m["h2d_bytes_per_s"];
  machine.d2h_bytes_per_s = m["d2h_bytes_per_s"];
  machine.duplex_bytes_per_s = m["duplex_bytes_per_s"];
  machine.host_mem_bytes_per_s = m["host_mem_bytes_per_s"];
  machine.adamw_params_per_s = m["adamw_params_per_s"];
  machine.dram_total_bytes = sizes["dram_total_bytes"];
  machine.dram_available_bytes = sizes["dram_available_bytes"];
  machine.device_total_bytes = sizes["device_total_bytes"];
  machine.device_free_bytes = sizes["device_free_bytes"];
  return machine;
}

TEST(PlannerCalibration, MeasuredH100StepsWithinTheirTargets) {
  std::ifstream in(SPILLWAY_CALIBRATION_FILE);
  ASSERT_TRUE(in) << SPILLWAY_CALIBRATION_FILE;
  const nlohmann::json figures = nlohmann::json::parse(in);
  ASSERT_GE(figures["runs"].size(), 3u);
  for (const auto& run : figures["runs"]) {
    const std::string name = run["model"];
    auto config = ModelConfig::from_json(run["config"]);
    ASSERT_TRUE(config.ok()) << name << ": " << config.status().to_string();
    TrainJob job;
    job.backend = "cuda";
    job.hbm_state_blocks = 0;  // measured before the HBM state tier: every block's state in DRAM
    job.saved_activation_layers = 0;  // and before saved activations: every layer recomputed
    job.mlp_recompute_layers = 0;
    job.micro_batch_size = run["micro_batch_size"];
    job.grad_accum = run["grad_accum"];
    job.seq_len = run["seq_len"];
    const MachineProbe machine = gpu_machine(run["machine"], run);
    const Plan plan = make_plan(*config, job, machine, 0, /*with_suggestion=*/false);
    ASSERT_TRUE(plan.fits) << name << ": " << plan.reason;
    const StepFigures predicted = predicted_figures(plan);
    const auto& measured = run["measured"];
    auto ratio = [&](const char* key, double p) { return measured[key].get<double>() / p; };
    const double step = ratio("step_s", *predicted.step_s),
                 hbm = ratio("peak_hbm_bytes", double(*predicted.peak_hbm_bytes)),
                 dram = ratio("peak_dram_bytes", double(*predicted.peak_dram_bytes));
    std::printf(
        "%-15s step %.3f s predicted, %.3f s measured (%.3f); peak HBM %.3f; peak DRAM %.3f\n",
        name.c_str(), *predicted.step_s, measured["step_s"].get<double>(), step, hbm, dram);
    EXPECT_NEAR(step, 1.0, 0.10) << name;
    EXPECT_NEAR(hbm, 1.0, 0.05) << name;
    EXPECT_NEAR(dram, 1.0, 0.05) << name;
    EXPECT_DOUBLE_EQ(measured["h2d_bytes"].get<double>(), *predicted.h2d_bytes) << name;
    EXPECT_DOUBLE_EQ(measured["d2h_bytes"].get<double>(), *predicted.d2h_bytes) << name;
  }
}

// The CPU backend against measured steps: every run of tests/bench/figures/calibration-cpu.json
// (plan --measure 20 on the 2-core dev VM, shared with other builds, with the figures the run's own
// probe took) planned again with the model of today. Each configuration's median ratio of measured
// to predicted step is held within 25%: a single run on a loaded 2-core machine strays further
// (its spread is in the file and in the README). The old model, all FLOPs at the 512³ sgemm rate,
// was 4.9 times too fast for stories260K.
TEST(PlannerCalibration, MeasuredCpuStepsWithin25Percent) {
  std::ifstream in(SPILLWAY_CPU_CALIBRATION_FILE);
  ASSERT_TRUE(in) << SPILLWAY_CPU_CALIBRATION_FILE;
  const nlohmann::json figures = nlohmann::json::parse(in);
  ASSERT_GE(figures["runs"].size(), 9u);
  std::map<std::string, std::vector<double>> ratios;
  for (const auto& run : figures["runs"]) {
    const std::string name = run["name"];
    auto config = ModelConfig::from_json(run["config"]);
    ASSERT_TRUE(config.ok()) << name << ": " << config.status().to_string();
    TrainJob job;
    job.saved_activation_layers = 0;  // measured recomputing every layer
    job.mlp_recompute_layers = 0;
    job.backend = "cpu";
    job.micro_batch_size = run["micro_batch_size"];
    job.grad_accum = run["grad_accum"];
    job.seq_len = run["seq_len"];
    const auto& m = run["machine"];
    MachineProbe machine;
    machine.compute_flops = m["compute_flops"];
    machine.h2d_bytes_per_s = m["h2d_bytes_per_s"];
    machine.host_mem_bytes_per_s = m["host_mem_bytes_per_s"];
    machine.cpu_gemm_flops = m["cpu_gemm_flops"];
    machine.cpu_attention_s_per_score = m["cpu_attention_s_per_score"];
    machine.cpu_threads = 2;  // the dev VM's
    machine.dram_total_bytes = machine.dram_available_bytes = 16ull << 30;
    const Plan plan = make_plan(*config, job, machine, 0, /*with_suggestion=*/false);
    ASSERT_TRUE(plan.fits) << name << ": " << plan.reason;
    EXPECT_TRUE(plan.step.calibrated) << name;
    const double measured = run["measured_step_s"];
    ratios[name].push_back(measured / plan.step.step_s);
    std::printf("%-18s step %.3f s predicted, %.3f s measured (%.2f)\n", name.c_str(),
                plan.step.step_s, measured, measured / plan.step.step_s);
  }
  ASSERT_GE(ratios.size(), 3u);
  for (auto& [name, r] : ratios) {
    std::sort(r.begin(), r.end());
    const double median = r[r.size() / 2];
    EXPECT_NEAR(median, 1.0, 0.25) << name << ": median of " << r.size() << " runs";
  }
}

// The HBM state tier against measured steps: every run of tests/bench/figures/hbm-state-h100.json
// (bench on the H100: llama2-7b at 16K, 32K and 64K tokens per step and llama3.2-3b at 16K and 64K,
// each with all state in DRAM and with the tier as the trainer places it, alternated in one
// process) planned again. The planner places as many blocks as the engine did, or one more when
// that block fit the probe's free memory by less than 256 MiB (the engine measures its own free
// memory at setup: llama2-7b at 32K fits 21 blocks by 32 MB on the probe's figure, and the engine
// placed 20). Planned with the engine's count: link bytes exact, the step within 10% with the
// tier. With every block in DRAM the step is held within 20%: at 16K tokens llama3.2-3b's step is
// 13% longer than planned (its CPU AdamW showed 0.80 s of 0.86 s visible), a short all-DRAM step
// that is not what the planner chooses on a GPU.
TEST(PlannerCalibration, HbmStateTierOnTheH100) {
  std::ifstream in(SPILLWAY_HBM_STATE_FILE);
  ASSERT_TRUE(in) << SPILLWAY_HBM_STATE_FILE;
  const nlohmann::json figures = nlohmann::json::parse(in);
  const MachineProbe machine = gpu_machine(figures["machine"], figures);
  ASSERT_EQ(figures["runs"].size(), 10u);
  for (const auto& run : figures["runs"]) {
    const int blocks = run["hbm_state_blocks"];
    const std::string name = run["model"].get<std::string>() + " " +
                             std::to_string(run["grad_accum"].get<int>() * 16) + "K, " +
                             std::to_string(blocks) + " blocks in HBM";
    auto config = ModelConfig::from_json(run["config"]);
    ASSERT_TRUE(config.ok()) << name << ": " << config.status().to_string();
    TrainJob job;
    job.saved_activation_layers = 0;  // measured recomputing every layer
    job.mlp_recompute_layers = 0;
    job.backend = "cuda";
    job.micro_batch_size = run["micro_batch_size"];
    job.grad_accum = run["grad_accum"];
    job.seq_len = run["seq_len"];
    const auto& measured = run["measured"];
    if (blocks > 0) {
      // The placement: as the engine placed it, or one block more on the boundary.
      job.hbm_state_blocks = -1;
      const Plan placed = make_plan(*config, job, machine, 0, /*with_suggestion=*/false);
      const uint64_t slack = machine.device_free_bytes - placed.hbm.needed_bytes -
                             StreamingEngine::kHbmStateReserveBytes;
      std::printf("%-36s %d blocks planned, %.0f MB to spare\n", name.c_str(),
                  placed.state.hbm_blocks, slack / 1e6);
      if (placed.state.hbm_blocks != blocks) {
        EXPECT_EQ(placed.state.hbm_blocks, blocks + 1) << name;
        EXPECT_LT(slack, uint64_t{256} << 20) << name;
      }
    }
    job.hbm_state_blocks = blocks;
    const Plan plan = make_plan(*config, job, machine, 0, /*with_suggestion=*/false);
    ASSERT_TRUE(plan.fits) << name << ": " << plan.reason;
    EXPECT_EQ(plan.state.hbm_bytes, measured["hbm_state_bytes"].get<uint64_t>()) << name;
    const StepFigures predicted = predicted_figures(plan);
    const double step = measured["step_s"].get<double>() / *predicted.step_s;
    std::printf("%-36s step %.3f s predicted, %.3f s measured (%.3f)\n", name.c_str(),
                *predicted.step_s, measured["step_s"].get<double>(), step);
    EXPECT_NEAR(step, 1.0, blocks > 0 ? 0.10 : 0.20) << name;
    EXPECT_DOUBLE_EQ(measured["h2d_bytes"].get<double>(), *predicted.h2d_bytes) << name;
    EXPECT_DOUBLE_EQ(measured["d2h_bytes"].get<double>(), *predicted.d2h_bytes) << name;
  }
}

// Saved activations against the H200 (tests/bench/figures/saved-activations-h200.json,
// "calibration"): the trainer's plan --measure of llama2-7b at 32K tokens a sequence and at 8 × 4 ×
// 2048, every placement key at its default, planned again with the counts that run chose: the
// step within 10% (measured 1.9% and 5.1% faster), link bytes exact, peak HBM and DRAM within 5%;
// and the plan's own choice today no slower than those counts (it leaves 1 GiB free since).
TEST(PlannerCalibration, SavedActivationsOnTheH200) {
  std::ifstream in(SPILLWAY_SAVED_ACTIVATIONS_FILE);
  ASSERT_TRUE(in) << SPILLWAY_SAVED_ACTIVATIONS_FILE;
  const nlohmann::json figures = nlohmann::json::parse(in)["calibration"];
  MachineProbe machine = gpu_machine(figures["machine"], figures);
  machine.attention = figures["machine"]["attention"];
  machine.gpus = 1;
  ASSERT_TRUE(machine.fused_attention());
  ASSERT_EQ(figures["runs"].size(), 2u);
  for (const auto& run : figures["runs"]) {
    const std::string name = run["name"];
    ModelConfig config = *model_preset("llama-7b");  // llama2-7b's shape
    config.max_position_embeddings = std::max(config.max_position_embeddings, 32768);
    TrainJob job;
    job.backend = "cuda";
    job.micro_batch_size = run["micro_batch_size"];
    job.grad_accum = run["grad_accum"];
    job.seq_len = run["seq_len"];
    const Plan chosen = make_plan(config, job, machine, 0, /*with_suggestion=*/false);
    const auto& state = run["state"];
    job.hbm_state_blocks = state["hbm_blocks"];
    job.saved_activation_layers = state["saved_activation_layers"];
    job.mlp_recompute_layers = state["mlp_recompute_layers"];
    const Plan plan = make_plan(config, job, machine, 0, /*with_suggestion=*/false);
    ASSERT_TRUE(plan.fits && chosen.fits) << name << ": " << plan.reason << chosen.reason;
    const StepFigures predicted = predicted_figures(plan);
    const auto& measured = run["measured"];
    const double step = measured["step_s"].get<double>() / *predicted.step_s;
    std::printf(
        "%-26s step %.3f s predicted, %.3f s measured (%.3f); today's choice: %d whole, "
        "%d without the MLP's, %d blocks, %.3f s\n",
        name.c_str(), *predicted.step_s, measured["step_s"].get<double>(), step,
        chosen.state.saved_activation_layers, chosen.state.mlp_recompute_layers,
        chosen.state.hbm_blocks, chosen.step.step_s);
    EXPECT_NEAR(step, 1.0, 0.10) << name;
    EXPECT_DOUBLE_EQ(measured["h2d_bytes"].get<double>(), *predicted.h2d_bytes) << name;
    EXPECT_DOUBLE_EQ(measured["d2h_bytes"].get<double>(), *predicted.d2h_bytes) << name;
    EXPECT_NEAR(measured["peak_hbm_bytes"].get<double>() / double(*predicted.peak_hbm_bytes), 1.0,
                0.05)
        << name;
    EXPECT_NEAR(measured["peak_dram_bytes"].get<double>() / double(*predicted.peak_dram_bytes), 1.0,
                0.05)
        << name;
    EXPECT_LE(chosen.step.step_s, plan.step.step_s * (1.0 + kTradeMargin)) << name;
    EXPECT_GT(chosen.state.mlp_recompute_layers + chosen.state.saved_activation_layers, 0) << name;
  }
}

}  // namespace
}  // namespace spillway
