// The per-op table of `spillway-worker bench --ops` (README, "Per op"): each op family's time in
// one training step (OpTimes, TimedBackend), its FLOPs or bytes, the rate it reached and that rate
// as a fraction of a ceiling measured in the same process: a device-to-device copy for the
// memory-bound ops, a large GEMM through the backend (MachineProbe::compute_flops, the planner's
// reference) for the GEMMs, the attention and the LM head. tests/bench/op_table.py joins the JSON
// with the peers' ceilings (../shared/bench/op_ceilings.py: cuBLAS at the 7B layer shapes, cuDNN's
// fused attention).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "compute/backend.h"
#include "core/status.h"
#include "worker/op-times.h"

namespace spillway::worker {

struct OpCeilings {
  // copy_d2d of copy_bytes: bytes read plus written per second (bench-gpu-ops' reference).
  double copy_bytes_per_s = 0;
  uint64_t copy_bytes = 0;
  // linear_forward of [gemm_n, gemm_n] · [gemm_n, gemm_n]ᵀ in the act dtype: FLOP/s (probe_device).
  double gemm_flops_per_s = 0;
  int gemm_n = 0;
};

// Measures the ceilings on `backend`'s stream 0, before an engine hands it its workspace. On a GPU
// a copy of 1 GiB and the 8192³ GEMM (probe_device's); on the CPU backend a copy of 64 MiB (one
// memcpy) and a 512³ sgemm. kOutOfMemory when the buffers do not fit.
Result<OpCeilings> measure_op_ceilings(compute::Backend& backend);

// The "ops" array of the JSON line, one object per family that ran, in OpFamily order: op, calls,
// s (device seconds in the step), flops or bytes, rate and ceiling (TFLOPS or GB/s, "unit"),
// fraction (rate / ceiling), shapes, and overlapped (true for ops off the compute stream, which
// the sum leaves out: the weights' conversions on the H2D stream).
nlohmann::json ops_json(const std::vector<OpFamilyTime>& families, const OpCeilings& ceilings);
// The sum row: {"s": the compute stream's ops summed, "step_s": the timed steps' median,
// "profiled_step_s": the profiled step's own time (the host's, from its start until its last op
// finished), "other_s": profiled_step_s - s, the device idle between the ops (waits for weights,
// checkpoints, the optimizer, the host's launches) and the profiling's own overhead}.
nlohmann::json ops_sum_json(const nlohmann::json& ops, double step_s, double profiled_step_s);

// The table under bench's figures, from a result line with "ops".
void print_ops_table(std::ostream& out, const nlohmann::json& result);

}  // namespace spillway::worker
