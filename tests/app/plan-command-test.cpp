// `spillway-worker plan`'s table for a data-parallel step: the GPUs row, the step's tokens over
// every GPU and the suggestion's batch per GPU, from a plan of llama2-7b on a synthetic two-H100
// machine (planner-test.cpp's figures); and for a step that trades checkpoints for the HBM state
// tier.
#include "worker/plan-command.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "planner-fixtures.h"
#include "train/planner.h"

namespace spillway::worker {
namespace {
using spillway::testing::seven_b_job;
using spillway::testing::two_h100_host;

std::string table(const Plan& plan) {
  std::ostringstream out;
  print_plan(out, plan);
  return out.str();
}

TEST(PlanTable, TwoGpusHaveTheirRow) {
  const Plan plan = make_plan(*model_preset("llama-7b"), seven_b_job(2), two_h100_host(), 10);
  ASSERT_TRUE(plan.fits) << plan.reason;
  const std::string text = table(plan);
  std::printf("%s", text.c_str());
  EXPECT_NE(text.find("\n  GPUs               2 (0, 1), NCCL 0.004 s a step exposed (13.5 GB "
                      "reduce-scattered per GPU)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  tokens per step    65,536 (4 x 4 x 2048 x 2 GPUs), "), std::string::npos)
      << text;
  EXPECT_NE(text.find(" accumulation x 2 GPUs = "), std::string::npos) << text;
}

// Past one machine: the machines row (the network's reduces and broadcasts) and the step's tokens
// over every machine.
TEST(PlanTable, MachinesHaveTheirRow) {
  MachineProbe m = spillway::testing::h100_host();
  m.machines = 2;
  m.network_bytes_per_s = 50e9;
  const Plan plan = make_plan(*model_preset("llama-7b"), seven_b_job(1), m, 10);
  ASSERT_TRUE(plan.fits) << plan.reason;
  const std::string text = table(plan);
  EXPECT_NE(text.find("\n  machines           2, each as this one holding its blocks' host state "
                      "(the plan's DRAM and SSD are the fullest machine's); 0.027 s a step "
                      "exposed (53.0 GB per machine over 50.0 GB/s of network: gradients "
                      "reduced, weights broadcast)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  tokens per step    65,536 (4 x 4 x 2048 x 2 machines), "),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("  GPUs "), std::string::npos) << text;
}

TEST(PlanTable, OneGpuHasNoGpusRow) {
  const Plan plan = make_plan(*model_preset("llama-7b"), seven_b_job(1), two_h100_host(), 10);
  const std::string text = table(plan);
  EXPECT_EQ(text.find("  GPUs "), std::string::npos) << text;
  EXPECT_NE(text.find("\n  tokens per step    32,768 (4 x 4 x 2048), "), std::string::npos) << text;
  // The machine has two: the suggestion says what both would give.
  EXPECT_NE(text.find("placement.devices \"all\" (2 GPUs) would give "), std::string::npos) << text;
}

// The trade between checkpoints and the HBM state tier (planner-test.cpp's 48 GB GPU): the table
// says how many layers' checkpoints stay on the device, and the state row what moved and why.
TEST(PlanTable, CheckpointsMovedForBlocksShowTheSplit) {
  MachineProbe m = spillway::testing::h100_host();
  m.device_total_bytes = m.device_free_bytes = 48'000'000'000ull;
  TrainJob job = seven_b_job(1);
  job.micro_batch_size = 16;
  job.grad_accum = 1;
  job.hbm_state_blocks = -1;
  const Plan plan = make_plan(*model_preset("llama-7b"), job, m, 10);
  ASSERT_TRUE(plan.fits) << plan.reason;
  const std::string text = table(plan);
  std::printf("%s", text.c_str());
  EXPECT_NE(text.find("\n  tokens per step    32,768 (16 x 1 x 2048), checkpoints of 2 of 33 "
                      "layers on the device, the rest in host memory\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  state              first 11 of 34 blocks in "), std::string::npos)
      << text;
  EXPECT_NE(text.find("go to host memory for 3 more blocks in HBM: 3.288 s a step against "
                      "3.404 s with every checkpoint in HBM"),
            std::string::npos)
      << text;
  EXPECT_EQ(
      table(make_plan(*model_preset("llama-7b"), seven_b_job(1), m, 10)).find("checkpoints of "),
      std::string::npos);  // every block in DRAM: no trade, every checkpoint on the device
}

// The recompute row: what each layer's backward recomputes under the plan's saved activations
// (placement.saved_activation_layers and mlp_recompute_layers).
TEST(PlanTable, TheRecomputeRowSaysWhatEachLayerRecomputes) {
  TrainJob job = seven_b_job(1);
  EXPECT_NE(table(make_plan(*model_preset("llama-7b"), job, spillway::testing::h100_host(), 10))
                .find("\n  recompute          the forward of layers 0-31 from their checkpoints\n"),
            std::string::npos);
  job.saved_activation_layers = 2;
  job.mlp_recompute_layers = 5;
  const std::string text =
      table(make_plan(*model_preset("llama-7b"), job, spillway::testing::h100_host(), 10));
  EXPECT_NE(text.find("\n  recompute          the forward of layers 0-24 from their checkpoints; "
                      "the MLP of layers 25-29 (their other activations saved in HBM); nothing "
                      "of layers 30-31 (every activation saved in HBM)\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace spillway::worker
