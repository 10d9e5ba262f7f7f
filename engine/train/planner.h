// Planner: before launch, what goes where and how fast it will run (DESIGN.md, "Planner").
//
// From the model config, the job and this machine's measured figures (machine-probe.h), predicts
// the bytes of each category per tier (HBM, DRAM, SSD), whether they fit, and per step the time of
// compute, host↔device copies, SSD traffic and the CPU optimizer. These overlap in the layer-major
// schedule, so the step takes about the longest of them: that one is the bottleneck.
// Pure functions.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/model-config.h"
#include "train/machine-probe.h"
#include "train/train-job.h"

namespace spillway {

// FLOPs of one training step of `tokens` tokens in sequences of `seq_len` (a multiply-add counts 2).
// model: 6·N·tokens + 6·L·T·hidden·tokens, the formula of ../shared/bench/README.md that the
// PyTorch peers report (PaLM's appendix B, the attention term halved for the causal mask), with N
// the parameters other than the input embedding table; a tied LM head still counts, its matmul
// runs, so a tied shape counts as the peers' untied copy of it. hardware: 8 instead of 6, because
// the engine recomputes each layer's forward in the backward (activation checkpointing).
struct StepFlops {
  double model = 0;
  double hardware = 0;
};
StepFlops step_flops(const ModelConfig& config, double tokens, int seq_len);

// The part of a GPU's measured GEMM rate (MachineProbe::compute_flops, an 8192³ bf16 GEMM) that a
// training step sustains: the 7B layers' GEMMs reach 87-100% of it (../shared/bench/README.md,
// op_ceilings), attention forward+backward about half but it is ~4% of the FLOPs at T=2048, and
// the memory-bound ops between the GEMMs (norms, RoPE, SwiGLU, casts, the LM head's softmax) take
// roughly a fifth of the time.
inline constexpr double kGpuComputeEfficiency = 0.7;

// HBM bandwidth for what a GPU step does per micro-batch whatever its size: each layer's backward
// adds its weight gradient into the fp32 gradient buffer (cuBLASLt, beta 1), reading and writing
// 8 B per parameter per micro-batch. 3.0 TB/s is the H100's measured device copy
// (../shared/bench/README.md). At 2,048 tokens per micro-batch this is about 9% of a 7B step's
// compute, at 16,384 about 1%: why small micro-batches waste the GPU.
inline constexpr double kGpuHbmBytesPerS = 3.0e12;

// Where the master weights and AdamW moments go: the job's choice, or for "auto" DRAM up to
// dram_cap_bytes (else what is available) with the biggest categories spilled to the SSD first.
// The moments go to the SSD before the master weights; master on the SSD implies the moments too.
struct TierPlacement {
  bool optimizer_on_ssd = false;
  bool master_on_ssd = false;
};
TierPlacement place_tiers(const ModelConfig& config, const TrainJob& job, uint64_t dram_available_bytes);

// kInvalidArgument when the job's seq_len is beyond the model's max_position_embeddings (a plan
// that does not fit says the same).
Status check_positions(const ModelConfig& config, const TrainJob& job);

// The plan as the JSON of `spillway-worker plan --json` (schema in the README). For a GPU backend
// (machine.backend != "cpu") the step overlaps compute, the host link and the CPU AdamW: it takes
// the longest of compute and link, plus the optimizer's visible part (the gradient norm, and what
// of AdamW outlasts the next step's forward); `machine` should then come from probe_device and
// measure_adamw, or the compute and link figures are the host's. "suggestion" holds
// suggest_batch() for the same job and machine unless `with_suggestion` is false (it plans up to
// 320 jobs: about 60 ms for a 7B model).
nlohmann::json make_plan(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine,
                         int64_t total_steps, bool with_suggestion = true);

// The micro-batch and gradient accumulation this planner suggests for the job on this machine,
// the job's seq_len and everything else kept. On a GPU it plans every micro_batch_size in
// {1, 2, 4, 8, 16} (up to the first whose one micro-batch does not fit HBM) with grad_accum 1..64,
// with make_plan's step model, and takes among those that fit the smallest tokens per step whose
// predicted tokens/s is within kSuggestWithin of the best one's (a larger batch changes the
// optimisation: take the smallest that keeps the GPU busy), preferring checkpoints kept in HBM,
// then the larger micro-batch. On the CPU backend compute and AdamW share the cores, so there is
// nothing to hide: the job's own values, or when they do not fit, the largest micro-batch that
// fits at the job's tokens per step, else the smallest step that fits.
// Returns {"fits", "micro_batch_size", "grad_accum", "tokens_per_step", "step_s", "tokens_per_s",
// "model_tflops", "checkpoints_on_device", "hbm_needed_bytes", "hbm_free_bytes", "same_as_job",
// "why"}; when nothing fits, {"fits": false, "why"} with the smallest candidate's reason.
inline constexpr double kSuggestWithin = 0.05;
nlohmann::json suggest_batch(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine);

}  // namespace spillway
