// TelemetrySampler: the background thread that turns engine counters and system readings into the
// `sample` events of events.jsonl (about 10 Hz) and hands a downsampled stream (about 1 Hz) to a
// callback, which the worker points at RunStore::add_sample.
//
// Each tick it snapshots TierCounters, computes each link's GB/s from the byte delta since the
// previous tick (1 GB = 1e9 bytes), reads /proc/meminfo, statvfs and /proc/diskstats of the SSD
// tier path, process RSS, (when a probe is given) the GPU's memory, and (when a GPU is named and
// NVML loads) the GPU's utilisation, memory, PCIe throughput, power and temperature; it writes one
// JSON object:
//
//   {"tiers": {"hbm":  {"weights_bytes":..,"gradients_bytes":..,"master_bytes":..,
//                       "optimizer_bytes":..,"checkpoints_bytes":..,"workspace_bytes":..,
//                       "used_bytes":..,"capacity_bytes":..,
//                       "device_total_bytes":..,"device_free_bytes":..},
//              "dram": {..categories.., "used_bytes", "capacity_bytes", "total_bytes",
//                       "available_bytes"},
//              "ssd":  {..categories.., "used_bytes", "capacity_bytes", "free_bytes",
//                       "total_bytes"}},
//    "links": {"h2d_gbps":..,"d2h_gbps":..,"ssd_read_gbps":..,"ssd_write_gbps":..,
//              "h2d_bytes":..,"d2h_bytes":..,"ssd_read_bytes":..,"ssd_write_bytes":..},
//    "disk":  {"device":"nvme0n1p2","read_gbps":..,"write_gbps":..},
//    "rss_bytes":.., "interval_s":..,
//    "gpu_util_pct":.., "gpu_mem_used_bytes":.., "gpu_mem_total_bytes":.., "pcie_tx_gbps":..,
//    "pcie_rx_gbps":.., "gpu_power_w":.., "gpu_temp_c":..,
//    "gpus": [{"index":0, "hbm_used_bytes":.., "hbm_total_bytes":.., "util_percent":..,
//              "pcie_rx_bytes_per_s":.., "pcie_tx_bytes_per_s":..}, ...]}
//
// *_bytes under tiers are bytes held now; *_bytes under links are cumulative since the counters
// began; *_gbps are averages over the last interval_s. A metric that cannot be read is left out of
// the object (never written as 0): capacity_bytes when not declared, device_* without a GPU probe,
// total/available without /proc/meminfo, "disk" when the SSD path has no block device, each gpu_*
// and pcie_* key the GPU does not report (all of them without NVML). gpu_mem_* come from NVML, else
// from the device memory probe. With `gpus` named (the run's GPUs, data parallel), "gpus" has one
// entry per GPU in their order and the gpu_* and pcie_* keys are the host's totals over them
// (SampleEvent, events.h): memory, power and PCIe summed over the GPUs that report them,
// utilisation their mean, temperature the hottest. NVML's PCIe counters take 20 ms each, so a
// sample of N GPUs takes about N x 40 ms: past 2 GPUs the rate falls below 10 Hz (the thread
// skips ahead rather than bursting).
//
// Thread-safety: start()/stop() from the owning thread; sample_once() may be called from any thread
// (serialized internally), which is how tests drive it without the thread. Ownership: borrows the
// counters and the writer (both must outlive the sampler); owns its thread, which the destructor
// stops and joins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/counters.h"
#include "telemetry/event-writer.h"
#include "telemetry/nvml.h"
#include "telemetry/sampler.h"

namespace spillway {

// GPU memory as cudaMemGetInfo / NVML report it, bytes.
struct DeviceMemory {
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
};

struct TelemetrySamplerOptions {
  double interval_s = 0.1;  // event rate; the DESIGN's "about 10 Hz"
  // Directory of the SSD tier: statvfs and diskstats are read for it. Empty: no ssd free/total, no
  // disk.
  std::string ssd_path;
  // GPU memory probe (the CUDA backend's cudaMemGetInfo, or NVML via dlopen); empty or returning
  // nullopt: device_* fields are absent. Called on the sampler thread.
  std::function<std::optional<DeviceMemory>()> device_memory;
  // The GPU whose utilisation, memory, PCIe traffic, power and temperature go into each sample, by
  // PCI address (DeviceInfo::pci_bus_id: the backend's own GPU) or, when that is empty, by NVML
  // index (see GpuMonitor::open); neither for a run without a GPU. When NVML cannot open it the
  // sampler runs without these keys and gpu_status() says why.
  std::string gpu_pci_bus_id;
  std::optional<unsigned int> gpu_index;
  // The run's GPUs, in rank order; when not empty it replaces gpu_pci_bus_id and gpu_index. Each is
  // opened in NVML by its PCI address (DeviceInfo::pci_bus_id: the same GPU as the CUDA ordinal,
  // whatever CUDA_VISIBLE_DEVICES says); `index` is its CUDA ordinal, what the sample's "gpus"
  // entry names; `device_memory` (may be empty) gives its memory when NVML does not. A GPU NVML
  // cannot open keeps its entry with what device_memory reads; gpu_status() names it.
  struct Gpu {
    int index = 0;
    std::string pci_bus_id;
    std::function<std::optional<DeviceMemory>()> device_memory;
  };
  std::vector<Gpu> gpus;
  // NVML entry points to use instead of the system's libnvidia-ml (tests); null: load_nvml().
  const NvmlApi* nvml = nullptr;
  // Receives every sample whose t is at least callback_interval_s after the last one it received
  // (t_s in the writer's time base). Called on the sampler thread; must not block for long.
  std::function<void(double t_s, const nlohmann::json& sample)> on_sample;
  double callback_interval_s = 1.0;
};

class TelemetrySampler {
 public:
  // `writer` may be null (samples then only reach on_sample). Takes the baseline snapshot now, so
  // the first sample's GB/s covers the time since construction.
  TelemetrySampler(const TierCounters& counters, EventWriter* writer,
                   TelemetrySamplerOptions options = {});
  ~TelemetrySampler();
  TelemetrySampler(const TelemetrySampler&) = delete;
  TelemetrySampler& operator=(const TelemetrySampler&) = delete;

  // Starts the thread (no-op when running). A sample is written every interval_s until stop().
  void start();
  // Stops and joins the thread; writes one last sample so the file ends with final figures. No-op
  // when not running.
  void stop();
  bool running() const { return thread_.joinable(); }

  // Takes one sample now: computes it relative to the previous one, writes it as a `sample` event
  // (when there is a writer), feeds on_sample when due, and returns it.
  nlohmann::json sample_once();

  std::uint64_t samples_taken() const;
  // The last write error from the event writer (ok when none); the thread keeps sampling
  // regardless.
  Status last_error() const;
  // Why the GPU named by options.gpu_pci_bus_id or gpu_index (or the first of several
  // options.gpus that NVML could not open, named "GPU <index>: ...") is not monitored (ok when it
  // is, or when none was named): for the run's log, e.g. "GPU telemetry unavailable: cannot load
  // libnvidia-ml.so.1
  // (...)".
  const Status& gpu_status() const { return gpu_status_; }

 private:
  double now_s() const;
  void run();

  const TierCounters& counters_;
  EventWriter* writer_;
  TelemetrySamplerOptions options_;
  DiskStatsReader disk_;
  std::optional<GpuMonitor> gpu_;  // used under sample_mu_
  // options_.gpus' monitors, by position; nullopt where NVML could not open the GPU.
  std::vector<std::optional<GpuMonitor>> gpu_monitors_;  // used under sample_mu_
  Status gpu_status_;
  std::chrono::steady_clock::time_point start_;

  mutable std::mutex sample_mu_;  // guards the "previous" state below
  CounterSnapshot prev_counters_;
  double prev_t_s_ = 0.0;
  std::optional<DiskIo> prev_disk_;
  std::optional<double> last_callback_t_s_;
  std::uint64_t samples_ = 0;
  Status last_error_;

  std::mutex thread_mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  std::thread thread_;
};

}  // namespace spillway
