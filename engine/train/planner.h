// Planner: before launch, what goes where and how fast it will run (docs/architecture.md, "The
// planner").
//
// From the model config, the job and this machine's measured figures (machine-probe.h), predicts
// the bytes of each category per tier (HBM, DRAM, SSD), whether they fit, and per step the time of
// compute, host↔device copies, SSD traffic and the CPU optimizer. These overlap in the layer-major
// schedule, so the step takes about the longest of them: that one is the bottleneck.
// Pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "data/dataset.h"
#include "events/plan.h"
#include "model/model-config.h"
#include "train/machine-probe.h"
#include "train/optimizer-state.h"
#include "train/streaming-engine.h"
#include "train/train-job.h"

namespace spillway {

// The streaming engine's configuration a job asks for (slots, micro-batch, accumulation, sequence,
// placement.hbm_state_blocks): what the planner plans and the trainer builds.
StreamingConfig streaming_config(const TrainJob& job);

// FLOPs of one training step of `tokens` tokens in sequences of `seq_len` (a multiply-add counts
// 2). model: 6·N·tokens + 6·L·T·hidden·tokens, the formula of ../shared/bench/README.md that the
// PyTorch peers report (PaLM's appendix B, the attention term halved for the causal mask), with N
// the parameters other than the input embedding table; a tied LM head still counts, its matmul
// runs, so a tied shape counts as the peers' untied copy of it. hardware: 8 instead of 6, because
// the engine recomputes each layer's forward in the backward (activation checkpointing), less
// that recompute's share of the layers for the last `saved_layers`, which keep their activations
// (StreamingConfig::saved_activation_layers), and the attention's part of it for the
// `mlp_recompute_layers` before them, which recompute only the MLP's gate and up projections.
struct StepFlops {
  double model = 0;
  double hardware = 0;
};
StepFlops step_flops(const ModelConfig& config, double tokens, int seq_len, int saved_layers = 0,
                     int mlp_recompute_layers = 0);

// A GPU step's compute, in four parts (five with attention biases), each at its own rate
// (MachineProbe::compute_flops is the probe's 8192³ bf16 GEMM, 816 TFLOPS on the H100;
// kGpuHbmBytesPerS below):
//  - the layers' GEMMs, 8·N_layers FLOPs per token with the recomputed forward, at
//    kGpuGemmEfficiency of the probe (the 7B layer shapes reach 0.77-0.98 of it, the README's
//    per-op table);
//  - attention, 8·(Σ_layers keys attended)·q_dim FLOPs per token (the causal half; a sliding
//    layer attends its window, ModelConfig::attended_keys), at kGpuAttentionEfficiency: our
//    deterministic kernel's forward+backward, 190 TFLOPS (the tensor-core kernels of head_dim 64
//    and 128; other head sizes, Gemma 3's 256, run the generic fp32 kernels, not yet measured);
//  - the LM head: its three GEMMs (6·vocab·hidden FLOPs per token) at the GEMM rate, the logits'
//    softmax traffic (16·vocab bytes per token) and, per chunk of lm_head_chunk tokens, a read and
//    write of the fp32 [vocab, hidden] weight gradient;
//  - the memory-bound ops between the GEMMs (RMSNorm, RoPE, SwiGLU, residual adds, casts; forward,
//    recompute and backward): kGpuElementwiseBytes per token, layer and unit of 2·hidden +
//    intermediate (4·hidden with Gemma's norms around attention and MLP, + q_dim + kv_dim with
//    per-head q/k norms). Fitted to the measured steps of tinyllama-1.1b and llama2-7b (plan
//    --measure, H100, 64K tokens per step: tests/bench/figures/calibration-h100.json); llama3.2-3b,
//    not in the fit, came within 2%;
//  - with q/k/v biases (Qwen2), the key bias's gradient (compute/cuda/attention-key-bias.cu):
//    head_dim double FMAs per (query head, query, visible key), on the FP64 units, at
//    kGpuKeyBiasFmasPerFlop of the probe's rate. attention-bench measured 1.678 ms for one
//    sequence of 2,048 tokens at 28 query heads of 128 (7.5e9 FMAs: 4.5e12 a second, 1.7 times
//    the attention's forward+backward of that shape) against a probe of 777 TFLOPS (H100,
//    2026-11-26): 1.50 s of qwen2.5-7b's 8.36 s step at 64K tokens, the 22% this model missed
//    before it counted them.
inline constexpr double kGpuGemmEfficiency = 0.85;
inline constexpr double kGpuAttentionEfficiency = 0.23;
// The attention's rate at other head sizes. head_dim 256 (Gemma 3): the flash kernels hold a
// 16 × 256 fp32 accumulator per warp (two in the dK/dV kernel) and spill; attention-bench measured
// 39.6 TFLOPS forward + backward on gemma3-1b's global layers and 55.4 with its 512-token window
// (b=1, t=4096, H100, 2026-11-27), and plan --measure of gemma3-1b at 8×4×2048 fits 0.04 of the
// probe. A head_dim the flash kernels do not take (not 64, 96, 128 or 256) runs on the generic
// fp32 kernels: 4.2-6.5 TFLOPS at head_dim 256 before the flash kernels took it, 0.006.
inline constexpr double kGpuAttentionEfficiencyHeadDim256 = 0.04;
inline constexpr double kGpuGenericAttentionEfficiency = 0.006;
// cuDNN's fused kernels (compute/cuda/cudnn-attention.h; MachineProbe::fused_attention), where
// they run a layer's forward and backward: attention-bench measured forward + backward at 424
// TFLOPS for llama2-7b's heads at 2048, 439 at 4096, 505 at 8192, 415 for qwen2.5-7b's GQA, 314
// for Phi-3's head_dim 96 and 228 for Gemma 3's 256 (H200, cuDNN 9.19, 2026-11-28), and the
// llama2-7b step at 8×4×2048 took 0.537 s less than on the module's kernels (5.682 s against
// 6.219 s), which these rates give within 10%. The planner counts half of a layer's attention
// FLOPs as its forward and recompute and half as its backward (backward = 2 × forward): cuDNN's
// forward runs any sequence and window, at about 2.2 times the module's (536-614 against 235-278
// TFLOPS, the ratio of these rates), and a backward cuDNN leaves to the module's kernel (a window
// narrower than the row, a sequence whose backward workspace exceeds cuda-workspace.h's bound)
// is planned at the module's rate.
// Packed rows run on cuDNN's ragged layout, each example a sequence of its own: attention-bench
// measured 223 TFLOPS forward + backward against the module's 134 on llama2-7b's heads at 4 × 2048
// cut into examples of 300-900 tokens (H200, 2026-11-28), so they are planned at
// kGpuFusedPackedAttentionSpeedup times the module's rate.
inline constexpr double kGpuFusedAttentionEfficiency = 0.50;
inline constexpr double kGpuFusedAttentionEfficiencyHeadDim256 = 0.28;
inline constexpr double kGpuFusedPackedAttentionSpeedup = 1.66;
inline double gpu_attention_efficiency(int head_dim, bool fused = false, bool packed = false) {
  const double own = head_dim == 64 || head_dim == 96 || head_dim == 128 ? kGpuAttentionEfficiency
                     : head_dim == 256 ? kGpuAttentionEfficiencyHeadDim256
                                       : kGpuGenericAttentionEfficiency;
  if (!fused) return own;
  if (packed) return kGpuFusedPackedAttentionSpeedup * own;
  return head_dim <= 128 ? kGpuFusedAttentionEfficiency : kGpuFusedAttentionEfficiencyHeadDim256;
}
inline constexpr double kGpuElementwiseBytes = 33;
inline constexpr double kGpuKeyBiasFmasPerFlop = 0.00577;

// A CPU step's compute, in three parts, each at a rate probed on this machine (machine-probe.h):
//  - the GEMMs (layers and LM head, the forward recomputed in the backward: 8 FLOPs per matmul
//    parameter and token) at MachineProbe::cpu_gemm_flops, sgemm timed at the job's own layer
//    shapes (small hidden sizes run well below the 512³ rate of compute_flops, which stands in
//    for layers too large to time);
//  - the causal attention per score (one query-key pair of one query head, per layer and
//    sequence: ModelConfig::attention_scores, a sliding layer's within its window) at
//    cpu_attention_s_per_score, the CPU backend's own attention kernels timed at the
//    job's head_dim, grouped-query ratio and sequence length (up to 1,024). Its exponentials, not
//    its FLOPs, bound it at small head sizes: counted as FLOPs at the 512³ rate, the whole step was
//    4.9 times too fast for stories260K (head_dim 8) on 2 cores. Without that probe (a plan read
//    from an older run) it falls back to FLOPs and the step says it is uncalibrated
//    (PlanStep::calibrated);
//  - the element-wise ops (RMSNorm, RoPE, SwiGLU, residual adds, head transposes, the logits'
//    softmax; forward, recompute and backward): kCpuElementwiseBytes per token and unit of
//    L·(2·hidden + intermediate) + vocab (per layer as the GPU's above), at the host's measured
//    memory bandwidth. Set from perf
//    profiles of plan --measure on the 2-core VM, where these ops took 10-15% of the step of
//    stories260K and llama-mha-tiny (the rest: sgemm and the attention kernels).
// Timings and the calibration runs: README, "The CPU step";
// tests/bench/figures/calibration-cpu.json. The step is calibrated (PlanStep::calibrated) only on
// up to kCpuCalibratedThreads threads: on more, the probes load fewer cores than the step does, and
// on a 16-core host the measured step was 0.29-1.11 of the prediction.
inline constexpr double kCpuElementwiseBytes = 130;
inline constexpr int kCpuCalibratedThreads = 4;

// Memory the process holds whatever the job: on a GPU the CUDA context, cuBLASLt's and cuDNN's
// handles and our kernels in HBM (350-560 MB measured on the H100 with CUDA 13), and the CUDA
// libraries' host memory in DRAM (1.46 GB, the same for four models); on the CPU backend the
// libraries and the data (0.27 GB for a 6.5M-parameter model on the 2-core VM). It is already
// outside the free memory a probe reads, so the fit check leaves it out; the predicted peaks
// (run-figures.h, predicted_figures) add it.
inline constexpr uint64_t kGpuRuntimeHbmBytes = 450'000'000;
inline constexpr uint64_t kGpuRuntimeDramBytes = 1'460'000'000;
inline constexpr uint64_t kCpuRuntimeDramBytes = 270'000'000;

// HBM bandwidth for what a GPU step does per micro-batch whatever its size: each layer's backward
// adds its weight gradient into the fp32 gradient buffer (cuBLASLt, beta 1), reading and writing
// 8 B per parameter per micro-batch. 3.0 TB/s is the H100's measured device copy
// (../shared/bench/README.md). At 2,048 tokens per micro-batch this is about 9% of a 7B step's
// compute, at 16,384 about 1%: why small micro-batches waste the GPU.
inline constexpr double kGpuHbmBytesPerS = 3.0e12;

// Each GPU's host link while the other GPUs of a data-parallel step copy too, as a fraction of
// its rate alone (the probe's, measured on one GPU): on the lent x2 H100 host (issue 23's table,
// 2026-11-27) host→GPU 50.8 + 50.9 GB/s with both at once against 54.8 alone, GPU→host 51.1 +
// 51.1 against 55.2: 0.93 both ways. Each GPU has its own PCIe link; they share the host's memory.
inline constexpr double kSharedLinkEfficiency = 0.93;

// AdamW's memory traffic per parameter: read the fp32 master, gradient and both moments, write
// the master and the moments. The CPU's without a measured rate (at host bandwidth), and the
// GPU's over the HBM state tier's blocks (at kGpuHbmBytesPerS).
inline constexpr double kAdamwBytesPerParam = 28;

// Where each block's master weights and AdamW moments go on the host (train/optimizer-state.h,
// BlockTiers; docs/architecture.md, "Memory tiers"), and why. placement.optimizer "dram" or "ssd"
// places every block's moments as it says; placement.master "ssd" takes every block's master and
// moments to the SSD. With placement.optimizer "auto" the moments go to the fastest tier with
// room: DRAM for as many of the first blocks as fit in `dram_free_bytes` (placement.dram_cap_bytes,
// else what is available; 0: unknown, every block in DRAM) beside the fp32 master weights and
// `other_dram_bytes` (the gradients, the checkpoints the host keeps, the CPU backend's arena), the
// SSD for the rest. A prefix because the CPU updates the blocks in forward order while the next
// forward waits per block for its update: the DRAM blocks come first and their updates are fast,
// and the SSD's first read overlaps them. placement.master "auto" keeps the master in DRAM: on the
// SSD it frees no DRAM while the engine streams an fp32 copy from there (README, "The SSD tier"),
// only traffic; only when DRAM cannot hold even the master and the rest does it go to the SSD
// with the moments (and the plan says the job does not fit).
struct TierPlacement {
  BlockTiers blocks;
  std::string why;  // one line: PlanState::host_why
  bool optimizer_on_ssd() const { return blocks.any_on_ssd(); }
  bool master_on_ssd() const { return blocks.ssd > 0; }
};
// `held` ([block]; empty: every block): past one machine the blocks this machine holds, the only
// ones whose state it places (the counts still run in block order over every block).
TierPlacement place_tiers(const ParameterLayout& layout, const TrainJob& job,
                          uint64_t dram_free_bytes, uint64_t other_dram_bytes,
                          const std::vector<bool>& held = {});
// The placement a plan chose (Plan::state's counts), as the run builds it.
TierPlacement plan_placement(const Plan& plan);

// kInvalidArgument when the job's seq_len is beyond the model's max_position_embeddings (a plan
// that does not fit says the same).
Status check_positions(const ModelConfig& config, const TrainJob& job);

// What a run's data does to its steps (data_shape): `fill`, the share of a step's positions that
// are the data's tokens rather than padding (what tokens/s counts); `attention`, the share of the
// full rows' causal attention the kernels compute: a packed row attends within each example (its
// padding one more), Σ length² / seq_len² of it, a padded row all of it.
struct DataShape {
  double fill = 1.0;
  double attention = 1.0;
  bool packed = false;  // rows pack examples (Dataset::packed): attention's packed rates
};
// The shape of `ds`'s sequences at ds.seq_len() (an empty dataset: DataShape{}).
DataShape data_shape(const Dataset& ds);

// The plan (events/plan.h; to_json gives `spillway-worker plan --json`, schema in the README). For
// a GPU backend (machine.backend_facts().gpu) the step overlaps compute, the host link and the CPU
// AdamW: it takes the longest of compute and link, plus the optimizer's visible part (the gradient
// norm, and what of AdamW outlasts the next step's forward); `machine` should then come from
// probe_device and measure_adamw, or the compute and link figures are the host's. `suggestion`
// holds suggest_batch() for the same job and machine unless `with_suggestion` is false (it plans up
// to 320 jobs, twice with the HBM state tier, each with the saved activations' search: 0.6 s for
// a 7B model on the dev VM, where the plan alone takes 3 ms; callers run it off the GUI thread).
//
// Saved activations (StreamingConfig::saved_activation_layers, mlp_recompute_layers;
// docs/architecture.md, "The step"): with either job count -1 on a GPU whose free memory is
// known, the plan searches the counts by predicted step time against the HBM state tier and the
// checkpoints (plan_job in planner.cpp; kTradeMargin as below), records them in PlanState and
// says why in PlanState::why. A saved layer's recompute leaves the step model: its GEMMs but the
// down projection (which the recompute skips), a quarter of its attention and element-wise passes;
// a layer that recomputes only the MLP keeps the gate and up GEMMs and the activation.
//
// The HBM state tier (Plan::state): as many of the first blocks as
// StreamingEngine::hbm_state_blocks places for job.hbm_state_blocks on the probe's free device
// memory (or job.device_memory_bytes); an explicit count that does not fit beside streaming makes
// the plan not fit. Their state adds 16 B/param to HBM (master, gradients, moments); they cross the
// link in neither direction; the GPU updates them (PlanStep::gpu_adamw_s, kAdamwBytesPerParam at
// kGpuHbmBytesPerS, part of compute) and the CPU's AdamW (PlanStep::adamw_s) only the other blocks.
// How long the next forward waits for the CPU then comes from the per-block timeline after the
// backward (docs/architecture.md, "The planner"): the GPU's AdamW, then the forward, a quarter of
// the step's compute (or link) shared among the blocks by their FLOPs, the tier's blocks first;
// the CPU updating the rest in forward order, each block's forward starting once its update is
// done. With no block in the tier the same timeline: where the CPU is slower per block than the
// forward, AdamW less the forward plus the head's forward, which follows the last update.
//
// The trade (docs/architecture.md, "The HBM state tier"): with job.hbm_state_blocks -1 on one GPU
// whose free memory is known, HBM beside streaming holds checkpoints and blocks' state, and the
// plan chooses the split by predicted step time. The candidates: every checkpoint that fits kept
// on the device, with as many blocks as the engine's rule places beside them; then, for each
// larger count of blocks, the most layers' checkpoints (the first, in forward order) that leave
// it room (StreamingEngine::hbm_state_blocks with StreamingConfig::device_checkpoint_layers). Each
// is planned with the step model: a spilled checkpoint crosses the link down once and up twice
// (the head's input up once), a block in HBM takes its weights and gradient off the link and its
// update off the CPU. A candidate that moves checkpoints wins when its step is shorter than
// (1 - kTradeMargin) of every checkpoint's on the device, the fastest of them; else (ties
// included) the checkpoints stay. The plan records the split (PlanState::device_checkpoint_layers,
// the trainer builds it) and why: what moved and the two step times, or what the best move would
// have given. An explicit placement.hbm_state_blocks is not traded: its checkpoints stay on the
// device while they fit.
//
// Data parallel (Plan::devices; docs/architecture.md, "The planner"): N = placement.devices
// resolved against machine.gpus (job::resolve_devices; a selection that asks for more GPUs than
// there are does not fit, with its message; machine.gpus 0 on a GPU backend, not counted: the
// selection as it asks), on the CPU backend a count of CPU ranks. As DataParallelEngine runs it,
// each GPU takes the job's micro_batch_size × grad_accum, so the step has N times the tokens and
// each GPU's compute is one GPU's; each uploads every master whole over its own link (at
// kSharedLinkEfficiency of the probe's rate) and downloads its 1/N share of every gradient
// (plan_link_bytes with data_parallel_ranks N: the PlanStep bytes are one GPU's); each block's
// reduce-scatter, 4·numel·(N-1)/N bytes per GPU (the buffer padded to a multiple of N floats) at
// machine.nccl_bus_bytes_per_s (kNcclBusBytesPerSPcie when 0), overlaps the next block's backward
// and what it does not hide (the embedding's at least) adds to the step (PlanDevices::nccl_s).
// HBM is each GPU's (no state tier with N > 1: an explicit placement.hbm_state_blocks does not
// fit, as the engine refuses it); DRAM holds one copy of the state, each GPU's spilled
// checkpoints, and on the CPU backend each rank's arena, whose compute shares the cores (N times
// one rank's). The CPU's AdamW is the same parameters: unchanged.
//
// Past one machine (MachineProbe::machines M > 1; docs/architecture.md, "Past one machine") the
// step has M times the tokens again, and each machine holds its blocks' state (block-owners.h):
// DRAM, the SSD and AdamW are those of MachineProbe::process's blocks (-1: the machine holding
// the most), the host link's bytes those of the GPU carrying the most, and the network carries
// each block's reduce (4·numel bytes per GPU, PlanDevices::nccl_s as above) and its weights'
// broadcasts (act_dtype, as often as one GPU would upload them), at the slower of the NCCL bus
// and MachineProbe::network_bytes_per_s (kNetworkBytesPerS when 0), beside compute.
//
// `data`, when the run's dataset is known (the trainer's plan; `plan` without the data assumes
// DataShape{}), scales the attention by the share the kernels compute and counts tokens/s as the
// data's tokens, not padding.
//
// kTradeMargin: a predicted gain smaller than this share of the step is within the step model's
// error (the calibration runs of tests/bench/figures come within 2.2%), and moving checkpoints
// to the host puts the link and pinned memory at risk for nothing: a tie.
inline constexpr double kTradeMargin = 0.02;
Plan make_plan(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine,
               int64_t total_steps, bool with_suggestion = true, const DataShape& data = {});

// The micro-batch and gradient accumulation this planner suggests for the job on this machine,
// the job's seq_len and placement and everything else kept (with placement.hbm_state_blocks -1,
// each candidate with make_plan's trade between its checkpoints and blocks in HBM, whose split
// the suggestion records). On a GPU it plans every micro_batch_size in
// {1, 2, 4, 8, 16} (up to the first whose one micro-batch does not fit HBM) with grad_accum 1..64,
// with make_plan's step model, and takes among those that fit the smallest tokens per step whose
// predicted tokens/s is within kSuggestWithin of the best one's (a larger batch changes the
// optimisation: take the smallest that keeps the GPU busy), preferring checkpoints kept in HBM,
// then the larger micro-batch. On the CPU backend compute and AdamW share the cores, so there is
// nothing to hide: the job's own values, or when they do not fit, the largest micro-batch that
// fits at the job's tokens per step, else the smallest step that fits. When the chosen step keeps
// blocks' state in HBM and the same search with every block in DRAM would take a larger step,
// `why` says so; when the job uses fewer GPUs than machine.gpus, it says what placement.devices
// "all" would give at the chosen batch. tokens_per_step is the whole step's, over every GPU.
// When nothing fits, fits is false and `why` gives the smallest candidate's reason.
inline constexpr double kSuggestWithin = 0.05;
PlanSuggestion suggest_batch(const ModelConfig& config, const TrainJob& job,
                             const MachineProbe& machine);

}  // namespace spillway
