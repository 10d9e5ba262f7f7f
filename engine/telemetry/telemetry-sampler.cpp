#include "telemetry/telemetry-sampler.h"

#include <algorithm>

namespace spillway {
namespace {

using Json = nlohmann::json;

SampleTier tier_sample(const CounterSnapshot& s, Tier t) {
  SampleTier out;
  for (Category c : kAllCategories) out.category_bytes[category_name(c)] = s.held(t, c);
  out.used_bytes = s.tier_total(t);
  if (s.capacity(t) > 0) out.capacity_bytes = s.capacity(t);
  return out;
}

// A GPU's memory used and in total, both or neither: NVML's (the whole device, as nvidia-smi
// shows it), else the backend's probe (cudaMemGetInfo), which sees the same device memory.
void gpu_memory(const GpuSample& g, const std::optional<DeviceMemory>& dev,
                std::optional<uint64_t>* used, std::optional<uint64_t>* total) {
  if (g.mem_used_bytes && g.mem_total_bytes) {
    *used = *g.mem_used_bytes;
    *total = *g.mem_total_bytes;
  } else if (dev) {
    *used = dev->total_bytes - std::min(dev->free_bytes, dev->total_bytes);
    *total = dev->total_bytes;
  }
}

// The GPU's fields, each only when known.
void add_gpu_fields(const GpuSample& g, const std::optional<DeviceMemory>& dev,
                    SampleEvent& sample) {
  sample.gpu_util_pct = g.util_pct;
  gpu_memory(g, dev, &sample.gpu_mem_used_bytes, &sample.gpu_mem_total_bytes);
  sample.pcie_tx_gbps = g.pcie_tx_gbps;
  sample.pcie_rx_gbps = g.pcie_rx_gbps;
  sample.gpu_power_w = g.power_w;
  sample.gpu_temp_c = g.temp_c;
}

// One GPU of options.gpus: NVML's reading, its memory from `dev` when NVML has none.
SampleGpu gpu_entry(int index, const GpuSample& g, const std::optional<DeviceMemory>& dev) {
  SampleGpu out;
  out.index = index;
  gpu_memory(g, dev, &out.hbm_used_bytes, &out.hbm_total_bytes);
  out.util_percent = g.util_pct;
  // NVML's GB/s (1e9 bytes) back to bytes per second.
  if (g.pcie_rx_gbps) out.pcie_rx_bytes_per_s = *g.pcie_rx_gbps * 1e9;
  if (g.pcie_tx_gbps) out.pcie_tx_bytes_per_s = *g.pcie_tx_gbps * 1e9;
  return out;
}

// The host's totals over several GPUs' readings, as add_gpu_fields takes one GPU's: memory, power
// and PCIe summed over the GPUs that report them, utilisation the mean, temperature the hottest. A
// metric no GPU reports stays absent.
GpuSample host_totals(const std::vector<GpuSample>& gpus) {
  GpuSample t;
  const auto sum = [](auto& total, const auto& v) {
    if (v) total = total.value_or(0) + *v;
  };
  int util_n = 0;
  for (const GpuSample& g : gpus) {
    if (g.util_pct) t.util_pct = t.util_pct.value_or(0) + *g.util_pct, ++util_n;
    if (g.mem_used_bytes && g.mem_total_bytes) {
      sum(t.mem_used_bytes, g.mem_used_bytes);
      sum(t.mem_total_bytes, g.mem_total_bytes);
    }
    sum(t.pcie_tx_gbps, g.pcie_tx_gbps);
    sum(t.pcie_rx_gbps, g.pcie_rx_gbps);
    sum(t.power_w, g.power_w);
    if (g.temp_c) t.temp_c = std::max(t.temp_c.value_or(*g.temp_c), *g.temp_c);
  }
  if (util_n > 0) *t.util_pct /= util_n;
  return t;
}

}  // namespace

TelemetrySampler::TelemetrySampler(const TierCounters& counters, EventWriter* writer,
                                   TelemetrySamplerOptions options)
    : counters_(counters),
      writer_(writer),
      options_(std::move(options)),
      start_(std::chrono::steady_clock::now()) {
  if (!options_.ssd_path.empty()) disk_ = DiskStatsReader::for_path(options_.ssd_path);
  if (!options_.gpus.empty()) {
    const Result<const NvmlApi*> api =
        options_.nvml ? Result<const NvmlApi*>(options_.nvml) : load_nvml();
    if (!api.ok()) gpu_status_ = api.status();  // no NVML: no GPU is monitored, for one reason
    for (const TelemetrySamplerOptions::Gpu& g : options_.gpus) {
      Result<GpuMonitor> monitor =
          api.ok() ? GpuMonitor::open(g.pci_bus_id, **api) : Result<GpuMonitor>(api.status());
      if (monitor.ok()) {
        gpu_monitors_.emplace_back(std::move(monitor).value());
        continue;
      }
      gpu_monitors_.emplace_back(std::nullopt);
      // One GPU of several that NVML cannot open: the message names it.
      if (gpu_status_.ok())
        gpu_status_ = options_.gpus.size() == 1
                          ? monitor.status()
                          : Status(monitor.status().code(), "GPU " + std::to_string(g.index) +
                                                                ": " + monitor.status().message());
    }
  } else if (!options_.gpu_pci_bus_id.empty() || options_.gpu_index) {
    Result<GpuMonitor> gpu = [this]() -> Result<GpuMonitor> {
      SPW_ASSIGN_OR_RETURN(const NvmlApi* api,
                           options_.nvml ? Result<const NvmlApi*>(options_.nvml) : load_nvml());
      return options_.gpu_pci_bus_id.empty() ? GpuMonitor::open(*options_.gpu_index, *api)
                                             : GpuMonitor::open(options_.gpu_pci_bus_id, *api);
    }();
    if (gpu.ok()) {
      gpu_.emplace(std::move(gpu).value());
    } else {
      gpu_status_ = gpu.status();
    }
  }
  prev_counters_ = counters_.snapshot();
  prev_t_s_ = now_s();
  prev_disk_ = disk_.read();
}

TelemetrySampler::~TelemetrySampler() {
  stop();
}

double TelemetrySampler::now_s() const {
  if (writer_) return writer_->now_s();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void TelemetrySampler::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(thread_mu_);
    stop_requested_ = false;
  }
  thread_ = std::thread([this] { run(); });
}

void TelemetrySampler::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(thread_mu_);
    stop_requested_ = true;
  }
  cv_.notify_all();
  thread_.join();
  (void)sample_once();
}

void TelemetrySampler::run() {
  using clock = std::chrono::steady_clock;
  auto period = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>(options_.interval_s > 0 ? options_.interval_s : 0.1));
  auto next = clock::now() + period;
  std::unique_lock lock(thread_mu_);
  while (!stop_requested_) {
    if (cv_.wait_until(lock, next, [this] { return stop_requested_; })) break;
    lock.unlock();
    (void)sample_once();
    lock.lock();
    // A fixed schedule keeps the rate at 1/interval; after a stall, skip ahead instead of bursting.
    next += period;
    auto now = clock::now();
    if (next < now) next = now + period;
  }
}

Json TelemetrySampler::sample_once() {
  std::function<void(double, const Json&)> callback;
  Json sample_json;
  double t = 0.0;
  {
    std::lock_guard lock(sample_mu_);
    CounterSnapshot snap = counters_.snapshot();
    t = now_s();
    double dt = t - prev_t_s_;

    SampleEvent sample;
    SampleTier hbm = tier_sample(snap, Tier::kHbm);
    std::optional<DeviceMemory> dev;
    if (options_.device_memory) dev = options_.device_memory();
    if (dev) {
      hbm.device_total_bytes = dev->total_bytes;
      hbm.device_free_bytes = dev->free_bytes;
      if (!hbm.capacity_bytes) hbm.capacity_bytes = dev->total_bytes;
    }
    SampleTier dram = tier_sample(snap, Tier::kDram);
    MemInfo mem = read_meminfo();
    dram.total_bytes = mem.total_bytes;
    dram.available_bytes = mem.available_bytes;
    SampleTier ssd = tier_sample(snap, Tier::kSsd);
    if (!options_.ssd_path.empty()) {
      FsSpace space = read_fs_space(options_.ssd_path);
      ssd.free_bytes = space.free_bytes;
      ssd.total_bytes = space.total_bytes;
    }
    sample.tiers[tier_name(Tier::kHbm)] = std::move(hbm);
    sample.tiers[tier_name(Tier::kDram)] = std::move(dram);
    sample.tiers[tier_name(Tier::kSsd)] = std::move(ssd);

    auto moved = snap.moved_since(prev_counters_);
    for (Link l : kAllLinks) {
      SampleLink& link = sample.links[link_name(l)];
      if (dt > 0) link.gbps = static_cast<double>(moved[static_cast<size_t>(l)]) / dt / 1e9;
      link.bytes = snap.moved(l);
    }

    std::optional<DiskIo> disk = disk_.read();
    if (disk && prev_disk_ && dt > 0) {
      auto delta = [](std::uint64_t now, std::uint64_t before) {
        return now >= before ? now - before : 0;
      };
      sample.disk = SampleDisk{
          disk_.device(),
          static_cast<double>(delta(disk->read_bytes, prev_disk_->read_bytes)) / dt / 1e9,
          static_cast<double>(delta(disk->written_bytes, prev_disk_->written_bytes)) / dt / 1e9};
    }
    sample.rss_bytes = read_process_rss_bytes();
    if (dt > 0) sample.interval_s = dt;
    if (options_.gpus.empty()) {
      add_gpu_fields(gpu_ ? gpu_->sample() : GpuSample{}, dev, sample);
    } else {
      // Each GPU, then the host's totals over them; a GPU that NVML does not report memory for
      // counts its device_memory reading in the totals too.
      std::vector<GpuSample> readings;
      for (size_t i = 0; i < options_.gpus.size(); ++i) {
        const TelemetrySamplerOptions::Gpu& g = options_.gpus[i];
        GpuSample reading = gpu_monitors_[i] ? gpu_monitors_[i]->sample() : GpuSample{};
        std::optional<DeviceMemory> own;
        if (!(reading.mem_used_bytes && reading.mem_total_bytes) && g.device_memory)
          own = g.device_memory();
        sample.gpus.push_back(gpu_entry(g.index, reading, own));
        reading.mem_used_bytes = sample.gpus.back().hbm_used_bytes;
        reading.mem_total_bytes = sample.gpus.back().hbm_total_bytes;
        readings.push_back(reading);
      }
      add_gpu_fields(host_totals(readings), dev, sample);
    }

    prev_counters_ = snap;
    prev_t_s_ = t;
    if (disk) prev_disk_ = disk;
    ++samples_;

    sample_json = to_json(sample);
    if (writer_) {
      Status s = writer_->sample(sample_json);
      if (!s.ok()) last_error_ = s;
    }
    // 1e-3 of slack so a 100 ms timer that fires a hair early still yields one callback a second.
    if (options_.on_sample &&
        (!last_callback_t_s_ || t - *last_callback_t_s_ >= options_.callback_interval_s - 1e-3)) {
      last_callback_t_s_ = t;
      callback = options_.on_sample;
    }
  }
  if (callback) callback(t, sample_json);
  return sample_json;
}

std::uint64_t TelemetrySampler::samples_taken() const {
  std::lock_guard lock(sample_mu_);
  return samples_;
}

Status TelemetrySampler::last_error() const {
  std::lock_guard lock(sample_mu_);
  return last_error_;
}

}  // namespace spillway
