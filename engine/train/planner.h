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

// Where the master weights and AdamW moments go: the job's choice, or for "auto" DRAM up to
// dram_cap_bytes (else what is available) with the biggest categories spilled to the SSD first.
// The moments go to the SSD before the master weights; master on the SSD implies the moments too.
struct TierPlacement {
  bool optimizer_on_ssd = false;
  bool master_on_ssd = false;
};
TierPlacement place_tiers(const ModelConfig& config, const TrainJob& job, uint64_t dram_available_bytes);

// The plan as the JSON of `spillway-worker plan --json` (schema in the README). For a GPU backend
// (machine.backend != "cpu") the step overlaps compute, the host link and the CPU AdamW: it takes
// the longest of compute and link, plus the optimizer's visible part (the gradient norm, and what
// of AdamW outlasts the next step's forward); `machine` should then come from probe_device and
// measure_adamw, or the compute and link figures are the host's.
nlohmann::json make_plan(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine,
                         int64_t total_steps);

}  // namespace spillway
