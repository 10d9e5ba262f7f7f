// The planner's FLOP count and step-time model for CPU and GPU jobs on synthetic machines, and
// the machine probe's device measurements run through the CPU backend.
#include "train/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/parameter-layout.h"
#include "planner-fixtures.h"
#include "train/block-math.h"
#include "train/hbm-state.h"
#include "train/machine-probe.h"
#include "train/streaming-engine.h"

namespace spillway {
namespace {
using testing::h100_host;
using testing::seven_b_job;
using testing::two_h100_host;

ModelConfig llama2_7b() {
  ModelConfig c = *model_preset("llama-7b");  // Llama-2-7b's shape
  return c;
}

// A CPU-only host: 100 GFLOP/s, 20 GB/s of memory, 16 GiB of DRAM.
MachineProbe small_cpu_host() {
  MachineProbe m;
  m.compute_flops = 100e9;
  m.h2d_bytes_per_s = m.host_mem_bytes_per_s = 20e9;
  m.dram_total_bytes = m.dram_available_bytes = 16ull << 30;
  return m;
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

// gemma-3-1b: 22 of its 26 layers attend a 512-token window, and its q_dim (4 heads of 256) is
// not its hidden size (1152).
ModelConfig gemma3_1b() {
  auto c = ModelConfig::from_json(nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": 256,
    "hidden_size": 1152, "intermediate_size": 6912, "num_attention_heads": 4,
    "num_hidden_layers": 26, "num_key_value_heads": 1, "query_pre_attn_scalar": 256,
    "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144})"));
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

TEST(StepFlops, Gemma3CountsTheWindowAndItsWideHeads) {
  const ModelConfig c = gemma3_1b();
  const double tokens = 8192, params = 999'885'952.0;  // tied: the head's matmul counts
  // Per token: 22 local layers attend 512 keys, 4 global ones 4096, each of q_dim 1024.
  const double per_token = params + (22.0 * 512 + 4.0 * 4096) * 1024;
  const StepFlops f = step_flops(c, tokens, 4096);
  EXPECT_DOUBLE_EQ(f.model, 6.0 * per_token * tokens);
  EXPECT_DOUBLE_EQ(f.hardware, 8.0 * per_token * tokens);
  // Within the window, a local layer attends as a global one.
  EXPECT_DOUBLE_EQ(step_flops(c, tokens, 256).model, 6.0 * (params + 26.0 * 256 * 1024) * tokens);
}

TEST(Planner, Gemma3CpuStepCountsTheWindowedScoresAndTheExtraNorms) {
  const ModelConfig c = gemma3_1b();
  MachineProbe m = small_cpu_host();
  m.cpu_gemm_flops = 40e9;
  m.cpu_attention_s_per_score = 20e-9;
  m.cpu_threads = 2;
  TrainJob job;
  job.seq_len = 1024;
  job.micro_batch_size = 1;
  job.grad_accum = 1;
  const PlanStep s = make_plan(c, job, m, 1).step;
  // Per sequence and query head: the causal triangle on the 4 global layers; on the 22 local
  // ones the triangle up to the window, then 512 keys a query.
  const double scores = 4 * (1024.0 * 1025 / 2) + 22 * (512.0 * 513 / 2 + 512.0 * 512);
  EXPECT_NEAR(s.attention_s, 4 * scores * 20e-9, 1e-9);
  // Four hidden-wide norms a layer, the activation, and the per-head norms of q and k.
  const double width = 4.0 * 1152 + 6912 + 1024 + 256;
  EXPECT_NEAR(s.elementwise_s, kCpuElementwiseBytes * (26 * width + 262144) * 1024 / 20e9, 1e-9);
}

// Qwen3-0.6B: attention of 16 heads × 128 = 2048 wide in a 1024-wide stream, tied head; its
// parameters as transformers counts them (the per-head q/k norms included).
ModelConfig qwen3_0_6b() {
  ModelConfig c = *model_preset("llama-1b");
  c.architecture = "Qwen3ForCausalLM";
  c.model_type = "qwen3";
  c.vocab_size = 151936;
  c.hidden_size = 1024;
  c.intermediate_size = 3072;
  c.num_layers = 28;
  c.num_heads = 16;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.tie_word_embeddings = true;
  c.qk_norm = QkNorm::kRms;
  return c;
}

TEST(StepFlops, Qwen3CountsItsNormsAndItsWiderAttention) {
  const ModelConfig c = qwen3_0_6b();
  ASSERT_EQ(ParameterLayout::build(c).parameter_count(), 596'049'920u);  // transformers' count
  const double per_token = 596'049'920.0 + 28.0 * 1024 * (16 * 128);     // tied: the head's matmul
  const StepFlops f = step_flops(c, 4096, 1024);
  EXPECT_DOUBLE_EQ(f.model, 6.0 * per_token * 4096);
  EXPECT_DOUBLE_EQ(f.hardware, 8.0 * per_token * 4096);
}

// Phi-3-mini-4k's sliding window of 2047 applies to every layer: a data.seq_len up to
// max_position_embeddings is planned (the attention windowed, not refused), and its attention
// FLOPs count 2047 keys a query, not the sequence.
TEST(Planner, SequencesLongerThanTheSlidingWindowAreWindowed) {
  ModelConfig c = *model_preset("llama-1b");
  c.architecture = "Phi3ForCausalLM";
  c.model_type = "phi3";
  c.fused_projections = true;
  c.max_position_embeddings = 4096;
  c.sliding_window = 2047;
  TrainJob job;
  job.seq_len = 4096;
  EXPECT_TRUE(check_positions(c, job).ok());
  ModelConfig full = c;
  full.sliding_window = 0;
  const double window_saves = c.num_layers * (4096.0 - 2047) * c.q_dim() * 1000;
  EXPECT_DOUBLE_EQ(step_flops(full, 1000, 4096).model - step_flops(c, 1000, 4096).model,
                   6.0 * window_saves);
  job.seq_len = 4097;  // beyond the model's positions: still refused
  EXPECT_EQ(check_positions(c, job).code(), ErrorCode::kInvalidArgument);
}

// The attention's rate follows the kernels a head size runs on: the flash kernels at 64, 96 and
// 128 (kGpuAttentionEfficiency), at 256 their slower measured rate, anything else the generic
// fp32 kernels'.
TEST(Planner, AttentionRateFollowsTheHeadSize) {
  EXPECT_EQ(gpu_attention_efficiency(64), kGpuAttentionEfficiency);
  EXPECT_EQ(gpu_attention_efficiency(96), kGpuAttentionEfficiency);
  EXPECT_EQ(gpu_attention_efficiency(128), kGpuAttentionEfficiency);
  EXPECT_EQ(gpu_attention_efficiency(256), kGpuAttentionEfficiencyHeadDim256);
  EXPECT_EQ(gpu_attention_efficiency(80), kGpuGenericAttentionEfficiency);
  ModelConfig c = llama2_7b();
  const double at128 = to_json(make_plan(c, seven_b_job(), h100_host(), 10))["step"]["attention_s"];
  c.head_dim = 256;  // the same q_dim in 16 heads of 256
  c.num_heads = c.num_kv_heads = 16;
  const double at256 = to_json(make_plan(c, seven_b_job(), h100_host(), 10))["step"]["attention_s"];
  EXPECT_NEAR(at256 / at128, kGpuAttentionEfficiency / kGpuAttentionEfficiencyHeadDim256, 1e-9);
}

// Attention on cuDNN's fused kernels (MachineProbe::attention from the backend): a layer whose
// forward and backward both run there is planned at kGpuFusedAttentionEfficiency; the backward of
// a window narrower than the rows and of a sequence past cuDNN's workspace bound (one head of 64K
// tokens) at the module's rate (the forward still on cuDNN); packed rows at their own measured
// speed-up; the machine's attention survives the plan's JSON.
TEST(Planner, AttentionOnCudnnIsPlannedAtItsOwnRate) {
  const ModelConfig c = llama2_7b();
  MachineProbe fused = h100_host();
  fused.attention = "cuDNN 9.19.0";
  const Plan own = make_plan(c, seven_b_job(), h100_host(), 10);
  const Plan on_cudnn = make_plan(c, seven_b_job(), fused, 10);
  EXPECT_NEAR(on_cudnn.step.attention_s,
              own.step.attention_s * kGpuAttentionEfficiency / kGpuFusedAttentionEfficiency, 1e-9);
  EXPECT_LT(on_cudnn.step.step_s, own.step.step_s);
  EXPECT_EQ(on_cudnn.step.gemm_s, own.step.gemm_s);
  // Packed rows: cuDNN's ragged layout, at kGpuFusedPackedAttentionSpeedup times the module's.
  const Plan packed = make_plan(c, seven_b_job(), fused, 10, true, DataShape{0.9, 0.25, true});
  EXPECT_NEAR(packed.step.attention_s,
              0.25 * own.step.attention_s / kGpuFusedPackedAttentionSpeedup, 1e-9);
  // 16K tokens a sequence: cuDNN's backward runs it in chunks of 2 heads (1.07 GB a call), so the
  // whole attention runs at cuDNN's rate; 64K: one head's backward workspace (8.6 GB) is past the
  // bound, so only the forward's half does.
  MachineProbe not_fused = fused;
  not_fused.attention = "own kernels (cuDNN is turned off (SPILLWAY_CUDNN=0))";
  for (int seq : {16384, 65536}) {
    SCOPED_TRACE(seq);
    TrainJob long_rows = seven_b_job();
    long_rows.seq_len = seq;
    long_rows.micro_batch_size = 1;
    const double long_own = make_plan(c, long_rows, not_fused, 10).step.attention_s;
    const double fused_share = kGpuAttentionEfficiency / kGpuFusedAttentionEfficiency;
    EXPECT_NEAR(make_plan(c, long_rows, fused, 10).step.attention_s,
                seq == 16384 ? long_own * fused_share : 0.5 * long_own * (1 + fused_share),
                1e-9 * long_own);
  }
  // Gemma 3: its global layers wholly on cuDNN; its sliding ones (512 of 2048) with the forward
  // on cuDNN and the backward on the module's kernel.
  const ModelConfig g = gemma3_1b();
  TrainJob job = seven_b_job();
  const double global_layers = 4, sliding = g.num_layers - global_layers;
  const double per_key = make_plan(g, job, not_fused, 10).step.attention_s /
                         (global_layers * 2048 + sliding * 512) * kGpuAttentionEfficiencyHeadDim256;
  EXPECT_NEAR(make_plan(g, job, fused, 10).step.attention_s,
              per_key * (global_layers * 2048 / kGpuFusedAttentionEfficiencyHeadDim256 +
                         sliding * 512 * 0.5 *
                             (1 / kGpuFusedAttentionEfficiencyHeadDim256 +
                              1 / kGpuAttentionEfficiencyHeadDim256)),
              1e-9);
  const Result<Plan> back = plan_from_json(to_json(on_cudnn));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->machine.attention, "cuDNN 9.19.0");
  EXPECT_FALSE(to_json(own)["machine"].contains("attention"));
}

// What the run's data does (DataShape): tokens/s counts the data's tokens, not padding, and the
// attention is the share the kernels compute (packed rows attend within each example); the rest of
// the step, and the JSON's round trip, as without the data.
TEST(Planner, TheRunsDataScalesItsTokensAndItsAttention) {
  const ModelConfig c = llama2_7b();
  const Plan whole = make_plan(c, seven_b_job(), h100_host(), 10);
  const Plan data = make_plan(c, seven_b_job(), h100_host(), 10, true, DataShape{0.25, 0.5});
  EXPECT_NEAR(data.step.attention_s, 0.5 * whole.step.attention_s, 1e-12);
  EXPECT_EQ(data.step.gemm_s, whole.step.gemm_s);
  EXPECT_EQ(data.step.h2d_bytes, whole.step.h2d_bytes);
  EXPECT_LT(data.step.step_s, whole.step.step_s);
  EXPECT_NEAR(data.step.tokens_per_s, 0.25 * data.step.tokens / data.step.step_s, 1e-9);
  const Result<Plan> back = plan_from_json(to_json(data));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->step.data_fill, 0.25);
  EXPECT_EQ(back->step.data_attention, 0.5);
  // A plan without the data writes neither key, and reads back as the whole rows'.
  EXPECT_FALSE(to_json(whole)["step"].contains("data_fill"));
  const Result<Plan> whole_back = plan_from_json(to_json(whole));
  ASSERT_TRUE(whole_back.ok());
  EXPECT_EQ(whole_back->step.data_fill, 1.0);
  EXPECT_EQ(whole_back->step.data_attention, 1.0);
}

TEST(Planner, SevenBOnTheH100IsComputeBound) {
  const ModelConfig c = llama2_7b();
  const nlohmann::json plan = to_json(make_plan(c, seven_b_job(), h100_host(), 10));
  ASSERT_TRUE(plan["fits"].get<bool>()) << plan["reason"];
  const auto& s = plan["step"];
  const double compute = s["compute_s"], link = s["link_s"], adamw = s["adamw_s"],
               norm = s["grad_norm_s"];
  // The layers' GEMMs (8 FLOPs per parameter and token, with the recomputed forward) at
  // kGpuGemmEfficiency of the probe's rate; attention at its own rate; the LM head's three GEMMs,
  // its logits traffic and one read and write of its fp32 weight gradient per chunk of 4,096
  // tokens (2 per micro-batch of 8,192); the memory-bound ops; and each of the 4 micro-batches
  // adding the weight gradients into the fp32 buffers (8 B/param of HBM traffic).
  const double P = 6'738'415'616.0, layers = 32 * 202'383'360.0, tokens = 32768;
  const double gemm = 8 * layers * tokens / (790e12 * kGpuGemmEfficiency);
  const double attention = 8.0 * 32 * 2048 * 4096 * tokens / (790e12 * kGpuAttentionEfficiency);
  const double lm_head = 6.0 * 32000 * 4096 * tokens / (790e12 * kGpuGemmEfficiency) +
                         (16.0 * 32000 * tokens + 8 * 8.0 * 32000 * 4096) / kGpuHbmBytesPerS;
  const double elementwise =
      kGpuElementwiseBytes * 32 * (2 * 4096 + 11008) * tokens / kGpuHbmBytesPerS;
  EXPECT_NEAR(s["gemm_s"].get<double>(), gemm, 1e-9);
  EXPECT_NEAR(s["attention_s"].get<double>(), attention, 1e-9);
  EXPECT_NEAR(s["lm_head_s"].get<double>(), lm_head, 1e-9);
  EXPECT_NEAR(s["elementwise_s"].get<double>(), elementwise, 1e-9);
  EXPECT_NEAR(compute, gemm + attention + lm_head + elementwise + 4 * 8 * P / kGpuHbmBytesPerS,
              1e-9);
  EXPECT_NEAR(s["accumulate_s"].get<double>(), 4 * 8 * P / kGpuHbmBytesPerS, 1e-12);
  // 27 GB of fp32 master weights up for the forward and the layers' again for the backward but
  // the last one (still in a slot), and 27 GB of fp32 gradients down, the per-token losses and the
  // per-block sums of squares: exactly what the bench measured on the H100 at 32K tokens per step.
  EXPECT_DOUBLE_EQ(s["h2d_bytes"].get<double>(), 52'049'461'248.0);
  EXPECT_DOUBLE_EQ(s["d2h_bytes"].get<double>(), 26'953'662'464.0 + 32768 * 4 + 34 * 8);
  const double h2d = s["h2d_bytes"], d2h = s["d2h_bytes"];
  EXPECT_DOUBLE_EQ(link, std::max({h2d / 55e9, d2h / 55e9, (h2d + d2h) / 93e9}));
  EXPECT_NEAR(adamw, 6'738'415'616.0 / 5.239e9, 1e-9);
  // AdamW outlasts the forward that hides it by a little; the gradient norm shows in full. The
  // CPU updates each layer slower than the GPU runs its forward (38.6 ms against 24.5), so each
  // layer's forward follows its update; the head's update (25.0 ms) ends just after the last
  // layer's forward would (24.5 ms), so the head's forward starts at whichever is later, and the
  // wait is that end less the forward (a quarter of the compute). Forward shares: each layer a
  // 32nd of the layers' GEMMs, attention and element-wise ops, the head its LM head.
  const double parts = gemm + attention + lm_head + elementwise;
  const double head_forward = compute / 4 * lm_head / parts;
  const double layer_forward = compute / 4 * (gemm + attention + elementwise) / 32 / parts;
  const double head_update = adamw * 131'076'096.0 / P;
  const double visible =
      norm + std::max(adamw, adamw - head_update + layer_forward) + head_forward - compute / 4;
  EXPECT_NEAR(s["optimizer_visible_s"].get<double>(), visible, 1e-9);
  EXPECT_NEAR(s["step_s"].get<double>(), visible + compute, 1e-9);
  EXPECT_EQ(s["bottleneck"], "compute");
  EXPECT_NEAR(s["model_tflops"].get<double>(),
              step_flops(c, 32768, 2048).model / s["step_s"].get<double>() / 1e12, 1e-6);

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
  slow_link.duplex_bytes_per_s = 0;  // not measured: the two take turns
  nlohmann::json plan = to_json(make_plan(c, seven_b_job(), slow_link, 10));
  EXPECT_DOUBLE_EQ(
      plan["step"]["link_s"].get<double>(),
      (plan["step"]["h2d_bytes"].get<double>() + plan["step"]["d2h_bytes"].get<double>()) / 6.8e9);
  EXPECT_EQ(plan["step"]["bottleneck"], "h2d");

  MachineProbe slow_cpu = h100_host();
  slow_cpu.adamw_params_per_s = 0.5e9;
  plan = to_json(make_plan(c, seven_b_job(), slow_cpu, 10));
  EXPECT_EQ(plan["step"]["bottleneck"], "optimizer");
  const auto& s = plan["step"];
  // As SevenBOnTheH100IsComputeBound: the forward waits for all of AdamW but its own quarter of
  // the compute, and the head's forward comes after the last update.
  const double compute = s["compute_s"], lm_head = s["lm_head_s"];
  const double head_forward = compute / 4 * lm_head /
                              (s["gemm_s"].get<double>() + s["attention_s"].get<double>() +
                               lm_head + s["elementwise_s"].get<double>());
  EXPECT_NEAR(s["step_s"].get<double>(),
              s["grad_norm_s"].get<double>() + s["adamw_s"].get<double>() - compute / 4 +
                  head_forward + compute,
              1e-9);
}

// A CPU step is its GEMMs at the probe's rate for the job's shapes, its attention per score at
// the probed kernel's cost, and the element-wise ops at host bandwidth (planner.h, "CPU step"),
// plus the optimizer: until the attention was probed, it was all FLOPs at the 512³ sgemm rate,
// 4.9 times too fast for stories260K on 2 cores.
TEST(Planner, CpuStepAddsItsProbedParts) {
  const ModelConfig c = *model_preset("llama-50m");
  MachineProbe m = small_cpu_host();
  m.cpu_gemm_flops = 40e9;
  m.cpu_attention_s_per_score = 20e-9;
  m.cpu_threads = 2;
  TrainJob job;
  job.seq_len = 256;
  job.micro_batch_size = 4;
  job.grad_accum = 2;
  const Plan plan = make_plan(c, job, m, 100);
  const PlanStep& s = plan.step;
  const double tokens = 4.0 * 2 * 256;
  const double params = static_cast<double>(ParameterLayout::build(c).parameter_count());
  const double matmul =
      c.tie_word_embeddings ? params : params - double(c.vocab_size) * c.hidden_size;
  EXPECT_NEAR(s.gemm_s, 8.0 * matmul * tokens / 40e9, 1e-12);
  // Per layer, sequence and query head, the causal triangle's T(T+1)/2 scores.
  EXPECT_NEAR(s.attention_s, c.num_layers * 8.0 * c.num_heads * 256 * 257 / 2 * 20e-9, 1e-12);
  EXPECT_NEAR(s.elementwise_s,
              kCpuElementwiseBytes *
                  (c.num_layers * (2.0 * c.hidden_size + c.intermediate_size) + c.vocab_size) *
                  tokens / 20e9,
              1e-12);
  EXPECT_NEAR(s.compute_s, s.gemm_s + s.attention_s + s.elementwise_s, 1e-12);
  EXPECT_NEAR(s.step_s, s.compute_s + s.optimizer_s + s.ssd_s, 1e-12);
  EXPECT_TRUE(s.calibrated);
  // Not measured: AdamW at 28 B/param of memory traffic.
  EXPECT_NEAR(s.adamw_s, 28.0 * params / 20e9, 1e-12);
  EXPECT_DOUBLE_EQ(s.eta_s, 100 * s.step_s);
  // The plan keeps the figures it was made with.
  EXPECT_EQ(plan.machine.cpu_gemm_flops, 40e9);
  EXPECT_EQ(plan.machine.cpu_attention_s_per_score, 20e-9);
  // On more threads than the model was held to (a 16-core host measured 0.29-1.11 of it), or
  // where the thread count is not known, the same figures make an uncalibrated step.
  for (int threads : {0, kCpuCalibratedThreads + 1, 16}) {
    m.cpu_threads = threads;
    EXPECT_FALSE(make_plan(c, job, m, 100).step.calibrated) << threads;
  }
}

// Without the job-shaped probe the GEMMs run at the 512³ rate and the attention counts as FLOPs,
// which can be 5 times off: the step says it is uncalibrated, and its JSON keeps that.
TEST(Planner, CpuStepWithoutTheProbeIsUncalibrated) {
  const ModelConfig c = *model_preset("llama-50m");
  TrainJob job;
  job.seq_len = 256;
  job.micro_batch_size = 4;
  const Plan plan = make_plan(c, job, small_cpu_host(), 100);
  EXPECT_FALSE(plan.step.calibrated);
  EXPECT_NEAR(plan.step.gemm_s + plan.step.attention_s, step_flops(c, 1024, 256).hardware / 100e9,
              1e-12);
  const nlohmann::json j = to_json(plan);
  EXPECT_EQ(j["step"]["calibrated"], false);
  EXPECT_FALSE(plan_from_json(j)->step.calibrated);
  // A CPU plan written before the key counted the attention as FLOPs: uncalibrated; a GPU plan's
  // step rests on its probe.
  nlohmann::json old = j;
  old["step"].erase("calibrated");
  EXPECT_FALSE(plan_from_json(old)->step.calibrated);
  old["backend"] = "cuda";
  EXPECT_TRUE(plan_from_json(old)->step.calibrated);
  EXPECT_TRUE(make_plan(c, seven_b_job(), h100_host(), 10).step.calibrated);
}

// The plan of `job` with another micro-batch and accumulation, without its own suggestion.
nlohmann::json plan_of(const ModelConfig& c, TrainJob job, const MachineProbe& m, int micro_batch,
                       int grad_accum) {
  job.micro_batch_size = micro_batch;
  job.grad_accum = grad_accum;
  return to_json(make_plan(c, job, m, 0, /*with_suggestion=*/false));
}

// What suggest_batch promises, checked against every candidate planned on its own: the suggestion
// fits, is within 5% of the best tokens/s, no smaller step (with checkpoints in HBM) is, and at its
// size no larger micro-batch is.
void expect_smallest_within_five_percent(const ModelConfig& c, const TrainJob& job,
                                         const MachineProbe& m, const nlohmann::json& suggestion) {
  ASSERT_TRUE(suggestion["fits"].get<bool>()) << suggestion.dump();
  const int mb = suggestion["micro_batch_size"], ga = suggestion["grad_accum"];
  const int64_t tokens = suggestion["tokens_per_step"];
  EXPECT_EQ(tokens, int64_t{mb} * ga * job.seq_len);
  const nlohmann::json own = plan_of(c, job, m, mb, ga);
  ASSERT_TRUE(own["fits"].get<bool>());
  EXPECT_DOUBLE_EQ(suggestion["tokens_per_s"].get<double>(),
                   own["step"]["tokens_per_s"].get<double>());
  EXPECT_DOUBLE_EQ(suggestion["step_s"].get<double>(), own["step"]["step_s"].get<double>());
  EXPECT_DOUBLE_EQ(suggestion["model_tflops"].get<double>(),
                   own["step"]["model_tflops"].get<double>());
  struct Planned {
    int mb, ga;
    double tokens_per_s;
    bool on_device;
  };
  std::vector<Planned> fitting;
  for (int b : {1, 2, 4, 8, 16}) {
    for (int a = 1; a <= 64; ++a) {
      const nlohmann::json p = plan_of(c, job, m, b, a);
      if (p["fits"].get<bool>())
        fitting.push_back(
            {b, a, p["step"]["tokens_per_s"].get<double>(), p["checkpoints"] == "device"});
    }
  }
  double best = 0;
  for (const Planned& p : fitting) best = std::max(best, p.tokens_per_s);
  EXPECT_GE(suggestion["tokens_per_s"].get<double>(), (1 - kSuggestWithin) * best);
  EXPECT_EQ(suggestion["checkpoints_on_device"].get<bool>(), own["checkpoints"] == "device");
  for (const Planned& p : fitting) {
    const int64_t t = int64_t{p.mb} * p.ga * job.seq_len;
    const bool good = p.tokens_per_s >= (1 - kSuggestWithin) * best;
    if (!good || (!p.on_device && suggestion["checkpoints_on_device"].get<bool>())) continue;
    EXPECT_GE(t, tokens) << p.mb << " x " << p.ga << " is smaller and within 5% of the best";
    if (t == tokens) {
      EXPECT_LE(p.mb, mb) << "a larger micro-batch at the same tokens per step";
    }
  }
}

TEST(SuggestBatch, SevenBOnTheH100KeepsTheGpuBusyWithTheSmallestStep) {
  const ModelConfig c = llama2_7b();
  const TrainJob job = seven_b_job();
  const nlohmann::json plan = to_json(make_plan(c, job, h100_host(), 10));
  const nlohmann::json& s = plan["suggestion"];
  std::printf("job 4 x 4 x 2048: %.0f tokens/s; suggestion: %s\n",
              plan["step"]["tokens_per_s"].get<double>(), s.dump().c_str());
  expect_smallest_within_five_percent(c, job, h100_host(), s);
  // Better than the job's own 32K tokens per step, where AdamW outlasts the forward.
  EXPECT_GT(s["tokens_per_s"].get<double>(), plan["step"]["tokens_per_s"].get<double>());
  EXPECT_GT(s["tokens_per_step"].get<int64_t>(), 32768);
  EXPECT_TRUE(s["checkpoints_on_device"].get<bool>());
  EXPECT_LE(s["hbm_needed_bytes"].get<double>(), 84e9);
  EXPECT_FALSE(s["same_as_job"].get<bool>());
  const std::string why = s["why"];
  EXPECT_NE(why.find("AdamW"), std::string::npos) << why;
  EXPECT_NE(why.find("keeps checkpoints in HBM"), std::string::npos) << why;
}

TEST(SuggestBatch, ASlowOptimizerNeedsALargerStep) {
  const ModelConfig c = llama2_7b();
  MachineProbe slow_cpu = h100_host();
  slow_cpu.adamw_params_per_s = 1e9;  // 6.7 s of AdamW per step
  const nlohmann::json fast = to_json(suggest_batch(c, seven_b_job(), h100_host()));
  const nlohmann::json slow = to_json(suggest_batch(c, seven_b_job(), slow_cpu));
  std::printf("fast AdamW: %s\nslow AdamW: %s\n", fast.dump().c_str(), slow.dump().c_str());
  expect_smallest_within_five_percent(c, seven_b_job(), slow_cpu, slow);
  EXPECT_GT(slow["tokens_per_step"].get<int64_t>(), fast["tokens_per_step"].get<int64_t>());
  EXPECT_NE(slow["why"].get<std::string>().find("AdamW"), std::string::npos);
}

TEST(SuggestBatch, SmallMicroBatchesWasteTheGpu) {
  // The same tokens per step in more micro-batches is predicted slower: each adds the weight
  // gradients into the fp32 buffers again.
  const ModelConfig c = llama2_7b();
  const double mb1 = plan_of(c, seven_b_job(), h100_host(), 1, 32)["step"]["compute_s"];
  const double mb8 = plan_of(c, seven_b_job(), h100_host(), 8, 4)["step"]["compute_s"];
  // 28 more gradient additions, and 16 more LM head chunks (32 of 2,048 tokens against 16 of
  // 4,096), each a read and write of the head's fp32 weight gradient.
  EXPECT_NEAR(mb1 - mb8, (28 * 8 * 6'738'415'616.0 + 16 * 8 * 32000.0 * 4096) / kGpuHbmBytesPerS,
              1e-9);
}

TEST(Planner, LmHeadChunkKeepsTheLogitsWithinTheirBudget) {
  // [chunk, vocab] fp32 logits and their gradient within kLmHeadLogitsBytes (1 GiB), 256 to 4,096
  // tokens.
  EXPECT_EQ(lm_head_chunk_for(32000), 4096);   // llama2-7b, tinyllama: 1.05 GB
  EXPECT_EQ(lm_head_chunk_for(128256), 1024);  // llama3: 1.05 GB
  EXPECT_EQ(lm_head_chunk_for(152064), 512);   // qwen2.5: 0.62 GB
  EXPECT_EQ(lm_head_chunk_for(4'000'000), 256);
  StreamingConfig sc;
  ModelConfig c = llama2_7b();
  EXPECT_EQ(StreamingEngine::lm_head_chunk(c, sc), 4096);
  sc.lm_head_chunk = 37;
  EXPECT_EQ(StreamingEngine::lm_head_chunk(c, sc), 37);
}

TEST(SuggestBatch, CpuJobKeepsItsOwnValuesOrTheSmallestThatFits) {
  const ModelConfig c = *model_preset("llama-50m");
  const MachineProbe m = small_cpu_host();
  TrainJob job;
  job.seq_len = 256;
  job.micro_batch_size = 4;
  job.grad_accum = 2;
  nlohmann::json s = to_json(make_plan(c, job, m, 100))["suggestion"];
  ASSERT_TRUE(s["fits"].get<bool>()) << s.dump();
  EXPECT_EQ(s["micro_batch_size"], 4);
  EXPECT_EQ(s["grad_accum"], 2);
  EXPECT_TRUE(s["same_as_job"].get<bool>());
  EXPECT_NE(s["why"].get<std::string>().find("CPU backend"), std::string::npos);

  // A capped "device" that holds a micro-batch of 1 but not of 4 (its activations grow with it):
  // the job's 2,048 tokens per step in micro-batches that fit.
  job.micro_batch_size = 4;
  job.device_memory_bytes =
      plan_of(c, job, m, 1, 1)["tiers"]["hbm"]["needed_bytes"].get<uint64_t>();
  ASSERT_FALSE(plan_of(c, job, m, 4, 2)["fits"].get<bool>());
  s = to_json(suggest_batch(c, job, m));
  std::printf("capped CPU device: %s\n", s.dump().c_str());
  ASSERT_TRUE(s["fits"].get<bool>()) << s.dump();
  EXPECT_TRUE(plan_of(c, job, m, s["micro_batch_size"], s["grad_accum"])["fits"].get<bool>());
  EXPECT_LT(s["micro_batch_size"].get<int>(), 4);
  EXPECT_EQ(s["tokens_per_step"], 2048);
  EXPECT_FALSE(s["same_as_job"].get<bool>());
}

TEST(SuggestBatch, NothingFitsSaysWhy) {
  MachineProbe small = h100_host();
  small.dram_total_bytes = small.dram_available_bytes = 32ull << 30;
  const nlohmann::json s = to_json(suggest_batch(llama2_7b(), seven_b_job(), small));
  EXPECT_FALSE(s["fits"].get<bool>());
  EXPECT_NE(s["why"].get<std::string>().find("DRAM"), std::string::npos) << s.dump();
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
  EXPECT_EQ(m.gpus, 0);  // the CPU backend counts no GPU, and has no NCCL
  EXPECT_EQ(m.nccl_bus_bytes_per_s, 0.0);

  sizes.gemm_n = 0;
  EXPECT_EQ(probe_device(*backend, &m, sizes).code(), ErrorCode::kInvalidArgument);
}

// The CPU backend's GEMMs and attention at a real model's shapes: positive rates, the attention
// with its key bias for Qwen2; a layer too large for the probe's budget leaves the GEMM rate to
// the 512³ probe.
TEST(MachineProbe, CpuComputeAtTheModelsShapes) {
  MachineProbe m;
  const ModelConfig stories = *model_preset("llama-tiny");
  ASSERT_TRUE(probe_cpu_compute(stories, 64, 256, &m).ok());
  EXPECT_GT(m.cpu_gemm_flops, 1e6);
  EXPECT_GT(m.cpu_attention_s_per_score, 0);
  EXPECT_LT(m.cpu_attention_s_per_score, 1e-3);
  ModelConfig qwen = stories;
  qwen.attention_bias = true;
  ASSERT_TRUE(probe_cpu_compute(qwen, 64, 256, &m).ok());
  EXPECT_GT(m.cpu_attention_s_per_score, 0);
  // 7B: one layer's GEMMs on 64 rows are 6.5 GFLOP, past the budget.
  const ModelConfig big = *model_preset("llama-7b");
  MachineProbe b;
  ASSERT_TRUE(probe_cpu_compute(big, 16, 16, &b).ok());
  EXPECT_EQ(b.cpu_gemm_flops, 0);
  EXPECT_GT(b.cpu_attention_s_per_score, 0);
  EXPECT_EQ(probe_cpu_compute(stories, 0, 256, &m).code(), ErrorCode::kInvalidArgument);
}

TEST(MachineProbe, AdamwRate) {
  auto rate = measure_adamw(1 << 20);
  ASSERT_TRUE(rate.ok()) << rate.status().to_string();
  EXPECT_GT(*rate, 1e6);
  EXPECT_FALSE(measure_adamw(0).ok());
}

// The HBM state tier (placement.hbm_state_blocks): llama2-7b at 8 x 1 x 2048 = 16K tokens per
// step on the H100 machine above, where every block's state in DRAM leaves the GPU waiting for
// the CPU's AdamW (README: 5,336 tokens/s measured).
TrainJob sixteen_k_job(int hbm_state_blocks) {
  TrainJob job = seven_b_job();
  job.micro_batch_size = 8;
  job.grad_accum = 1;
  job.hbm_state_blocks = hbm_state_blocks;
  return job;
}

// The parameters of llama2-7b's blocks: the embedding 32000 x 4096, each layer 202,383,360.
constexpr double kEmbeddingParams = 131'072'000.0, kLayerParams = 202'383'360.0,
                 kSevenBParams = 6'738'415'616.0;

TEST(HbmState, NoBlockWaitsForAllOfTheCpusAdamw) {
  const ModelConfig c = llama2_7b();
  const Plan plan = make_plan(c, sixteen_k_job(0), h100_host(), 10, false);
  ASSERT_TRUE(plan.fits) << plan.reason;
  EXPECT_EQ(plan.state.blocks, 34);
  EXPECT_EQ(plan.state.hbm_blocks, 0);
  EXPECT_EQ(plan.state.hbm_bytes, 0u);
  EXPECT_EQ(plan.state.why, "none in HBM: placement.hbm_state_blocks is 0");
  EXPECT_FALSE(plan.hbm.master_bytes.has_value());
  EXPECT_FALSE(plan.hbm.optimizer_bytes.has_value());
  // The all-DRAM step: AdamW of every parameter, of which the forward (a quarter of the
  // compute-bound step) hides 0.40 s, but for the head's forward, which waits for the last update:
  // 1.61 + (1.29 - 0.40 + 0.006) = 2.50 s, 6,555 tokens/s.
  const PlanStep& s = plan.step;
  EXPECT_EQ(s.gpu_adamw_s, 0.0);
  EXPECT_NEAR(s.adamw_s, kSevenBParams / 5.239e9, 1e-12);
  EXPECT_GT(s.compute_s, s.link_s);
  const double head_forward =
      s.compute_s / 4 * s.lm_head_s / (s.gemm_s + s.attention_s + s.lm_head_s + s.elementwise_s);
  EXPECT_NEAR(s.optimizer_visible_s, s.adamw_s - s.compute_s / 4 + head_forward, 1e-12);
  EXPECT_NEAR(s.step_s, s.compute_s + s.optimizer_visible_s, 1e-12);
  EXPECT_NEAR(s.step_s, 2.4995, 0.001);
  // Every block's master up for the forward, the layers' but the last again for the backward.
  StreamingConfig sc;
  sc.micro_batch_size = 8;
  sc.seq_len = 2048;
  const ParameterLayout layout = ParameterLayout::build(c);
  EXPECT_EQ(s.h2d_bytes, static_cast<double>(StreamingEngine::plan_link_bytes(layout, sc).h2d));
  EXPECT_DOUBLE_EQ(s.h2d_bytes, 52'049'199'104.0 + 2 * 16384 * 4);  // 32K's less 16K tokens
}

TEST(HbmState, AutoOnTheH100PlacesWhatFitsAndHidesAdamwAt16K) {
  const ModelConfig c = llama2_7b();
  const ParameterLayout layout = ParameterLayout::build(c);
  const Plan dram = make_plan(c, sixteen_k_job(0), h100_host(), 10, false);
  const Plan plan = make_plan(c, sixteen_k_job(-1), h100_host(), 10, false);
  ASSERT_TRUE(plan.fits) << plan.reason;
  std::printf(
      "16K tokens per step: %s; step %.3f s, %.2f GB up, %.2f GB down (all in DRAM %.3f "
      "s, %.2f GB up, %.2f GB down)\n",
      plan.state.why.c_str(), plan.step.step_s, plan.step.h2d_bytes / 1e9,
      plan.step.d2h_bytes / 1e9, dram.step.step_s, dram.step.h2d_bytes / 1e9,
      dram.step.d2h_bytes / 1e9);

  // The engine's rule: every checkpoint and streaming first (11.93 GB, the all-DRAM plan's HBM
  // needs), 1 GiB kept free, then blocks in forward order while they fit: of 84 - 11.93 - 1.07
  // = 71.0 GB the embedding's 2.10 GB (16 B/param) and 21 layers of 3.24 GB (a 22nd would need
  // 73.3 GB): 22 blocks, 70.10 GB.
  EXPECT_NEAR(static_cast<double>(dram.hbm.needed_bytes), 11.93e9, 0.01e9);
  EXPECT_EQ(plan.state.hbm_blocks, 22);
  EXPECT_EQ(plan.state.hbm_bytes, HbmState::bytes(layout, 22));
  EXPECT_EQ(plan.state.hbm_bytes, 16 * static_cast<uint64_t>(kEmbeddingParams + 21 * kLayerParams));
  uint64_t used = dram.hbm.needed_bytes + StreamingEngine::kHbmStateReserveBytes;
  for (size_t b = 0; b < 22; ++b) used += HbmState::block_bytes(layout, b);
  EXPECT_LE(used, 84'000'000'000u);
  EXPECT_GT(used + HbmState::block_bytes(layout, 22), 84'000'000'000u);
  // Moving checkpoints to the host for a 23rd block would save 0.6% of the step: less than the
  // trade's margin (kTradeMargin), so every checkpoint stays.
  EXPECT_EQ(plan.state.why,
            "the embedding and layers 0-20, as many as fit beside 11.93 GB of streaming and "
            "checkpoints; the CPU's AdamW updates the other 12 while their forward runs; moving "
            "checkpoints to host memory for more blocks saves less than 2% of the step (at best "
            "1.653 s with 23 blocks and the checkpoints of 15 of 33 layers in HBM)");
  EXPECT_EQ(plan.state.device_checkpoint_layers, 33);
  // HBM holds their master, gradients and both moments beside what streaming needs.
  EXPECT_EQ(*plan.hbm.master_bytes, plan.state.hbm_bytes / 4);
  EXPECT_EQ(*plan.hbm.optimizer_bytes, plan.state.hbm_bytes / 2);
  EXPECT_EQ(*plan.hbm.gradients_bytes, *dram.hbm.gradients_bytes + plan.state.hbm_bytes / 4);
  EXPECT_EQ(plan.hbm.needed_bytes, dram.hbm.needed_bytes + plan.state.hbm_bytes);
  EXPECT_TRUE(plan.checkpoints_on_device);
  // The host keeps every block's master and moments, but the tier's gradients live on the device
  // only: 4 B a parameter less DRAM (17.5 GB of 22 blocks).
  EXPECT_EQ(plan.dram.needed_bytes, dram.dram.needed_bytes - plan.state.hbm_bytes / 4);
  EXPECT_EQ(*plan.dram.gradients_bytes, *dram.dram.gradients_bytes - plan.state.hbm_bytes / 4);

  // Their weights do not go up, their gradients do not come down.
  StreamingConfig sc;
  sc.micro_batch_size = 8;
  sc.seq_len = 2048;
  const StreamingEngine::LinkBytes link = StreamingEngine::plan_link_bytes(layout, sc, 22);
  EXPECT_EQ(plan.step.h2d_bytes, static_cast<double>(link.h2d));
  EXPECT_EQ(plan.step.d2h_bytes, static_cast<double>(link.d2h));
  EXPECT_LT(plan.step.h2d_bytes, dram.step.h2d_bytes / 2);

  // The step by hand. The GPU's AdamW: 28 B/param of HBM traffic over the 22 blocks' 4.38 G
  // parameters, 0.041 s, in compute. The CPU's: the other 2.36 G at 5.239 G/s, 0.450 s.
  const PlanStep& s = plan.step;
  const double hbm_params = kEmbeddingParams + 21 * kLayerParams;
  const double G = 28 * hbm_params / kGpuHbmBytesPerS, A = (kSevenBParams - hbm_params) / 5.239e9;
  EXPECT_NEAR(s.gpu_adamw_s, G, 1e-12);
  EXPECT_NEAR(s.adamw_s, A, 1e-12);
  EXPECT_NEAR(s.compute_s, dram.step.compute_s + G, 1e-12);
  // The timeline after the backward: the GPU's AdamW, then the forward (F, a quarter of the
  // compute without it: 0.402 s), the 22 blocks' first (0 + 21 x 12.4 ms of layers: 0.301 s
  // with G), while the CPU updates layers 21-31 at 38.6 ms each: the k-th is done at 38.6k ms,
  // the forward reaches it at 301 + 12.4(k-1) ms, so none waits (the 11th by 0.1 ms). The head
  // (25.0 ms of AdamW) is updated at A = 0.450 s, after the forward reached it (0.437 s): its
  // forward (f_head, its LM head's share of F, 5.9 ms) ends at A + f_head instead of G + F.
  const double F = (s.compute_s - G) / 4;
  const double forward_flops_s = s.gemm_s + s.attention_s + s.lm_head_s + s.elementwise_s;
  const double f_layer = F * (s.gemm_s + s.attention_s + s.elementwise_s) / 32 / forward_flops_s;
  const double f_head = F * s.lm_head_s / forward_flops_s;
  EXPECT_NEAR(f_layer, 0.01239, 0.00001);
  EXPECT_NEAR(f_head, 0.00591, 0.00001);
  EXPECT_LT(11 * kLayerParams / 5.239e9, G + 21 * f_layer + 10 * f_layer);  // the 11th: no wait
  EXPECT_GT(A, G + 32 * f_layer);                                           // the head waits
  EXPECT_NEAR(s.optimizer_visible_s, A + f_head - (G + F), 1e-12);
  EXPECT_NEAR(s.optimizer_visible_s, 0.0125, 0.0001);
  EXPECT_NEAR(s.step_s, s.compute_s + s.optimizer_visible_s, 1e-12);
  EXPECT_NEAR(s.step_s, 1.663, 0.001);
  EXPECT_NEAR(s.tokens_per_s, 9851, 1);
  EXPECT_EQ(s.bottleneck, "compute");
}

TEST(HbmState, EveryBlockFitsAnH200) {
  const ModelConfig c = llama2_7b();
  MachineProbe h200 = h100_host();
  h200.device = "NVIDIA H200";
  h200.device_total_bytes = 150'000'000'000ull;
  h200.device_free_bytes = 140'000'000'000ull;
  const Plan plan = make_plan(c, sixteen_k_job(-1), h200, 10, false);
  ASSERT_TRUE(plan.fits) << plan.reason;
  // 107.8 GB of state beside 11.93 GB and 1 GiB free: all 34 blocks; nothing of the model
  // crosses the link, the CPU updates nothing and the step is its compute.
  EXPECT_EQ(plan.state.hbm_blocks, 34);
  EXPECT_EQ(plan.state.hbm_bytes, 16 * static_cast<uint64_t>(kSevenBParams));
  EXPECT_EQ(plan.state.why,
            "every block (the embedding, layers 0-31, the head), as many as fit beside 11.93 GB "
            "of streaming and checkpoints; no AdamW on the CPU, no weights or gradients over the "
            "link");
  const PlanStep& s = plan.step;
  EXPECT_EQ(s.h2d_bytes, 2.0 * 16384 * 4);         // the token ids and labels
  EXPECT_EQ(s.d2h_bytes, 16384 * 4.0 + 34 * 8.0);  // the losses and the sums of squares
  EXPECT_EQ(s.adamw_s, 0.0);
  EXPECT_EQ(s.optimizer_visible_s, 0.0);
  EXPECT_NEAR(s.gpu_adamw_s, 28 * kSevenBParams / kGpuHbmBytesPerS, 1e-12);
  EXPECT_EQ(s.step_s, s.compute_s);
}

TEST(HbmState, TooManyBlocksDoNotFitAndSayWhatToChange) {
  const ModelConfig c = llama2_7b();
  const ParameterLayout layout = ParameterLayout::build(c);
  const Plan dram = make_plan(c, sixteen_k_job(0), h100_host(), 10, false);
  const Plan plan = make_plan(c, sixteen_k_job(30), h100_host(), 10);
  EXPECT_FALSE(plan.fits);
  EXPECT_EQ(plan.state.hbm_blocks, 30);
  // Streaming without its checkpoints, 7.37 GB (the all-DRAM needs less every checkpoint, which
  // would spill to the host), and of the 76.6 GB left the embedding's 2.10 GB and 23 layers of
  // 3.24 GB fit: at most 24 blocks, where 30 need 96.0 GB.
  const uint64_t ckpt = 34ull * 16384 * 4096 * 2;
  const uint64_t fixed = dram.hbm.needed_bytes - ckpt;
  EXPECT_LE(fixed + HbmState::bytes(layout, 24), 84'000'000'000u);
  EXPECT_GT(fixed + HbmState::bytes(layout, 25), 84'000'000'000u);
  EXPECT_NE(plan.reason.find("HBM: streaming needs 7.37 GB and the state of the first 30 blocks "
                             "(placement.hbm_state_blocks) 96.00 GB more, but 84.00 GB is free; "
                             "lower placement.hbm_state_blocks to 24 or less, or set it to -1"),
            std::string::npos)
      << plan.reason;
  EXPECT_NE(plan.state.why.find("only 24 fit"), std::string::npos) << plan.state.why;
  EXPECT_TRUE(make_plan(c, sixteen_k_job(24), h100_host(), 10, false).fits);
  EXPECT_FALSE(make_plan(c, sixteen_k_job(25), h100_host(), 10, false).fits);
  // Not at any micro-batch either: the state does not shrink with it.
  ASSERT_TRUE(plan.suggestion.has_value());
  EXPECT_FALSE(plan.suggestion->fits);
  EXPECT_NE(plan.suggestion->why.find("lower placement.hbm_state_blocks"), std::string::npos)
      << plan.suggestion->why;
  // Checkpoints that no longer fit beside an explicit tier spill to the host, as in the engine.
  const Plan spilled = make_plan(c, sixteen_k_job(24), h100_host(), 10, false);
  EXPECT_FALSE(spilled.checkpoints_on_device);
  EXPECT_EQ(spilled.hbm.needed_bytes, fixed + HbmState::bytes(layout, 24));
}

TEST(HbmState, NoneOnTheCpuBackendUnlessAsked) {
  const ModelConfig c = *model_preset("llama-50m");
  const ParameterLayout layout = ParameterLayout::build(c);
  TrainJob job;  // placement.hbm_state_blocks -1, its default
  ASSERT_EQ(job.hbm_state_blocks, -1);
  job.seq_len = 256;
  job.micro_batch_size = 4;
  job.grad_accum = 2;
  const Plan plan = make_plan(c, job, small_cpu_host(), 100, false);
  ASSERT_TRUE(plan.fits) << plan.reason;
  EXPECT_EQ(plan.state.blocks, c.num_layers + 2);
  EXPECT_EQ(plan.state.hbm_blocks, 0);
  EXPECT_EQ(plan.state.why, "none on the CPU backend: its device memory is DRAM already");
  TrainJob none = job;
  none.hbm_state_blocks = 0;
  EXPECT_EQ(to_json(plan)["step"],
            to_json(make_plan(c, none, small_cpu_host(), 100, false))["step"]);

  // Asked for, the CPU backend keeps the first blocks in its arena, which is DRAM: the step's
  // time does not change (its AdamW runs on the same cores), DRAM needs the state besides, less
  // the host gradients those blocks no longer have.
  TrainJob two = job;
  two.hbm_state_blocks = 2;
  const Plan asked = make_plan(c, two, small_cpu_host(), 100, false);
  ASSERT_TRUE(asked.fits) << asked.reason;
  EXPECT_EQ(asked.state.hbm_blocks, 2);
  EXPECT_EQ(asked.state.hbm_bytes, HbmState::bytes(layout, 2));
  EXPECT_EQ(asked.dram.needed_bytes,
            plan.dram.needed_bytes + asked.state.hbm_bytes - asked.state.hbm_bytes / 4);
  EXPECT_EQ(asked.step.adamw_s, plan.step.adamw_s);
  EXPECT_EQ(asked.step.step_s, plan.step.step_s);
  EXPECT_EQ(asked.step.gpu_adamw_s, 0.0);
}

TEST(HbmState, PlanJsonCarriesTheState) {
  const Plan plan = make_plan(llama2_7b(), sixteen_k_job(-1), h100_host(), 10);
  const nlohmann::json j = to_json(plan);
  EXPECT_EQ(j["state"]["blocks"], 34);
  EXPECT_EQ(j["state"]["hbm_blocks"], 22);
  EXPECT_EQ(j["state"]["hbm_bytes"].get<uint64_t>(), plan.state.hbm_bytes);
  EXPECT_EQ(j["state"]["why"], plan.state.why);
  EXPECT_EQ(j["step"]["gpu_adamw_s"].get<double>(), plan.step.gpu_adamw_s);
  EXPECT_EQ(j["suggestion"]["hbm_state_blocks"], 22);
  const Result<Plan> back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->state.blocks, 34);
  EXPECT_EQ(back->state.hbm_blocks, 22);
  EXPECT_EQ(back->state.hbm_bytes, plan.state.hbm_bytes);
  EXPECT_EQ(back->state.why, plan.state.why);
  EXPECT_EQ(back->suggestion->hbm_state_blocks, 22);
  EXPECT_EQ(to_json(*back).dump(), j.dump());
}

TEST(SuggestBatch, TheHbmStateMakesASmallStepFast) {
  const ModelConfig c = llama2_7b();
  TrainJob job = seven_b_job();
  job.hbm_state_blocks = -1;
  const nlohmann::json s = to_json(suggest_batch(c, job, h100_host()));
  const nlohmann::json all_dram = to_json(suggest_batch(c, seven_b_job(), h100_host()));
  std::printf("auto: %s\nall in DRAM: %s\n", s.dump().c_str(), all_dram.dump().c_str());
  expect_smallest_within_five_percent(c, job, h100_host(), s);
  // With 22 blocks' state in HBM the CPU's AdamW (0.45 s) hides behind the forward of 16K
  // tokens (above); with all of it in DRAM it takes 48K (README, "The suggested batch").
  EXPECT_EQ(s["tokens_per_step"], 16384);
  EXPECT_EQ(s["micro_batch_size"], 8);
  EXPECT_EQ(s["hbm_state_blocks"], 22);
  EXPECT_EQ(all_dram["tokens_per_step"], 49152);
  EXPECT_EQ(all_dram["hbm_state_blocks"], 0);
  const std::string why = s["why"];
  EXPECT_NE(why.find("the state of the first 22 of 34 blocks in HBM (70.10 GB) leaves the CPU's "
                     "AdamW 0.4 s instead of 1.3 s: with all of it in DRAM the step would take "
                     "48K tokens to keep the GPU busy"),
            std::string::npos)
      << why;
  EXPECT_EQ(all_dram["why"].get<std::string>().find("blocks in HBM"), std::string::npos);
}

// The trade between checkpoints and the state tier (planner.h, make_plan): llama2-7b at 16 x 1 x
// 2048 = 32K tokens per step on a GPU with the H100's figures and 48 GB free, where every
// checkpoint (9.1 GB) and 8 blocks' state fill HBM and the CPU's AdamW of the other 26 shows.
TrainJob thirty_two_k_job() {
  TrainJob job = seven_b_job();
  job.micro_batch_size = 16;
  job.grad_accum = 1;
  job.hbm_state_blocks = -1;
  return job;
}
MachineProbe h100_with_48_gb() {
  MachineProbe m = h100_host();
  m.device_total_bytes = m.device_free_bytes = 48'000'000'000ull;
  return m;
}

TEST(HbmState, TradesCheckpointsForBlocksWhenThatIsFaster) {
  const ModelConfig c = llama2_7b();
  const ParameterLayout layout = ParameterLayout::build(c);
  const MachineProbe m = h100_with_48_gb();
  const Plan plan = make_plan(c, thirty_two_k_job(), m, 10);
  ASSERT_TRUE(plan.fits) << plan.reason;
  std::printf("%s\n", plan.state.why.c_str());
  // Checkpoints first (today's rule, StreamingEngine::hbm_state_blocks with every checkpoint): 8
  // blocks, every checkpoint in HBM. The same as an explicit 8, which the planner does not trade.
  TrainJob eight = thirty_two_k_job();
  eight.hbm_state_blocks = 8;
  const Plan first = make_plan(c, eight, m, 10, false);
  ASSERT_TRUE(first.fits) << first.reason;
  EXPECT_EQ(first.state.device_checkpoint_layers, 33);
  EXPECT_EQ(*first.dram.checkpoints_bytes, 0u);
  StreamingConfig sc = streaming_config(thirty_two_k_job());
  const uint64_t ws =
      compute::workspace_bytes(compute::BackendKind::kCuda, StreamingEngine::op_shapes(c, sc));
  EXPECT_EQ(
      StreamingEngine::hbm_state_blocks(layout, sc, DType::kBF16, ws, 48'000'000'000ull, false),
      8u);

  // The trade: the checkpoints of the last 31 of the 33 layers (the head's input counts) go to
  // host memory, 8.32 GB, which makes room for 3 more blocks: 11, as the engine's rule places them
  // beside the checkpoints of 2 layers and the activation gradients.
  EXPECT_EQ(plan.state.hbm_blocks, 11);
  EXPECT_EQ(plan.state.device_checkpoint_layers, 2);
  EXPECT_TRUE(plan.checkpoints_on_device);
  sc.device_checkpoint_layers = 2;
  EXPECT_EQ(
      StreamingEngine::hbm_state_blocks(layout, sc, DType::kBF16, ws, 48'000'000'000ull, false),
      11u);
  sc.device_checkpoint_layers = 3;  // one layer more on the device leaves room for 10
  EXPECT_EQ(
      StreamingEngine::hbm_state_blocks(layout, sc, DType::kBF16, ws, 48'000'000'000ull, false),
      10u);
  const uint64_t row = 32768ull * 4096 * 2;  // one layer's checkpoint: [32K tokens, 4096] bf16
  EXPECT_EQ(*plan.hbm.checkpoints_bytes, 3 * row);  // 2 layers' and the activation gradients
  EXPECT_EQ(*plan.dram.checkpoints_bytes, 31 * row);
  EXPECT_EQ(plan.hbm.needed_bytes, first.hbm.needed_bytes - 31 * row + HbmState::bytes(layout, 11) -
                                       HbmState::bytes(layout, 8));
  EXPECT_LE(plan.hbm.needed_bytes + StreamingEngine::kHbmStateReserveBytes, 48'000'000'000u);
  // Each spilled checkpoint goes down once and up twice (the head's input once: the engine's
  // count, hbm-state-test's CheckpointsMovedToTheHostTrainTheSameBits); the 3 blocks' weights and
  // gradients no longer cross.
  const StreamingEngine::LinkBytes link = StreamingEngine::plan_link_bytes(layout, sc, 11);
  EXPECT_EQ(plan.step.h2d_bytes, static_cast<double>(link.h2d + 61 * row));
  EXPECT_EQ(plan.step.d2h_bytes, static_cast<double>(link.d2h + 31 * row));
  EXPECT_GT(plan.step.link_s, first.step.link_s);
  // The link was idle enough to take them (the step stays compute-bound), and the CPU's AdamW
  // that showed is shorter: the faster step by more than the margin.
  EXPECT_EQ(plan.step.bottleneck, "compute");
  EXPECT_LT(plan.step.link_s, plan.step.compute_s);
  EXPECT_LT(plan.step.adamw_s, first.step.adamw_s);
  EXPECT_LT(plan.step.optimizer_visible_s, first.step.optimizer_visible_s);
  EXPECT_LT(plan.step.step_s, (1 - kTradeMargin) * first.step.step_s);
  EXPECT_NEAR(plan.step.step_s, 3.288, 0.001);
  EXPECT_NEAR(first.step.step_s, 3.404, 0.001);
  // Moving all 33 layers' checkpoints to the host (the explicit 11 blocks, beside which they do
  // not fit) moves more over the link for no shorter a step: the trade keeps the 2 layers' that
  // fit.
  TrainJob eleven = thirty_two_k_job();
  eleven.hbm_state_blocks = 11;
  const Plan spilled = make_plan(c, eleven, m, 10, false);
  ASSERT_TRUE(spilled.fits) << spilled.reason;
  EXPECT_FALSE(spilled.checkpoints_on_device);
  EXPECT_EQ(spilled.state.device_checkpoint_layers, 0);
  EXPECT_GT(spilled.step.link_s, plan.step.link_s);
  EXPECT_GE(spilled.step.step_s, plan.step.step_s);
  EXPECT_NE(plan.state.why.find(
                "; the checkpoints of the last 31 of 33 layers (8.32 GB) go to host memory for 3 "
                "more blocks in HBM: 3.288 s a step against 3.404 s with every checkpoint in HBM"),
            std::string::npos)
      << plan.state.why;

  // The plan's JSON records the split; the suggestion makes the same trade at its own batch.
  const nlohmann::json j = to_json(plan);
  EXPECT_EQ(j["state"]["device_checkpoint_layers"], 2);
  EXPECT_EQ(j["state"]["hbm_blocks"], 11);
  const Result<Plan> back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->state.device_checkpoint_layers, 2);
  EXPECT_EQ(to_json(*back).dump(), j.dump());
  ASSERT_TRUE(plan.suggestion.has_value() && plan.suggestion->fits);
  TrainJob suggested = thirty_two_k_job();
  suggested.micro_batch_size = plan.suggestion->micro_batch_size;
  suggested.grad_accum = plan.suggestion->grad_accum;
  const Plan at = make_plan(c, suggested, m, 10, false);
  EXPECT_EQ(plan.suggestion->device_checkpoint_layers, at.state.device_checkpoint_layers);
  EXPECT_EQ(plan.suggestion->hbm_state_blocks, at.state.hbm_blocks);
  EXPECT_EQ(plan.suggestion->step_s, at.step.step_s);
  std::printf("suggestion: %s\n", to_json(*plan.suggestion).dump().c_str());
}

// Where the host link is what bounds the step, checkpoints moved there cost more than the
// blocks' state saves: they stay in HBM, and the plan says what the trade would have given.
TEST(HbmState, ASlowLinkKeepsTheCheckpointsOnTheDevice) {
  const ModelConfig c = llama2_7b();
  MachineProbe m = h100_with_48_gb();
  m.h2d_bytes_per_s = m.d2h_bytes_per_s = 12e9;
  m.duplex_bytes_per_s = 20e9;
  const Plan plan = make_plan(c, thirty_two_k_job(), m, 10, false);
  ASSERT_TRUE(plan.fits) << plan.reason;
  std::printf("%s\n", plan.state.why.c_str());
  EXPECT_EQ(plan.step.bottleneck, "h2d");
  EXPECT_EQ(plan.state.hbm_blocks, 8);
  EXPECT_EQ(plan.state.device_checkpoint_layers, 33);
  EXPECT_EQ(*plan.dram.checkpoints_bytes, 0u);
  TrainJob eight = thirty_two_k_job();
  eight.hbm_state_blocks = 8;
  EXPECT_EQ(to_json(plan)["step"], to_json(make_plan(c, eight, m, 10, false))["step"]);
  EXPECT_NE(plan.state.why.find("; moving checkpoints to host memory for more blocks saves less "
                                "than 2% of the step (at best "),
            std::string::npos)
      << plan.state.why;
}

// Checkpoints that do not all fit even without the state tier: where the plan used to count every
// one in host memory (the engine keeps what fits of them), the trade starts from the most layers'
// that fit beside streaming, as the engine fills the device, and counts only the others on the
// link; the run builds that split.
TEST(HbmState, CheckpointsThatDoNotAllFitKeepTheFirstLayersOnTheDevice) {
  const ModelConfig c = llama2_7b();
  const ParameterLayout layout = ParameterLayout::build(c);
  MachineProbe m = h100_host();
  m.device_total_bytes = m.device_free_bytes = 24'000'000'000ull;
  TrainJob job = thirty_two_k_job();
  job.grad_accum = 2;  // 64K tokens: 18.3 GB of checkpoints beside 12.3 GB of streaming
  const Plan plan = make_plan(c, job, m, 10, false);
  ASSERT_TRUE(plan.fits) << plan.reason;
  std::printf("%s\n", plan.state.why.c_str());
  StreamingConfig sc = streaming_config(job);
  const uint64_t ws =
      compute::workspace_bytes(compute::BackendKind::kCuda, StreamingEngine::op_shapes(c, sc));
  const uint64_t fixed =
      StreamingEngine::plan_device_memory(layout, sc, DType::kBF16, ws).fixed_bytes();
  int fit = 33;
  for (; fit >= 0; --fit) {
    sc.device_checkpoint_layers = fit;
    if (fixed + StreamingEngine::device_checkpoint_bytes(layout, sc, DType::kBF16) <=
        24'000'000'000ull)
      break;
  }
  ASSERT_GT(fit, 0);
  ASSERT_LT(fit, 33);
  EXPECT_TRUE(plan.checkpoints_on_device);
  EXPECT_LE(plan.state.device_checkpoint_layers, fit);
  const uint64_t layer = 2ull * 32768 * 4096 * 2;  // one layer's: two micro-batches of 32K
  EXPECT_EQ(*plan.dram.checkpoints_bytes,
            static_cast<uint64_t>(33 - plan.state.device_checkpoint_layers) * layer);
  EXPECT_EQ(*plan.hbm.checkpoints_bytes,
            static_cast<uint64_t>(plan.state.device_checkpoint_layers + 1) * layer);
  sc.device_checkpoint_layers = plan.state.device_checkpoint_layers;
  EXPECT_EQ(
      static_cast<size_t>(plan.state.hbm_blocks),
      StreamingEngine::hbm_state_blocks(layout, sc, DType::kBF16, ws, 24'000'000'000ull, false));
  const StreamingEngine::LinkBytes link =
      StreamingEngine::plan_link_bytes(layout, sc, plan.state.hbm_blocks);
  EXPECT_EQ(plan.step.h2d_bytes,
            static_cast<double>(link.h2d + 2 * *plan.dram.checkpoints_bytes - layer));
  EXPECT_EQ(plan.step.d2h_bytes, static_cast<double>(link.d2h + *plan.dram.checkpoints_bytes));
}

TrainJob on_gpus(TrainJob job, int count) {
  job.devices.count = count;
  return job;
}

TEST(DataParallel, TwoGpusDoubleTheTokensAndKeepEachGpusCompute) {
  const ModelConfig c = llama2_7b();
  const ParameterLayout layout = ParameterLayout::build(c);
  const Plan one = make_plan(c, seven_b_job(), two_h100_host(), 10, false);
  const Plan two = make_plan(c, on_gpus(seven_b_job(), 2), two_h100_host(), 10, false);
  ASSERT_TRUE(one.fits) << one.reason;
  ASSERT_TRUE(two.fits) << two.reason;
  std::printf(
      "one GPU: %.0f tokens/s, step %.3f s; two: %.0f tokens/s, step %.3f s, NCCL %.4f s "
      "exposed, %.2f GB per GPU, bottleneck %s\n",
      one.step.tokens_per_s, one.step.step_s, two.step.tokens_per_s, two.step.step_s,
      two.devices.nccl_s, two.devices.nccl_bytes / 1e9, two.step.bottleneck.c_str());
  EXPECT_EQ(one.devices.count, 1);
  EXPECT_EQ(one.devices.indices, std::vector<int>{0});
  EXPECT_EQ(one.devices.nccl_s, 0.0);
  EXPECT_EQ(one.devices.nccl_bytes, 0.0);
  EXPECT_EQ(two.devices.count, 2);
  EXPECT_EQ(two.devices.indices, (std::vector<int>{0, 1}));

  // Each GPU runs the job's 4 x 4 x 2048: twice the tokens, the FLOPs with them; each GPU's
  // compute is one GPU's.
  EXPECT_EQ(one.step.tokens, 32768.0);
  EXPECT_EQ(two.step.tokens, 2 * 32768.0);
  EXPECT_DOUBLE_EQ(two.step.model_flops, 2 * one.step.model_flops);
  EXPECT_EQ(two.step.compute_s, one.step.compute_s);
  EXPECT_EQ(two.step.gemm_s, one.step.gemm_s);
  // The same parameters for the CPU's AdamW.
  EXPECT_EQ(two.step.adamw_s, one.step.adamw_s);

  // Up: every master whole to each GPU. Down: each GPU its half of every gradient, the first
  // GPU's (the plan's) ceil(numel / 2) floats, and its own losses and sums of squares.
  EXPECT_EQ(two.step.h2d_bytes, one.step.h2d_bytes);
  const double own = 32768 * 4.0 + 34 * 8.0;  // per-token losses, per-block sums of squares
  double half = 0;
  for (const auto& b : layout.blocks()) half += static_cast<double>((b.numel + 1) / 2) * 4;
  EXPECT_EQ(two.step.d2h_bytes, half + own);
  EXPECT_GE(two.step.d2h_bytes - own, (one.step.d2h_bytes - own) / 2);
  EXPECT_LE(two.step.d2h_bytes - own, (one.step.d2h_bytes - own) / 2 + 34 * 4);
  // Each GPU's link at 0.93 of one alone.
  EXPECT_NEAR(two.step.h2d_s, one.step.h2d_s / kSharedLinkEfficiency, 1e-12);
  EXPECT_NEAR(two.step.d2h_s, two.step.d2h_bytes / (55e9 * kSharedLinkEfficiency), 1e-12);

  // NCCL: each block's buffer (padded to an even count) reduce-scattered, half of it sent by each
  // GPU. A layer's reduce (2.7 ms) hides behind the next layer's backward; the embedding's
  // backward (a scatter-add) takes none, so layer 0's reduce and the embedding's are exposed.
  EXPECT_DOUBLE_EQ(two.devices.nccl_bytes, half);
  const double layer0 = 0.5 * 4 * kLayerParams, embedding = 0.5 * 4 * kEmbeddingParams;
  EXPECT_NEAR(two.devices.nccl_s, (layer0 + embedding) / kNcclBusBytesPerSNvlink, 1e-12);
  EXPECT_NEAR(two.devices.nccl_s, 0.00445, 0.00001);

  // The step: one GPU's, but for the shared links and the exposed reduce.
  const PlanStep& s = two.step;
  EXPECT_NEAR(s.step_s,
              s.optimizer_visible_s + std::max(s.compute_s, s.link_s) + two.devices.nccl_s, 1e-12);
  EXPECT_NEAR(s.tokens_per_s, 2 * 32768 / s.step_s, 1e-9);
  EXPECT_GT(s.tokens_per_s, 1.9 * one.step.tokens_per_s);
  EXPECT_EQ(s.bottleneck, one.step.bottleneck);

  // Each GPU's HBM is one GPU's, the gradient buffers padded to an even count of floats; the
  // host holds one copy of the state.
  EXPECT_GE(*two.hbm.gradients_bytes, *one.hbm.gradients_bytes);
  EXPECT_LE(*two.hbm.gradients_bytes, *one.hbm.gradients_bytes + 2 * 256);
  EXPECT_EQ(two.hbm.needed_bytes - *two.hbm.gradients_bytes,
            one.hbm.needed_bytes - *one.hbm.gradients_bytes);
  EXPECT_EQ(two.dram.needed_bytes, one.dram.needed_bytes);
  EXPECT_EQ(two.state.hbm_blocks, 0);
}

TEST(DataParallel, MoreGpusThanPresentDoNotFitAndSayWhy) {
  const ModelConfig c = llama2_7b();
  const Plan four = make_plan(c, on_gpus(seven_b_job(), 4), two_h100_host(), 10);
  EXPECT_FALSE(four.fits);
  EXPECT_EQ(four.reason,
            "placement.devices asks for 4 GPUs, but this machine has 2 GPUs; lower it, or use "
            "\"all\"");
  ASSERT_TRUE(four.suggestion.has_value());
  EXPECT_FALSE(four.suggestion->fits);
  EXPECT_NE(four.suggestion->why.find("asks for 4 GPUs"), std::string::npos);
  TrainJob third = seven_b_job();
  third.devices.indices = {0, 2};
  const Plan missing = make_plan(c, third, two_h100_host(), 10, false);
  EXPECT_FALSE(missing.fits);
  EXPECT_NE(missing.reason.find("placement.devices names GPU 2, but this machine has 2 GPUs"),
            std::string::npos)
      << missing.reason;
  // A list that is there: those GPUs, in its order.
  TrainJob swapped = seven_b_job();
  swapped.devices.indices = {1, 0};
  const Plan listed = make_plan(c, swapped, two_h100_host(), 10, false);
  ASSERT_TRUE(listed.fits) << listed.reason;
  EXPECT_EQ(listed.devices.indices, (std::vector<int>{1, 0}));
  // "all" is every GPU present.
  TrainJob all = seven_b_job();
  all.devices.all = true;
  EXPECT_EQ(make_plan(c, all, two_h100_host(), 10, false).devices.count, 2);
  // GPUs not counted (the trainer's fit check, whose run resolved them already): as asked.
  const Plan uncounted = make_plan(c, on_gpus(seven_b_job(), 4), h100_host(), 10, false);
  ASSERT_TRUE(uncounted.fits) << uncounted.reason;
  EXPECT_EQ(uncounted.devices.indices, (std::vector<int>{0, 1, 2, 3}));
}

TEST(DataParallel, NoHbmStateTierWithSeveralGpus) {
  const ModelConfig c = llama2_7b();
  // -1: as the engine places it, none.
  const Plan plan = make_plan(c, on_gpus(sixteen_k_job(-1), 2), two_h100_host(), 10, false);
  ASSERT_TRUE(plan.fits) << plan.reason;
  EXPECT_EQ(plan.state.hbm_blocks, 0);
  EXPECT_EQ(plan.state.why,
            "none in HBM: the HBM state tier trains on one GPU only for now (placement.devices "
            "spreads the step over 2)");
  EXPECT_EQ(plan.step.gpu_adamw_s, 0.0);
  EXPECT_FALSE(plan.hbm.master_bytes.has_value());
  // An explicit count: refused, as StreamingEngine::create refuses it.
  const Plan asked = make_plan(c, on_gpus(sixteen_k_job(5), 2), two_h100_host(), 10, false);
  EXPECT_FALSE(asked.fits);
  EXPECT_EQ(asked.reason,
            "placement.hbm_state_blocks: the HBM state tier trains on one GPU only for now; with "
            "several GPUs set it to -1 or 0");
}

TEST(DataParallel, ASlowReduceIsTheBottleneck) {
  // GPUs that reduce at 1 GB/s: 13.5 GB per GPU a step outlast the backward, and what they do
  // not hide adds to the step.
  MachineProbe slow = two_h100_host();
  slow.nccl_bus_bytes_per_s = 1e9;
  const ModelConfig c = llama2_7b();
  const Plan fast = make_plan(c, on_gpus(seven_b_job(), 2), two_h100_host(), 10, false);
  const Plan plan = make_plan(c, on_gpus(seven_b_job(), 2), slow, 10, false);
  EXPECT_EQ(plan.step.bottleneck, "nccl");
  EXPECT_DOUBLE_EQ(plan.devices.nccl_bytes, fast.devices.nccl_bytes);
  // The reduces run one after another from the head's backward on: the last ends about their
  // whole time after the backward starts (3/4 of the compute).
  const double busy = plan.devices.nccl_bytes / 1e9;
  EXPECT_GT(plan.devices.nccl_s, busy - 0.75 * plan.step.compute_s);
  EXPECT_LT(plan.devices.nccl_s, busy);
  EXPECT_NEAR(plan.step.step_s - plan.devices.nccl_s, fast.step.step_s - fast.devices.nccl_s,
              1e-12);
  // Unmeasured: the PCIe figure.
  MachineProbe unmeasured = two_h100_host();
  unmeasured.nccl_bus_bytes_per_s = 0;
  const Plan pcie = make_plan(c, on_gpus(seven_b_job(), 2), unmeasured, 10, false);
  EXPECT_NEAR(pcie.devices.nccl_s,
              0.5 * 4 * (kLayerParams + kEmbeddingParams) / kNcclBusBytesPerSPcie, 1e-12);
}

// Past one machine each holds the state of its blocks (block-owners.h): about half of the host
// state on each of two, half the AdamW, half the host link's bytes per GPU (each carries its own
// blocks), and the network carries every gradient once (a reduce into the GPU that carries the
// block) and every upload's weights in bf16 (a broadcast from it).
TEST(DataParallel, MachinesShardTheStateAndReduceOverTheNetwork) {
  const ModelConfig c = llama2_7b();
  const Plan one = make_plan(c, seven_b_job(), h100_host(), 10, false);
  MachineProbe two_machines = h100_host();
  two_machines.machines = 2;
  two_machines.network_bytes_per_s = 50e9;  // 400 Gb/s
  const Plan two = make_plan(c, seven_b_job(), two_machines, 10, false);
  ASSERT_TRUE(one.fits && two.fits) << two.reason;
  EXPECT_EQ(two.devices.machines, 2);
  EXPECT_EQ(two.devices.count, 1);
  EXPECT_EQ(two.step.tokens, 2 * one.step.tokens);
  const double half_dram = static_cast<double>(two.dram.needed_bytes) / one.dram.needed_bytes;
  EXPECT_GT(half_dram, 0.45);
  EXPECT_LT(half_dram, 0.55) << "within a block of half";
  EXPECT_EQ(two.hbm.needed_bytes, one.hbm.needed_bytes);
  EXPECT_LT(two.step.h2d_bytes, 0.55 * one.step.h2d_bytes);
  EXPECT_LT(two.step.adamw_s, 0.55 * one.step.adamw_s);
  double params = 0;
  const ParameterLayout layout = ParameterLayout::build(c);
  for (const auto& block : layout.blocks()) params += block.numel;
  EXPECT_DOUBLE_EQ(two.devices.nccl_bytes, 4 * params);
  // The broadcasts: the weights one GPU uploads alone, in bf16 (half its fp32 bytes).
  EXPECT_NEAR(two.devices.network_bytes - two.devices.nccl_bytes, one.step.h2d_bytes / 2,
              0.001 * one.step.h2d_bytes);
  EXPECT_EQ(two.machine.network_bytes_per_s, 50e9);
  EXPECT_GT(two.devices.nccl_s, 4 * kEmbeddingParams / 50e9);
  EXPECT_LT(two.devices.nccl_s, 0.1 * two.step.step_s);
  EXPECT_GT(two.step.tokens_per_s, 1.9 * one.step.tokens_per_s);
  EXPECT_EQ(two.step.bottleneck, "compute");
  // Unmeasured: one 100 Gb/s port (kNetworkBytesPerS), which still hides behind the backward
  // but for more of the last blocks'.
  two_machines.network_bytes_per_s = 0;
  const Plan default_network = make_plan(c, seven_b_job(), two_machines, 10, false);
  EXPECT_EQ(default_network.machine.network_bytes_per_s, kNetworkBytesPerS);
  EXPECT_GT(default_network.devices.nccl_s, two.devices.nccl_s);
  // Over 10 Gb/s the network is what the step waits for.
  two_machines.network_bytes_per_s = 1.25e9;
  const Plan slow = make_plan(c, seven_b_job(), two_machines, 10, false);
  EXPECT_EQ(slow.step.bottleneck, "network");
  EXPECT_GT(slow.step.step_s, slow.devices.network_bytes / 1.25e9);
  std::printf(
      "llama2-7b 4x4x2048 a GPU, one H100 a machine: 1 machine %.2f s, %.0f tokens/s; 2 machines "
      "over 400 Gb/s %.2f s (%.2f exposed), %.0f tokens/s; 100 Gb/s %.2f s; 10 Gb/s %.2f s; %.1f "
      "GB "
      "a step on the network, DRAM %.1f of %.1f GB\n",
      one.step.step_s, one.step.tokens_per_s, two.step.step_s, two.devices.nccl_s,
      two.step.tokens_per_s, default_network.step.step_s, slow.step.step_s,
      two.devices.network_bytes / 1e9, two.dram.needed_bytes / 1e9, one.dram.needed_bytes / 1e9);
  // The plan's JSON carries the machines; a one-machine plan's has no such key.
  const nlohmann::json j = to_json(two);
  EXPECT_EQ(j["devices"]["machines"], 2);
  EXPECT_FALSE(to_json(one)["devices"].contains("machines"));
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->devices.machines, 2);
  EXPECT_DOUBLE_EQ(back->devices.network_bytes, two.devices.network_bytes);
  EXPECT_EQ(back->machine.network_bytes_per_s, 50e9);
}

// llama-70b on machines of the one-H100 host's shape (125 GiB): each holds its blocks' state, so
// more machines add room. The fewest that hold it: with the state in DRAM, and with the SSD tier
// (a 4 TB SSD each), where DRAM keeps the gradients and the weights the GPU streams: what README's
// "Past one machine" quotes.
TEST(DataParallel, SeventyBFitsEnoughMachinesOfTheOneGpuHostsShape) {
  const ModelConfig c = *model_preset("llama-70b");
  for (const bool ssd : {false, true}) {
    int fewest = 0;
    uint64_t dram = 0;
    for (int machines = 1; machines <= 64 && fewest == 0; ++machines) {
      MachineProbe host = h100_host();
      host.machines = machines;
      host.ssd_free_bytes = host.ssd_total_bytes = 4'000'000'000'000ull;
      TrainJob job = seven_b_job();
      if (ssd) {
        job.optimizer_tier = job.master_tier = TierChoice::kAuto;
        job.ssd_dir = "/ssd";
      }
      const Plan p = make_plan(c, job, host, 10, false);
      if (p.fits) {
        fewest = machines;
        dram = p.dram.needed_bytes;
      } else {
        EXPECT_TRUE(p.reason.starts_with("DRAM: needs")) << p.reason;
      }
    }
    std::printf("llama-70b, %s: %d machines, %.1f GB of DRAM each\n",
                ssd ? "SSD tier" : "DRAM only", fewest, dram / 1e9);
    EXPECT_EQ(fewest, ssd ? 5 : 9) << (ssd ? "with the SSD tier" : "in DRAM");
  }
}

// Every GPU's copies pass through the one host's memory: eight GPUs on a host whose memory copies
// at 20 GB/s move 8 x 59 GB a step through it, which takes longer than the compute.
TEST(DataParallel, TheHostsMemoryBoundsManyGpus) {
  MachineProbe host = two_h100_host();
  host.gpus = 8;
  const ModelConfig c = llama2_7b();
  const Plan two = make_plan(c, on_gpus(seven_b_job(), 2), host, 10, false);
  EXPECT_EQ(two.step.bottleneck, "compute");
  host.host_mem_bytes_per_s = 20e9;
  const Plan eight = make_plan(c, on_gpus(seven_b_job(), 8), host, 10, false);
  EXPECT_EQ(eight.step.bottleneck, "host memory");
  const double dma_s = 8 * (eight.step.h2d_bytes + eight.step.d2h_bytes) / (2 * 20e9);
  EXPECT_GT(dma_s, eight.step.compute_s);
  EXPECT_GE(eight.step.step_s, dma_s);
}

TEST(DataParallel, CpuRanksShareTheCores) {
  const ModelConfig c = *model_preset("llama-50m");
  TrainJob job;
  job.backend = "cpu";  // CPU ranks only when the job chose the CPU itself
  job.seq_len = 256;
  job.micro_batch_size = 4;
  job.grad_accum = 2;
  const Plan one = make_plan(c, job, small_cpu_host(), 100, false);
  job.devices.count = 2;
  const Plan two = make_plan(c, job, small_cpu_host(), 100, false);
  ASSERT_TRUE(two.fits) << two.reason;
  EXPECT_EQ(two.devices.count, 2);
  EXPECT_TRUE(two.devices.indices.empty());  // CPU ranks name no GPU
  EXPECT_EQ(two.devices.nccl_s, 0.0);
  EXPECT_EQ(two.step.tokens, 2 * one.step.tokens);
  EXPECT_NEAR(two.step.compute_s, 2 * one.step.compute_s, 1e-12);
  // Each rank's arena is DRAM too (its gradient buffers padded to an even count); the state is
  // there once.
  EXPECT_LE(two.hbm.needed_bytes - one.hbm.needed_bytes, 2 * 256u);
  EXPECT_EQ(two.dram.needed_bytes - 2 * two.hbm.needed_bytes,
            one.dram.needed_bytes - one.hbm.needed_bytes);
  job.devices.indices = {0};
  const Plan listed = make_plan(c, job, small_cpu_host(), 100, false);
  EXPECT_FALSE(listed.fits);
  EXPECT_EQ(listed.reason,
            "placement.devices lists GPUs (GPU 0) but the run is on the CPU backend; set "
            "placement.devices to 1");
  // Two ranks where the CPU is the fallback of "auto" (no GPU): GPUs asked for, not CPU ranks.
  job.devices.indices.clear();
  job.backend = "auto";
  const Plan fallback = make_plan(c, job, small_cpu_host(), 100, false);
  EXPECT_FALSE(fallback.fits);
  EXPECT_NE(fallback.reason.find("placement.devices asks for 2 GPUs, but the run is on the CPU"),
            std::string::npos)
      << fallback.reason;
}

TEST(DataParallel, PlanJsonCarriesTheDevices) {
  const Plan plan = make_plan(llama2_7b(), on_gpus(seven_b_job(), 2), two_h100_host(), 10);
  const nlohmann::json j = to_json(plan);
  EXPECT_EQ(j["devices"]["count"], 2);
  EXPECT_EQ(j["devices"]["indices"], nlohmann::json({0, 1}));
  EXPECT_EQ(j["devices"]["nccl_s"].get<double>(), plan.devices.nccl_s);
  EXPECT_EQ(j["devices"]["nccl_bytes"].get<double>(), plan.devices.nccl_bytes);
  EXPECT_EQ(j["machine"]["gpus"].get<double>(), 2.0);
  EXPECT_EQ(j["machine"]["nccl_bus_bytes_per_s"].get<double>(), kNcclBusBytesPerSNvlink);
  const Result<Plan> back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->devices.count, 2);
  EXPECT_EQ(back->devices.indices, (std::vector<int>{0, 1}));
  EXPECT_EQ(back->devices.nccl_s, plan.devices.nccl_s);
  EXPECT_EQ(back->devices.nccl_bytes, plan.devices.nccl_bytes);
  EXPECT_EQ(back->machine.gpus, 2.0);
  EXPECT_EQ(to_json(*back).dump(), j.dump());
}

TEST(SuggestBatch, SaysWhatEveryGpuWouldGive) {
  const ModelConfig c = llama2_7b();
  MachineProbe eight = two_h100_host();
  eight.gpus = 8;
  const PlanSuggestion s = suggest_batch(c, seven_b_job(), eight);
  std::printf("one of 8 GPUs: %s\n", s.why.c_str());
  ASSERT_TRUE(s.fits) << s.why;
  EXPECT_EQ(s.why.find('\n'), std::string::npos);
  // The same batch on every GPU, planned on its own.
  TrainJob all = seven_b_job();
  all.micro_batch_size = s.micro_batch_size;
  all.grad_accum = s.grad_accum;
  all.devices.all = true;
  const Plan every = make_plan(c, all, eight, 0, false);
  ASSERT_TRUE(every.fits) << every.reason;
  EXPECT_EQ(every.devices.count, 8);
  const std::string head = "; placement.devices \"all\" (8 GPUs) would give ";
  const size_t at = s.why.find(head);
  ASSERT_NE(at, std::string::npos) << s.why;
  const size_t end = s.why.find(" tokens/s with this batch on each GPU", at);
  ASSERT_NE(end, std::string::npos) << s.why;
  std::string figure = s.why.substr(at + head.size(), end - at - head.size());  // "79,501"
  std::erase(figure, ',');
  EXPECT_EQ(std::stod(figure), std::round(every.step.tokens_per_s)) << s.why;
  EXPECT_GT(every.step.tokens_per_s, 7 * s.tokens_per_s);
  // Every GPU in use, or one GPU on a one-GPU machine: nothing to add.
  TrainJob on_all = seven_b_job();
  on_all.devices.all = true;
  const PlanSuggestion used = suggest_batch(c, on_all, eight);
  ASSERT_TRUE(used.fits) << used.why;
  EXPECT_EQ(used.why.find("placement.devices"), std::string::npos) << used.why;
  EXPECT_EQ(used.tokens_per_step, int64_t{used.micro_batch_size} * used.grad_accum * 2048 * 8);
  EXPECT_EQ(suggest_batch(c, seven_b_job(), h100_host()).why.find("placement.devices"),
            std::string::npos);
}

TEST(MachineProbe, NcclDefaultByComputeCapability) {
  EXPECT_EQ(default_nccl_bus_bytes_per_s(90), kNcclBusBytesPerSNvlink);
  EXPECT_EQ(default_nccl_bus_bytes_per_s(100), kNcclBusBytesPerSNvlink);
  EXPECT_EQ(default_nccl_bus_bytes_per_s(89), kNcclBusBytesPerSPcie);
  EXPECT_EQ(default_nccl_bus_bytes_per_s(0), kNcclBusBytesPerSPcie);
}

// State a little larger than DRAM (placement.dram_cap_bytes 100 GB for llama2-7b's 107.8 GB at
// 16 B/param): with "auto" the moments of as many of the first blocks as fit stay in DRAM, the
// rest go to the SSD, the master stays in DRAM (on the SSD it would free none), and the plan
// lists the counts and why. DRAM holds the master and gradients (2 x 26.95 GB: every checkpoint
// fits the H100) and 46.1 GB of moments: the embedding's 1.05 GB and 27 layers of 1.62 GB (a 28th
// would need 46.4); layers 27-31 and the head have theirs on the SSD.
TEST(TierPlacement, AutoKeepsTheFirstBlocksMomentsInDramAndTheRestOnTheSsd) {
  const ModelConfig c = llama2_7b();
  const ParameterLayout layout = ParameterLayout::build(c);
  TrainJob job = seven_b_job();
  job.optimizer_tier = job.master_tier = TierChoice::kAuto;
  job.dram_cap_bytes = 100'000'000'000ull;
  const Plan plan = make_plan(c, job, h100_host(), 10, false);
  ASSERT_TRUE(plan.fits) << plan.reason;
  EXPECT_TRUE(plan.checkpoints_on_device);
  EXPECT_EQ(plan.state.dram_blocks, 28);
  EXPECT_EQ(plan.state.ssd_moments_blocks, 6);
  EXPECT_EQ(plan.state.ssd_blocks, 0);
  EXPECT_EQ(plan.state.host_why,
            "blocks 0-27 (the embedding and layers 0-26) in DRAM; blocks 28-33 (layers 27-31 and "
            "the head) with the master in DRAM and the moments on the SSD: the moments of every "
            "block (53.91 GB) do not fit in 100.00 GB of DRAM beside 53.91 GB of master weights, "
            "gradients and the rest: the fastest tier with room for each");
  // DRAM as full as the blocks allow: one more block's moments would not fit.
  uint64_t dram_moments = 0, ssd_moments = 0;
  for (size_t b = 0; b < layout.num_blocks(); ++b)
    (b < 28 ? dram_moments : ssd_moments) += 8 * layout.blocks()[b].numel;
  const uint64_t fp32 = 4 * layout.total_numel();
  EXPECT_EQ(*plan.dram.optimizer_bytes, dram_moments);
  EXPECT_EQ(plan.dram.needed_bytes, 2 * fp32 + dram_moments);
  EXPECT_LE(plan.dram.needed_bytes, job.dram_cap_bytes);
  EXPECT_GT(plan.dram.needed_bytes + 8 * layout.blocks()[28].numel, job.dram_cap_bytes);
  EXPECT_EQ(*plan.dram.master_bytes, fp32);
  EXPECT_EQ(*plan.ssd.optimizer_bytes, ssd_moments);
  EXPECT_EQ(*plan.ssd.master_bytes, 0u);
  EXPECT_EQ(plan.ssd.needed_bytes, ssd_moments);
  // The SSD's part of a step: those blocks' moments read and written (at 2 GB/s unprobed).
  EXPECT_DOUBLE_EQ(plan.step.ssd_s, 2.0 * ssd_moments / 2e9);

  // The plan JSON carries the counts and reads them back; the run builds what it says.
  const nlohmann::json j = to_json(plan);
  EXPECT_EQ(j["state"]["dram_blocks"], 28);
  EXPECT_EQ(j["state"]["ssd_moments_blocks"], 6);
  EXPECT_EQ(j["state"]["ssd_blocks"], 0);
  EXPECT_EQ(j["state"]["host_why"], plan.state.host_why);
  const Result<Plan> back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(to_json(*back).dump(), j.dump());
  const TierPlacement placement = plan_placement(*back);
  EXPECT_EQ(placement.blocks, (BlockTiers{28, 6, 0}));
  EXPECT_TRUE(placement.optimizer_on_ssd());
  EXPECT_FALSE(placement.master_on_ssd());

  // With room for everything, auto is all DRAM; "dram" and "ssd" place every block.
  job.dram_cap_bytes = 0;
  EXPECT_EQ(plan_placement(make_plan(c, job, h100_host(), 10, false)).blocks,
            BlockTiers::all(34, BlockTiers::kDram));
  job.dram_cap_bytes = 100'000'000'000ull;
  job.optimizer_tier = TierChoice::kSsd;
  EXPECT_EQ(plan_placement(make_plan(c, job, h100_host(), 10, false)).blocks,
            BlockTiers::all(34, BlockTiers::kSsdMoments));
  job.master_tier = TierChoice::kSsd;
  EXPECT_EQ(plan_placement(make_plan(c, job, h100_host(), 10, false)).blocks,
            BlockTiers::all(34, BlockTiers::kSsd));
}

// The HBM state tier's blocks have no host gradient: the DRAM they leave takes more blocks'
// moments (the tier's own host copy counts where the counts put it).
TEST(TierPlacement, TheHbmTiersBlocksLeaveRoomForMoreMoments) {
  const ModelConfig c = llama2_7b();
  TrainJob job = sixteen_k_job(-1);
  job.optimizer_tier = job.master_tier = TierChoice::kAuto;
  job.dram_cap_bytes = 100'000'000'000ull;
  const Plan plan = make_plan(c, job, h100_host(), 10, false);
  ASSERT_TRUE(plan.fits) << plan.reason;
  EXPECT_EQ(plan.state.hbm_blocks, 22);
  // 22 blocks' gradients (17.5 GB) stay on the GPU: every block's moments fit beside the rest.
  EXPECT_EQ(plan.state.dram_blocks, 34);
  EXPECT_EQ(plan.state.ssd_moments_blocks, 0);
  job.dram_cap_bytes = 80'000'000'000ull;
  const Plan tight = make_plan(c, job, h100_host(), 10, false);
  ASSERT_TRUE(tight.fits) << tight.reason;
  EXPECT_GT(tight.state.dram_blocks, 0);
  EXPECT_LT(tight.state.dram_blocks, 34);
  EXPECT_LE(tight.dram.needed_bytes, job.dram_cap_bytes);
  // Only the blocks outside the HBM tier move over the SSD each step.
  const ParameterLayout layout = ParameterLayout::build(c);
  uint64_t moved = 0;
  for (size_t b = std::max(22, tight.state.dram_blocks); b < layout.num_blocks(); ++b)
    moved += 2 * 8 * layout.blocks()[b].numel;
  EXPECT_DOUBLE_EQ(tight.step.ssd_s, moved / 2e9);
}

// More than fits: "dram" that DRAM cannot hold says what "auto" would keep there; a DRAM that
// cannot hold even the master and gradients says so, with the master placed on the SSD too.
TEST(TierPlacement, MoreThanFitsSaysWhatToChange) {
  const ModelConfig c = llama2_7b();
  TrainJob job = seven_b_job();
  job.dram_cap_bytes = 100'000'000'000ull;
  const Plan dram = make_plan(c, job, h100_host(), 10, false);
  EXPECT_FALSE(dram.fits);
  EXPECT_EQ(dram.state.dram_blocks, 34);
  EXPECT_NE(dram.reason.find("DRAM: needs 107.81 GB but 100.00 GB is available; set "
                             "placement.optimizer (and placement.master) to \"ssd\" or \"auto\" "
                             "with an ssd_dir (\"auto\" keeps the moments of the first 28 of 34 "
                             "blocks in DRAM and puts the rest on the SSD)"),
            std::string::npos)
      << dram.reason;
  job.optimizer_tier = job.master_tier = TierChoice::kAuto;
  job.dram_cap_bytes = 50'000'000'000ull;
  const Plan tiny = make_plan(c, job, h100_host(), 10, false);
  EXPECT_FALSE(tiny.fits);
  EXPECT_EQ(tiny.state.ssd_blocks, 34);
  EXPECT_NE(tiny.reason.find("what remains is the gradients and the weights the device streams"),
            std::string::npos)
      << tiny.reason;
  EXPECT_NE(tiny.state.host_why.find(
                "DRAM cannot hold even the master weights, gradients and the rest ("),
            std::string::npos)
      << tiny.state.host_why;
}

// Saved activations (StreamingConfig::saved_activation_layers): the last k layers skip the
// recompute, a quarter of their GEMM FLOPs and element-wise passes and half their attention's
// forward share, and hold k · micro-batches · BlockMath::saved_bytes more HBM.
TEST(SavedActivationsPlan, TakeTheRecomputeOffTheLastLayers) {
  const ModelConfig c = llama2_7b();
  const TrainJob none = seven_b_job();
  TrainJob eight = none;
  eight.saved_activation_layers = 8;
  const Plan a = make_plan(c, none, h100_host(), 10, false);
  const Plan b = make_plan(c, eight, h100_host(), 10, false);
  ASSERT_TRUE(a.fits && b.fits) << a.reason << b.reason;
  EXPECT_EQ(a.state.saved_activation_layers, 0);
  EXPECT_EQ(b.state.saved_activation_layers, 8);
  const double share = 8.0 / c.num_layers;
  double layer_params = 0;
  const ParameterLayout layout = ParameterLayout::build(c);
  for (int l = 1; l <= c.num_layers; ++l) layer_params += layout.blocks()[l].numel;
  // The recompute skips the down projection: a saved layer takes off the rest of its forward.
  const double down = double(c.hidden_size) * c.intermediate_size * c.num_layers;
  EXPECT_NEAR(b.step.gemm_s / a.step.gemm_s,
              1.0 - 2.0 * share * (layer_params - down) / (8.0 * layer_params), 1e-12);
  EXPECT_NEAR(b.step.elementwise_s / a.step.elementwise_s, 1.0 - 0.25 * share, 1e-12);
  EXPECT_LT(b.step.attention_s, a.step.attention_s);
  EXPECT_LT(b.step.flops, a.step.flops);
  EXPECT_EQ(b.step.model_flops, a.step.model_flops);
  const uint64_t saved =
      8ull * none.grad_accum *
      BlockMath::saved_bytes(c, none.micro_batch_size * none.seq_len, DType::kBF16);
  EXPECT_EQ(b.hbm.needed_bytes - a.hbm.needed_bytes, saved);
  EXPECT_EQ(*b.hbm.checkpoints_bytes, *a.hbm.checkpoints_bytes);
  EXPECT_EQ(b.hbm.activations_bytes.value_or(0), saved);
  EXPECT_FALSE(a.hbm.activations_bytes.has_value());
  const Result<Plan> back = plan_from_json(to_json(b));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->state.saved_activation_layers, 8);
  EXPECT_EQ(back->hbm.activations_bytes.value_or(0), saved);
  EXPECT_FALSE(to_json(a)["state"].contains("saved_activation_layers"));

  TrainJob too_many = none;
  too_many.saved_activation_layers = c.num_layers + 1;
  const Plan bad = make_plan(c, too_many, h100_host(), 10, false);
  EXPECT_FALSE(bad.fits);
  EXPECT_NE(bad.reason.find("placement.saved_activation_layers and mlp_recompute_layers are 33 "
                            "and 0 but the model has 32 layers"),
            std::string::npos)
      << bad.reason;
  // Layers that recompute only the MLP: the attention's projections off the GEMMs, its forward
  // share off the attention, and half the bytes of a whole layer's.
  TrainJob part = none;
  part.mlp_recompute_layers = 8;
  const Plan p = make_plan(c, part, h100_host(), 10, false);
  ASSERT_TRUE(p.fits) << p.reason;
  EXPECT_EQ(p.state.mlp_recompute_layers, 8);
  const double projections = 8.0 * c.hidden_size * (2.0 * c.q_dim() + 2.0 * c.kv_dim());
  EXPECT_NEAR(p.step.gemm_s / a.step.gemm_s, 1.0 - 2.0 * projections / (8.0 * layer_params), 1e-12);
  EXPECT_NEAR(p.step.attention_s, b.step.attention_s, 1e-12);  // the same 8 layers' forward
  const uint64_t part_bytes =
      8ull * none.grad_accum *
      BlockMath::saved_bytes(c, none.micro_batch_size * none.seq_len, DType::kBF16, false);
  EXPECT_EQ(p.hbm.needed_bytes - a.hbm.needed_bytes, part_bytes);
  EXPECT_LT(part_bytes, saved / 2);
  // Every layer's activations at 64K tokens a step do not fit 80 GB: HBM says so and names the key.
  TrainJob all = none;
  all.saved_activation_layers = c.num_layers;
  const Plan full = make_plan(c, all, h100_host(), 10, false);
  EXPECT_FALSE(full.fits);
  EXPECT_NE(full.reason.find("lower placement.saved_activation_layers"), std::string::npos)
      << full.reason;
}

// With -1 (the jobs' default) the plan chooses how many layers save their activations, whole or
// without the MLP's, against the HBM state tier's blocks: a compute-bound 7B step at 32K tokens
// on the H100 saves layers; each leg of the search alone gives no faster step.
TEST(SavedActivationsPlan, AutoSavesWhereTheStepGains) {
  const ModelConfig c = llama2_7b();
  TrainJob job = seven_b_job();
  job.hbm_state_blocks = -1;
  job.saved_activation_layers = job.mlp_recompute_layers = -1;
  TrainJob none = job;
  none.saved_activation_layers = none.mlp_recompute_layers = 0;
  const Plan with = make_plan(c, job, h100_host(), 10, false);
  const Plan without = make_plan(c, none, h100_host(), 10, false);
  ASSERT_TRUE(with.fits && without.fits) << with.reason << without.reason;
  EXPECT_GT(with.state.saved_activation_layers + with.state.mlp_recompute_layers, 0);
  EXPECT_LT(with.step.step_s, (1.0 - kTradeMargin) * without.step.step_s);
  // 1 GiB left to the libraries, as the HBM state tier leaves it.
  EXPECT_LE(with.hbm.needed_bytes + StreamingEngine::kHbmStateReserveBytes, with.hbm.free_bytes);
  EXPECT_NE(with.state.why.find("layers keep every activation in HBM but the MLP's ("),
            std::string::npos)
      << with.state.why;
  for (int k = 0; k <= c.num_layers; k += 4) {
    for (int j = 0; k + j <= c.num_layers; j += 4) {
      TrainJob t = job;
      t.saved_activation_layers = k;
      t.mlp_recompute_layers = j;
      const Plan p = make_plan(c, t, h100_host(), 10, false);
      if (p.fits) {
        EXPECT_GE(p.step.step_s, with.step.step_s * (1.0 - 0.01)) << k << ", " << j;
      }
    }
  }
  std::printf("7B 4x4x2048 on the H100: %d whole, %d without the MLP's: %.3f s against %.3f s\n",
              with.state.saved_activation_layers, with.state.mlp_recompute_layers, with.step.step_s,
              without.step.step_s);
}

}  // namespace
}  // namespace spillway
