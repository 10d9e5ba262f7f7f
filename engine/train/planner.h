// Planner: before launch, what goes where and how fast it will run (DESIGN.md, "Planner").
//
// From the model config, the job and this machine's measured bandwidths (probe_machine), predicts
// the bytes of each category per tier (HBM, DRAM, SSD), whether they fit, and per step the time of
// compute, host↔device copies, SSD traffic and the CPU optimizer. These overlap in the layer-major
// schedule, so the step takes about the longest of them: that one is the bottleneck.
// Pure functions apart from probe_machine (which runs ~0.3 s of measurements).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/model-config.h"
#include "train/train-job.h"

namespace spillway {

struct MachineProbe {
  double compute_flops = 0;   // sustained FLOP/s of the backend's GEMMs
  double h2d_bytes_per_s = 0; // host→device link (memcpy on the CPU backend)
  double host_mem_bytes_per_s = 0;  // DRAM bandwidth as the optimizer sees it
  double ssd_bytes_per_s = 0;  // 0: not measured (a typical NVMe figure is assumed)
  uint64_t dram_total_bytes = 0, dram_available_bytes = 0;
  uint64_t device_total_bytes = 0;  // 0: unbounded (CPU backend without a cap)
  uint64_t ssd_free_bytes = 0, ssd_total_bytes = 0;
  std::string backend = "cpu";
};

// Measures this machine (CPU backend): a 512³ sgemm, memcpy and a streaming triad; reads
// /proc/meminfo and statvfs(ssd_dir).
MachineProbe probe_machine(const std::string& ssd_dir);

// Where the master weights and AdamW moments go: the job's choice, or for "auto" DRAM up to
// dram_cap_bytes (else what is available) with the biggest categories spilled to the SSD first.
// The moments go to the SSD before the master weights; master on the SSD implies the moments too.
struct TierPlacement {
  bool optimizer_on_ssd = false;
  bool master_on_ssd = false;
};
TierPlacement place_tiers(const ModelConfig& config, const TrainJob& job, uint64_t dram_available_bytes);

// The plan as the JSON of `spillway-worker plan --json` (schema in the README).
nlohmann::json make_plan(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine,
                         int64_t total_steps);

}  // namespace spillway
