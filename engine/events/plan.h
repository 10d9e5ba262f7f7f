// Plan: what the planner predicts for a job on a machine (engine/train/planner.h, make_plan) — per
// tier the bytes of each category and whether they fit, the step's time by part, its bottleneck,
// and the micro-batch the planner would suggest. One struct for its one format: the JSON of
// `spillway-worker plan --json`, of the run's "plan" event in events.jsonl and of runs.db's plan
// (README, "Plan"). to_json writes it, plan_from_json reads it back (leveldb's VersionEdit
// EncodeTo/DecodeFrom); nobody else names its keys. The worker (plan, bench), the trainer, run
// figures and the GUI (New run's plan, Live's link capacities and timeline) all go through it.
//
// A plain copyable value; no shared state. Units are in the names: _bytes, _s, _per_s, _flops.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace spillway {

// One memory tier of the plan (HBM, DRAM or SSD). A category the tier never holds is absent
// (nullopt), not 0: HBM has a master and an optimizer category only with the HBM state tier
// (PlanState), the SSD only those two.
struct PlanTier {
  // activations_bytes: the saved activations (HBM only; telemetry's Category::kActivations).
  std::optional<uint64_t> weights_bytes, master_bytes, gradients_bytes, optimizer_bytes,
      checkpoints_bytes, workspace_bytes, activations_bytes;
  uint64_t needed_bytes = 0;  // what the job needs there
  uint64_t total_bytes =
      0;  // the tier's size; 0: unbounded (the CPU backend's device without a cap)
  uint64_t free_bytes = 0;  // what the job may have
  // Memory the process holds there whatever the job (CUDA context, libraries); absent on the SSD.
  std::optional<uint64_t> runtime_bytes;
};

// The model as the planner counted it.
struct PlanModel {
  std::string architecture;  // "LlamaForCausalLM", ...
  double parameters = 0;     // without padding
  int layers = 0, hidden_size = 0, vocab_size = 0;
};

// The machine's figures the plan was made with (engine/train/machine-probe.h, MachineProbe).
struct PlanMachine {
  double compute_flops = 0, h2d_bytes_per_s = 0, d2h_bytes_per_s = 0, duplex_bytes_per_s = 0,
         host_mem_bytes_per_s = 0, adamw_params_per_s = 0, ssd_bytes_per_s = 0, cpu_gemm_flops = 0,
         cpu_attention_s_per_score = 0, cpu_stream_bytes_per_s = 0, cpu_threads = 0;
  // The GPUs present (0: none, or not counted) and NCCL's reduce-scatter bus bandwidth between
  // them (0: not measured); absent in plans written before data parallel.
  double gpus = 0, nccl_bus_bytes_per_s = 0;
  // Past one machine: the network each machine has (MachineProbe::network_bytes_per_s; 0 and
  // absent on one machine).
  double network_bytes_per_s = 0;
  std::string device;     // empty when no device was probed
  std::string attention;  // MachineProbe::attention; absent in plans before cuDNN attention
};

// One optimizer step as predicted: its parts in seconds (compute split into the GPU's GEMMs,
// attention, LM head, element-wise ops, key bias, gradient accumulation and the GPU's AdamW of the
// HBM state tier), the bytes over the host link each way, and the whole step. adamw_s is the CPU's
// AdamW (the blocks outside the HBM state tier). With several GPUs (PlanDevices) the compute and
// link figures are each GPU's (each has its own link; h2d_bytes and d2h_bytes cross one GPU's),
// tokens, flops and tokens_per_s the whole step's over every GPU.
struct PlanStep {
  double tokens = 0, flops = 0, model_flops = 0;
  double compute_s = 0, gemm_s = 0, attention_s = 0, lm_head_s = 0, elementwise_s = 0,
         key_bias_s = 0, accumulate_s = 0, gpu_adamw_s = 0;
  double h2d_bytes = 0, d2h_bytes = 0, h2d_s = 0, d2h_s = 0, link_s = 0, ssd_s = 0;
  double grad_norm_s = 0, adamw_s = 0, optimizer_s = 0, optimizer_visible_s = 0;
  double step_s = 0, tokens_per_s = 0, model_tflops = 0, eta_s = 0;
  std::string bottleneck;  // "compute", "h2d", "ssd", "optimizer", "nccl", "network", "host memory"
  int64_t total_steps = 0;
  // Whether every rate the step time rests on was measured on this machine; false: the time is a
  // rough estimate (a CPU plan without the attention probe; planner.h, "CPU step").
  bool calibrated = true;
  // The run's data (planner.h, DataShape): the share of the positions that are its tokens (what
  // tokens_per_s counts) and of the rows' attention the kernels compute. 1 when the plan did not
  // know the data, and in plans written before.
  double data_fill = 1.0, data_attention = 1.0;
};

// The micro-batch and gradient accumulation the planner suggests (planner.h, suggest_batch).
// When nothing fits only `fits` (false) and `why` are set.
// Where the blocks' training state lives (docs/architecture.md, "The HBM state tier"): the fp32
// master weights, gradients and AdamW moments of the first `hbm_blocks` blocks in forward order
// (embedding, layers, head) stay in HBM and are updated there by the GPU's AdamW; the other blocks'
// state is in DRAM or on the SSD, as the dram and ssd tiers say, updated by the CPU's.
// On the host, every block's master and moments (the HBM tier's blocks a copy refreshed for
// checkpoints) are in one of three tiers, counts in block order (train/optimizer-state.h,
// BlockTiers): the first dram_blocks in DRAM, the next ssd_moments_blocks with the moments on the
// SSD, the last ssd_blocks with master and moments there. Plans written before the mix have none
// of the three: read as 0, unknown.
struct PlanState {
  int blocks = 0;          // embedding + layers + head
  int hbm_blocks = 0;      // the first hbm_blocks of them in HBM
  uint64_t hbm_bytes = 0;  // their state there: 16 bytes a parameter
  std::string why;         // one line: why that many (and, when the planner traded
                           // checkpoints for blocks, what it weighed)
  // The layers whose checkpoints the plan keeps in HBM (StreamingConfig::device_checkpoint_layers),
  // the first of model.layers + 1 (the head's input counts as one): every one, fewer when the
  // planner moved the others' to pinned host memory to make room for more blocks' state (planner.h,
  // "the trade"), 0 when they do not fit and all go there. -1: not recorded (plans written before).
  int device_checkpoint_layers = -1;
  // The last layers that keep their activations in HBM and skip the recompute
  // (StreamingConfig::saved_activation_layers; planner.h, "saved activations"); 0 in plans written
  // before.
  int saved_activation_layers = 0;
  // The layers before those that keep all but the MLP's intermediates
  // (StreamingConfig::mlp_recompute_layers); 0 in plans written before.
  int mlp_recompute_layers = 0;
  int dram_blocks = 0, ssd_moments_blocks = 0, ssd_blocks = 0;
  std::string host_why;  // one line: which blocks sit in which host tier, and why
};

// The GPUs of a data-parallel run (docs/architecture.md, "Data parallel"): how many and which
// (CUDA indices, rank order), and the time their gradient reduce-scatters add to the step (NCCL,
// the part the backward does not hide). One GPU: count 1, indices [0] (or the one it names).
struct PlanDevices {
  int count = 1;
  std::vector<int> indices;  // [count]; empty in plans written before data parallel
  double nccl_s = 0;         // exposed NCCL time a step
  double nccl_bytes = 0;     // bytes each GPU sends over NVLink/PCIe a step for the reduce
  // Past one machine (absent on one): the machines, each with `count` GPUs, and the bytes each
  // sends over the network a step for the all-reduce of the gradients.
  int machines = 1;
  double network_bytes = 0;
};

struct PlanSuggestion {
  bool fits = false;
  int micro_batch_size = 0, grad_accum = 0;
  int64_t tokens_per_step = 0;
  double step_s = 0, tokens_per_s = 0, model_tflops = 0;
  bool checkpoints_on_device = false;
  int hbm_state_blocks = 0;  // blocks of the HBM state tier at that batch (PlanState::hbm_blocks)
  int device_checkpoint_layers = -1;  // PlanState::device_checkpoint_layers at that batch
  int saved_activation_layers = 0;    // PlanState::saved_activation_layers at that batch
  int mlp_recompute_layers = 0;       // PlanState::mlp_recompute_layers at that batch
  uint64_t hbm_needed_bytes = 0, hbm_free_bytes = 0;
  bool same_as_job = false;
  std::string why;  // one line: what a smaller step loses to, where the checkpoints go
};

struct Plan {
  bool fits = false;
  std::string reason;   // when !fits: what does not fit and what to change
  std::string backend;  // the backend's name, as the worker reports it ("cpu", "cuda")
  // `spillway-worker plan`: why that backend (placement.backend auto, and no GPU); absent in a
  // run's plan.
  std::optional<std::string> backend_reason;
  int micro_batch_size = 0, grad_accum = 0, seq_len = 0;
  // "checkpoints": "device" when the checkpoints the plan keeps in HBM fit there (every one, or
  // the first state.device_checkpoint_layers layers'), "host" when they do not and all spill.
  bool checkpoints_on_device = false;
  PlanModel model;
  PlanMachine machine;
  PlanTier hbm, dram, ssd;
  PlanState state;      // "state": where each block's master, gradients and moments live
  PlanDevices devices;  // "devices": the GPUs the step is spread over
  PlanStep step;
  std::optional<PlanSuggestion> suggestion;

  // Whether the plan is for the CPU backend, whose "device" is an arena in DRAM: the one place that
  // reads the backend's name, so that readers ask this instead of comparing names.
  bool on_cpu() const;
};

// The plan's JSON: an object, its keys sorted (nlohmann::json), byte for byte what make_plan wrote
// before the plan was typed.
nlohmann::json to_json(const Plan& plan);
nlohmann::json to_json(const PlanSuggestion& suggestion);

// Reads a plan written by to_json (or by an older worker). kCorrupt when `j` is not an object, or
// when `whole` and it lacks "fits" or "tiers" (a plan to show; the Live page takes what a plan
// event has); any other field that is missing or of another type reads as its default (0, "",
// false), so a damaged events.jsonl never throws.
Result<Plan> plan_from_json(const nlohmann::json& j, bool whole = true);
PlanSuggestion plan_suggestion_from_json(const nlohmann::json& j);

}  // namespace spillway
