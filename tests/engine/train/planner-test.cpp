// The planner's FLOP count and step-time model for CPU and GPU jobs on synthetic machines, and
// the machine probe's device measurements run through the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/parameter-layout.h"
#include "train/machine-probe.h"
#include "train/planner.h"

namespace spillway {
namespace {

ModelConfig llama2_7b() {
  ModelConfig c = *model_preset("llama-7b");  // Llama-2-7b's shape
  return c;
}

// The H100 machine of ../shared/bench/README.md: bf16 GEMM 790 TFLOPS, 55 GB/s each way and
// 93 GB/s both ways pinned, host memory 54 GB/s, fused AdamW 5,239 M params/s, 125 GiB of DRAM.
MachineProbe h100_host() {
  MachineProbe m;
  m.backend = "cuda";
  m.device = "NVIDIA H100 80GB HBM3";
  m.compute_flops = 790e12;
  m.h2d_bytes_per_s = 55e9;
  m.d2h_bytes_per_s = 55e9;
  m.duplex_bytes_per_s = 93e9;
  m.host_mem_bytes_per_s = 54e9;
  m.adamw_params_per_s = 5.239e9;
  m.dram_total_bytes = 125ull << 30;
  m.dram_available_bytes = 122ull << 30;
  m.device_total_bytes = 85'000'000'000ull;
  m.device_free_bytes = 84'000'000'000ull;
  m.ssd_free_bytes = m.ssd_total_bytes = 64'000'000'000ull;
  return m;
}

TrainJob seven_b_job() {
  TrainJob job;
  job.backend = "cuda";
  job.micro_batch_size = 4;
  job.grad_accum = 4;
  job.seq_len = 2048;
  return job;
}

TEST(StepFlops, MatchesTheBenchReadmeFormula) {
  const ModelConfig c = llama2_7b();
  const double tokens = 32768;
  const double params = 6'738'415'616.0;  // transformers' count for Llama-2-7b
  ASSERT_EQ(ParameterLayout::build(c).parameter_count(), 6'738'415'616u);
  const double per_token = (params - 32000.0 * 4096) + 32.0 * 2048 * 4096;
  const StepFlops f = step_flops(c, tokens, 2048);
  EXPECT_DOUBLE_EQ(f.model, 6.0 * per_token * tokens);
  EXPECT_DOUBLE_EQ(f.hardware, 8.0 * per_token * tokens);
}

TEST(StepFlops, TiedHeadCountsItsMatmul) {
  ModelConfig tied = *model_preset("llama-50m");
  tied.tie_word_embeddings = true;
  ModelConfig untied = tied;
  untied.tie_word_embeddings = false;
  EXPECT_DOUBLE_EQ(step_flops(tied, 1000, 512).model, step_flops(untied, 1000, 512).model);
}

TEST(Planner, SevenBOnTheH100IsComputeBound) {
  const ModelConfig c = llama2_7b();
  const nlohmann::json plan = make_plan(c, seven_b_job(), h100_host(), 10);
  ASSERT_TRUE(plan["fits"].get<bool>()) << plan["reason"];
  const auto& s = plan["step"];
  const double compute = s["compute_s"], link = s["link_s"], adamw = s["adamw_s"], norm = s["grad_norm_s"];
  EXPECT_NEAR(compute, step_flops(c, 32768, 2048).hardware / (790e12 * kGpuComputeEfficiency), 1e-9);
  // 27 GB of fp32 master weights up for the forward and the layers' again for the backward but
  // the last one (still in a slot), and 27 GB of fp32 gradients down, the per-token losses and the
  // per-block sums of squares: exactly what the bench measured on the H100 at 32K tokens per step.
  EXPECT_DOUBLE_EQ(s["h2d_bytes"].get<double>(), 52'049'461'248.0);
  EXPECT_DOUBLE_EQ(s["d2h_bytes"].get<double>(), 26'953'662'464.0 + 32768 * 4 + 34 * 8);
  const double h2d = s["h2d_bytes"], d2h = s["d2h_bytes"];
  EXPECT_DOUBLE_EQ(link, std::max({h2d / 55e9, d2h / 55e9, (h2d + d2h) / 93e9}));
  EXPECT_NEAR(adamw, 6'738'415'616.0 / 5.239e9, 1e-9);
  // AdamW outlasts the forward that hides it by a little; the gradient norm shows in full.
  const double visible = norm + std::max(0.0, adamw - compute / 4);
  EXPECT_NEAR(s["optimizer_visible_s"].get<double>(), visible, 1e-9);
  EXPECT_NEAR(s["step_s"].get<double>(), visible + compute, 1e-9);
  EXPECT_EQ(s["bottleneck"], "compute");
  EXPECT_NEAR(s["model_tflops"].get<double>(), step_flops(c, 32768, 2048).model / s["step_s"].get<double>() / 1e12, 1e-6);

  // Host memory: fp32 master (which the GPU streams), gradients and both moments: 16 B/param.
  const double padded = static_cast<double>(ParameterLayout::build(c).total_numel());
  const auto& dram = plan["tiers"]["dram"]["categories"];
  EXPECT_EQ(dram["master_bytes"].get<double>(), 4 * padded);
  EXPECT_EQ(dram["gradients_bytes"].get<double>(), 4 * padded);
  EXPECT_EQ(dram["optimizer_bytes"].get<double>(), 8 * padded);
  EXPECT_EQ(dram["weights_bytes"].get<double>(), 0);
  EXPECT_EQ(plan["tiers"]["dram"]["needed_bytes"].get<double>(), 16 * padded);
  // HBM: weight slots, gradient buffers, workspace and every checkpoint, within the free 84 GB.
  const auto& hbm = plan["tiers"]["hbm"];
  EXPECT_GT(hbm["categories"]["checkpoints_bytes"].get<double>(), 0);
  EXPECT_LE(hbm["needed_bytes"].get<double>(), 84e9);
  EXPECT_EQ(hbm["free_bytes"].get<double>(), 84e9);
  EXPECT_EQ(plan["machine"]["device"], "NVIDIA H100 80GB HBM3");
}

TEST(Planner, NamesTheLinkAndTheOptimizerWhenTheyAreSlowest) {
  const ModelConfig c = llama2_7b();
  MachineProbe slow_link = h100_host();
  slow_link.h2d_bytes_per_s = slow_link.d2h_bytes_per_s = 6.8e9;  // pageable memory
  slow_link.duplex_bytes_per_s = 0;                                  // not measured: the two take turns
  nlohmann::json plan = make_plan(c, seven_b_job(), slow_link, 10);
  EXPECT_DOUBLE_EQ(plan["step"]["link_s"].get<double>(),
                   (plan["step"]["h2d_bytes"].get<double>() + plan["step"]["d2h_bytes"].get<double>()) / 6.8e9);
  EXPECT_EQ(plan["step"]["bottleneck"], "h2d");

  MachineProbe slow_cpu = h100_host();
  slow_cpu.adamw_params_per_s = 0.5e9;
  plan = make_plan(c, seven_b_job(), slow_cpu, 10);
  EXPECT_EQ(plan["step"]["bottleneck"], "optimizer");
  const auto& s = plan["step"];
  EXPECT_NEAR(s["step_s"].get<double>(),
              s["grad_norm_s"].get<double>() + s["adamw_s"].get<double>() - s["compute_s"].get<double>() / 4 +
                  s["compute_s"].get<double>(),
              1e-9);
}

TEST(Planner, CpuStepAddsItsParts) {
  const ModelConfig c = *model_preset("llama-50m");
  MachineProbe m;
  m.compute_flops = 100e9;
  m.h2d_bytes_per_s = m.host_mem_bytes_per_s = 20e9;
  m.dram_total_bytes = m.dram_available_bytes = 16ull << 30;
  TrainJob job;
  job.seq_len = 256;
  job.micro_batch_size = 4;
  const nlohmann::json plan = make_plan(c, job, m, 100);
  const auto& s = plan["step"];
  EXPECT_NEAR(s["compute_s"].get<double>(), step_flops(c, 1024, 256).hardware / 100e9, 1e-12);
  EXPECT_NEAR(s["step_s"].get<double>(),
              s["compute_s"].get<double>() + s["optimizer_s"].get<double>() + s["ssd_s"].get<double>(), 1e-12);
  // Not measured: AdamW at 28 B/param of memory traffic.
  EXPECT_NEAR(s["adamw_s"].get<double>(), 28.0 * ParameterLayout::build(c).parameter_count() / 20e9, 1e-12);
}

TEST(MachineProbe, DeviceFiguresThroughTheCpuBackend) {
  auto backend = compute::make_cpu_backend(0);
  MachineProbe m;
  DeviceProbeSizes sizes;
  sizes.gemm_n = 128;
  sizes.gemm_reps = 2;
  sizes.copy_bytes = 1 << 20;
  sizes.copy_reps = 2;
  ASSERT_TRUE(probe_device(*backend, &m, sizes).ok());
  EXPECT_GT(m.compute_flops, 0);
  EXPECT_GT(m.h2d_bytes_per_s, 0);
  EXPECT_GT(m.d2h_bytes_per_s, 0);
  EXPECT_GT(m.duplex_bytes_per_s, 0);
  EXPECT_EQ(m.backend, "cpu");
  EXPECT_FALSE(m.device.empty());

  sizes.gemm_n = 0;
  EXPECT_EQ(probe_device(*backend, &m, sizes).code(), ErrorCode::kInvalidArgument);
}

TEST(MachineProbe, AdamwRate) {
  auto rate = measure_adamw(1 << 20);
  ASSERT_TRUE(rate.ok()) << rate.status().to_string();
  EXPECT_GT(*rate, 1e6);
  EXPECT_FALSE(measure_adamw(0).ok());
}

}  // namespace
}  // namespace spillway
