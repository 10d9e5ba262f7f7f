// What the planner's tests plan: the one-H100 host of the bench machines as `spillway-worker probe`
// measured it (../shared/bench/README.md), its two-GPU sibling, and the llama2-7b job of the
// calibration runs. One copy for the planner, plan-command and job-file fuzz tests.
#pragma once

#include "train/machine-probe.h"
#include "train/train-job.h"

namespace spillway::testing {

// One H100 80 GB, 16 cores, 125 GiB (2026-11-27's probe, rounded).
inline MachineProbe h100_host() {
  MachineProbe m;
  m.backend = "cuda";
  m.device = "NVIDIA H100 80GB HBM3";
  m.compute_flops = 790e12;
  m.h2d_bytes_per_s = m.d2h_bytes_per_s = 55e9;
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

// Two of them on one host joined by NVLink, 251 GiB.
inline MachineProbe two_h100_host() {
  MachineProbe m = h100_host();
  m.dram_total_bytes = 251ull << 30;
  m.dram_available_bytes = 245ull << 30;
  m.gpus = 2;
  m.nccl_bus_bytes_per_s = kNcclBusBytesPerSNvlink;
  return m;
}

// 4 × 4 × 2048 tokens a step on each of `gpus` GPUs with every block's state in DRAM
// (placement.hbm_state_blocks 0) and every layer recomputed (placement.saved_activation_layers
// 0): the placement of the calibration runs; the HBM state tier's and saved activations' tests set
// them.
inline TrainJob seven_b_job(int gpus = 1) {
  TrainJob job;
  job.backend = "cuda";
  job.hbm_state_blocks = 0;
  job.saved_activation_layers = 0;
  job.mlp_recompute_layers = 0;
  job.micro_batch_size = 4;
  job.grad_accum = 4;
  job.seq_len = 2048;
  job.devices.count = gpus;
  return job;
}

}  // namespace spillway::testing
