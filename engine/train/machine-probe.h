// MachineProbe: what this machine can do, measured, for the planner (planner.h) and the worker's
// `probe` command.
//
// probe_machine measures the host in about 0.3 s (a small sgemm, memcpy, the disk) and is what a
// CPU job is planned with. probe_device adds what a GPU job depends on, measured through the
// compute Backend: its GEMM rate, the host link each way and both ways at once; measure_adamw the
// CPU optimizer's rate on all cores. Figures left at 0 were not measured; the planner then falls
// back to the documented estimate of each field.
// Thread-safety: the functions may run on any thread but use the global thread pool and, for
// probe_device, the backend (one thread drives a backend).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "compute/backend.h"
#include "core/status.h"
#include "model/model-config.h"

namespace spillway {

struct MachineProbe {
  double compute_flops =
      0;  // sustained FLOP/s of the backend's GEMMs (CPU: fp32 sgemm; CUDA: bf16)
  double h2d_bytes_per_s = 0;  // host→device link (memcpy on the CPU backend)
  double d2h_bytes_per_s = 0;  // device→host; 0: not measured (taken as h2d_bytes_per_s)
  double duplex_bytes_per_s =
      0;  // both directions at once, bytes of both; 0: not measured (they take turns)
  double host_mem_bytes_per_s = 0;  // DRAM bandwidth as the optimizer sees it
  double adamw_params_per_s =
      0;  // CPU AdamW on all cores; 0: not measured (28 B/param at host_mem_bytes_per_s)
  double ssd_bytes_per_s = 0;  // 0: not measured (a typical NVMe figure is assumed)
  // The CPU backend at the job's own shapes (probe_cpu_compute); 0: not measured.
  //  - cpu_gemm_flops: sgemm FLOP/s over one decoder layer's and the LM head's GEMMs (forward
  //    twice, the two backward GEMMs) at the model's sizes: small hidden sizes run far below the
  //    512³ rate of compute_flops. 0: the layer is too large to time in the probe's budget, and
  //    compute_flops (whose size it is like) stands for it.
  //  - cpu_attention_s_per_score: the causal attention kernels (compute/cpu/attention.h) per score
  //    (one query-key pair of one query head) of one layer's training pass (forward, the forward
  //    again in the backward's recompute, backward, and with q/k/v biases the key bias's gradient,
  //    compute/cpu/attention-key-bias.h), at the model's head_dim. 0: not measured (the
  //    plan's step is then uncalibrated on the CPU backend).
  double cpu_gemm_flops = 0, cpu_attention_s_per_score = 0;
  //  - cpu_stream_bytes_per_s: memory bandwidth of a copy spread over the CPU backend's threads,
  //    as its element-wise ops run (bytes read + written per second);
  //  - cpu_threads: the CPU backend's threads (ThreadPool::global()); 0: not known.
  double cpu_stream_bytes_per_s = 0;
  int cpu_threads = 0;
  uint64_t dram_total_bytes = 0, dram_available_bytes = 0;
  uint64_t device_total_bytes = 0;  // 0: unbounded (CPU backend without a cap)
  uint64_t device_free_bytes = 0;   // 0: not measured (taken as device_total_bytes)
  uint64_t ssd_free_bytes = 0, ssd_total_bytes = 0;
  // The GPUs for data parallel (docs/architecture.md, "The planner"):
  //  - gpus: CUDA devices this process sees (compute::cuda_device_count, CUDA_VISIBLE_DEVICES
  //    applies), counted by probe_device on a GPU backend; 0 on the CPU backend and where not
  //    counted (the planner then takes placement.devices as it asks);
  //  - nccl_bus_bytes_per_s: NCCL reduce-scatter "bus bandwidth" between them (nccl-tests'
  //    busbw: a reduce-scatter of S bytes takes S·(N-1)/N / busbw); 0: not measured
  //    (kNcclBusBytesPerSPcie). probe_device sets default_nccl_bus_bytes_per_s of the GPU.
  int gpus = 0;
  double nccl_bus_bytes_per_s = 0;
  // Past one machine (docs/architecture.md, "Past one machine"): the run's machines, each of this
  // one's shape (1: this one alone), and the network between them: the bytes a second each
  // machine sends (and receives) to the others, its NICs together; 0: not measured
  // (kNetworkBytesPerS). Set by the launcher (the worker's processes, `plan --machines`).
  int machines = 1;
  double network_bytes_per_s = 0;
  // Past one machine: the process whose share of the host state is planned (each machine holds
  // its blocks' state, block-owners.h); -1: the one that holds the most (`plan --machines`).
  int process = -1;
  std::string backend =
      compute::backend_name(compute::BackendKind::kCpu);  // Device::name() of the probed backend
  std::string device;  // the backend's device name; empty when no device was probed
  // What runs attention there (compute::DeviceInfo::attention): "cuDNN 9.19.0" when cuDNN's fused
  // kernels do (the planner's fused rates), "own kernels (why)" or empty otherwise.
  std::string attention;

  bool fused_attention() const { return attention.rfind("cuDNN", 0) == 0; }

  // The facts of `backend` (compute/backend-facts.h); a name no backend has reads as the CPU's.
  const compute::BackendFacts& backend_facts() const {
    return compute::backend_facts(
        compute::parse_backend_kind(backend).value_or(compute::BackendKind::kCpu));
  }
};

// NCCL's reduce-scatter bus bandwidth between the GPUs of one machine where nothing measured it
// (bytes/s). Compute capability 9.0 and later (H100, H200: NVLink 4): 150e9, the low end of what
// NCCL's ring reduce-scatter reaches on two NVLinked H100s (150-200 GB/s busbw; the lent x2 host
// copied GPU0→GPU1 at 270 GB/s, issue 23's table, 2026-11-27). Older GPUs, and any the
// probe did not see: 20e9, a reduce-scatter through the host's PCIe 4.0 switches (no NVLink).
// An sm_90 card without NVLink (H100 PCIe) reads as NVLinked: measure it to plan it.
inline constexpr double kNcclBusBytesPerSNvlink = 150e9;
inline constexpr double kNcclBusBytesPerSPcie = 20e9;
// The network between machines when not measured: one 100 Gb/s Ethernet port a machine.
inline constexpr double kNetworkBytesPerS = 12.5e9;
// `compute_capability` as DeviceInfo has it (90 for sm_90; 0 on the CPU).
double default_nccl_bus_bytes_per_s(int compute_capability);

// Measures this machine (CPU backend): a 512³ sgemm, memcpy and a streaming triad; reads
// /proc/meminfo and statvfs(ssd_dir). What a CPU job's step depends on besides is
// probe_cpu_compute's.
MachineProbe probe_machine(const std::string& ssd_dir);

// Fills cpu_gemm_flops and cpu_attention_s_per_score for `config` trained in sequences of
// `seq_len` tokens, `micro_batch_tokens` to a micro-batch, on the global thread pool: one decoder
// layer's GEMMs and the LM head's with cblas_sgemm as the CPU backend calls them, on up to 512
// rows (fewer when that would take more than about 0.4 GFLOP; none, cpu_gemm_flops left 0, when
// even 64 rows would), and the attention forward (twice) and backward for one sequence of up to
// 1,024 tokens at the model's head_dim and grouped-query ratio, as many heads as keep it near 600K
// scores; each the median of 5 samples of about 20 ms after a
// warm-up, about 0.3 s in all. kOutOfMemory when the buffers cannot be allocated.
Status probe_cpu_compute(const ModelConfig& config, int seq_len, int64_t micro_batch_tokens,
                         MachineProbe* m);

// What probe_device measures with. The defaults are the GPU's: a GEMM big enough to reach the
// tensor cores' sustained rate (8192³ = 1.1 TFLOP) and copies long enough (256 MiB) that the
// launch latency is noise. Tests on the CPU backend pass small sizes.
struct DeviceProbeSizes {
  int gemm_n = 8192;  // y[n, n] = x[n, n] · W[n, n]ᵀ in the backend's act dtype
  int gemm_reps = 20;
  size_t copy_bytes = size_t{256} << 20;  // per copy, each way
  int copy_reps = 4;
};

// Measures `backend` and fills compute_flops (linear_forward of gemm_n³, 2n³ FLOPs per call),
// h2d_bytes_per_s, d2h_bytes_per_s and duplex_bytes_per_s (pinned host buffers, one copy stream
// per direction), device_total_bytes, device_free_bytes (before its own buffers), `backend` and
// `device`, and on a GPU backend gpus (cuda_device_count; 1 when the count fails, the probed GPU
// being there) and, unless already set, nccl_bus_bytes_per_s (default_nccl_bus_bytes_per_s of the
// probed GPU); everything timed between backend events (GPU time, not host enqueue time). It
// borrows the backend's workspace (set_workspace) and frees all it allocated: call it before an
// engine hands the backend its own workspace. Needs 3·n²·act + 2·copy_bytes of device memory and
// 2·copy_bytes of pinned host memory: kOutOfMemory from the backend otherwise, `m` unchanged.
Status probe_device(compute::Backend& backend, MachineProbe* m, const DeviceProbeSizes& sizes = {});

// The CPU AdamW's rate on the global thread pool (all cores): adamw_update_range over `params`
// parameters (16 bytes each of fresh memory), best of 3 passes after a warm-up pass, in
// parameters/s. kOutOfMemory when the 16·params bytes cannot be allocated.
Result<double> measure_adamw(size_t params);

}  // namespace spillway
