#include "telemetry/nvml.h"

#include <dlfcn.h>

#include <mutex>
#include <utility>

namespace spillway {
namespace {

constexpr const char* kLibrary = "libnvidia-ml.so.1";

std::string nvml_error(const NvmlApi& api, nvml::Return r) {
  const char* text = api.error_string ? api.error_string(r) : nullptr;
  return text ? std::string(text) : "NVML error " + std::to_string(r);
}

// Resolves `symbol` into `fn`; when the library lacks it, names it in `missing` (the first one).
template <typename Fn>
void resolve(void* lib, const char* symbol, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(::dlsym(lib, symbol));
  if (*fn == nullptr && missing->empty()) *missing = symbol;
}

Result<const NvmlApi*> load_once() {
  // RTLD_LOCAL: NVML's symbols stay out of the global namespace of a process that may load the
  // CUDA backend module too. Never closed: monitors hold pointers into it for the process's life.
  void* lib = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return unsupported(std::string("GPU telemetry unavailable: cannot load ") + kLibrary + " (" +
                       (why ? why : "unknown error") +
                       "); it comes with the NVIDIA driver: is one installed?");
  }
  static NvmlApi api{};
  std::string missing;
  resolve(lib, "nvmlInit_v2", &api.init, &missing);
  resolve(lib, "nvmlShutdown", &api.shutdown, &missing);
  resolve(lib, "nvmlDeviceGetHandleByIndex_v2", &api.device_get_handle_by_index, &missing);
  resolve(lib, "nvmlDeviceGetHandleByPciBusId_v2", &api.device_get_handle_by_pci_bus_id, &missing);
  resolve(lib, "nvmlDeviceGetName", &api.device_get_name, &missing);
  resolve(lib, "nvmlDeviceGetUtilizationRates", &api.device_get_utilization_rates, &missing);
  resolve(lib, "nvmlDeviceGetMemoryInfo", &api.device_get_memory_info, &missing);
  resolve(lib, "nvmlDeviceGetPcieThroughput", &api.device_get_pcie_throughput, &missing);
  resolve(lib, "nvmlDeviceGetPowerUsage", &api.device_get_power_usage, &missing);
  resolve(lib, "nvmlDeviceGetTemperature", &api.device_get_temperature, &missing);
  api.error_string = reinterpret_cast<decltype(api.error_string)>(::dlsym(lib, "nvmlErrorString"));
  if (!missing.empty()) {
    ::dlclose(lib);
    return unsupported(std::string("GPU telemetry unavailable: ") + kLibrary + " has no " +
                       missing + "; the NVIDIA driver is too old, update it");
  }
  return &api;
}

}  // namespace

Result<const NvmlApi*> load_nvml() {
  static std::once_flag once;
  static Result<const NvmlApi*> loaded = unsupported("NVML not loaded");
  std::call_once(once, [] { loaded = load_once(); });
  return loaded;
}

Result<GpuMonitor> GpuMonitor::open(unsigned int index) {
  SPW_ASSIGN_OR_RETURN(const NvmlApi* api, load_nvml());
  return open(index, *api);
}

Result<GpuMonitor> GpuMonitor::open(unsigned int index, const NvmlApi& api) {
  return open_with(api, index, "NVML index " + std::to_string(index),
                   [index](const NvmlApi& a, nvml::Device* d) {
                     return a.device_get_handle_by_index(index, d);
                   });
}

Result<GpuMonitor> GpuMonitor::open(const std::string& pci_bus_id, const NvmlApi& api) {
  return open_with(api, 0, "PCI address " + pci_bus_id,
                   [&pci_bus_id](const NvmlApi& a, nvml::Device* d) {
                     return a.device_get_handle_by_pci_bus_id(pci_bus_id.c_str(), d);
                   });
}

Result<GpuMonitor> GpuMonitor::open_with(
    const NvmlApi& api, unsigned int index, const std::string& where,
    const std::function<nvml::Return(const NvmlApi&, nvml::Device*)>& find) {
  nvml::Return r = api.init();
  if (r != nvml::kSuccess) {
    return unsupported("GPU telemetry unavailable: nvmlInit failed: " + nvml_error(api, r) +
                       " (is the NVIDIA driver loaded, and does it match libnvidia-ml?)");
  }
  // From here the session is the monitor's: its destructor shuts NVML down on every return.
  GpuMonitor monitor(&api, nullptr, index, {});
  r = find(api, &monitor.device_);
  if (r != nvml::kSuccess) {
    return not_found("GPU telemetry unavailable: no GPU at " + where + ": " + nvml_error(api, r));
  }
  char name[nvml::kDeviceNameBufferSize] = {};
  if (api.device_get_name(monitor.device_, name, sizeof(name)) == nvml::kSuccess) {
    monitor.name_ = name;
  }
  return monitor;
}

GpuMonitor::GpuMonitor(GpuMonitor&& other) noexcept
    : api_(std::exchange(other.api_, nullptr)),
      device_(std::exchange(other.device_, nullptr)),
      index_(other.index_),
      name_(std::move(other.name_)),
      unsupported_(other.unsupported_) {}

GpuMonitor& GpuMonitor::operator=(GpuMonitor&& other) noexcept {
  if (this != &other) {
    if (api_) api_->shutdown();
    api_ = std::exchange(other.api_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
    index_ = other.index_;
    name_ = std::move(other.name_);
    unsupported_ = other.unsupported_;
  }
  return *this;
}

GpuMonitor::~GpuMonitor() {
  if (api_) api_->shutdown();
}

bool GpuMonitor::answered(nvml::Return r, Metric m) {
  if (r == nvml::kErrorNotSupported) unsupported_ |= m;
  return r == nvml::kSuccess;
}

GpuSample GpuMonitor::sample() {
  GpuSample s;
  if (api_ == nullptr) return s;
  if (asks(kUtil)) {
    nvml::Utilization u{};
    if (answered(api_->device_get_utilization_rates(device_, &u), kUtil)) s.util_pct = u.gpu;
  }
  if (asks(kMemory)) {
    nvml::Memory m{};
    if (answered(api_->device_get_memory_info(device_, &m), kMemory)) {
      s.mem_used_bytes = m.used;
      s.mem_total_bytes = m.total;
    }
  }
  const auto pcie = [&](unsigned int counter, Metric m, std::optional<double>* out) {
    unsigned int kb_per_s = 0;
    if (asks(m) && answered(api_->device_get_pcie_throughput(device_, counter, &kb_per_s), m)) {
      *out = static_cast<double>(kb_per_s) * 1024.0 / 1e9;
    }
  };
  pcie(nvml::kPcieUtilTxBytes, kPcieTx, &s.pcie_tx_gbps);
  pcie(nvml::kPcieUtilRxBytes, kPcieRx, &s.pcie_rx_gbps);
  if (asks(kPower)) {
    unsigned int mw = 0;
    if (answered(api_->device_get_power_usage(device_, &mw), kPower)) s.power_w = mw / 1000.0;
  }
  if (asks(kTemp)) {
    unsigned int c = 0;
    if (answered(api_->device_get_temperature(device_, nvml::kTemperatureGpu, &c), kTemp)) {
      s.temp_c = c;
    }
  }
  return s;
}

}  // namespace spillway
