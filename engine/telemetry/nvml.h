// GPU telemetry through NVML (the NVIDIA Management Library, shipped with the driver), loaded with
// dlopen("libnvidia-ml.so.1") at run time and never linked: Spillway builds without the CUDA
// toolkit's nvml.h and runs on machines without a driver (STYLE.md: optional drivers are loaded).
// The few NVML types and entry points used are declared here, with the ABI of nvml.h.
//
// GpuMonitor owns one NVML session (nvmlInit_v2 .. nvmlShutdown; NVML counts them, so monitors
// may coexist) and one device handle, and reads the device's utilisation, memory, PCIe
// throughput, power and temperature. A metric the GPU or driver does not report is left absent in
// GpuSample (nvtop's validity flags): the GUI shows it as unavailable, never as 0.
//
// Tests inject an NvmlApi of fakes; production code calls load_nvml() (through open(index)).
//
// Thread-safety: load_nvml() may be called from any thread. A GpuMonitor is used by one thread at
// a time (sample() remembers which metrics the device refused). Ownership: move-only; the NvmlApi
// it was opened with must outlive it (load_nvml()'s table lives as long as the process).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/status.h"

namespace spillway {

// NVML's C types, as nvml.h declares them (only what GpuMonitor passes across the ABI).
namespace nvml {
using Return = int;  // nvmlReturn_t (a C enum)
struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t
struct Utilization {       // nvmlUtilization_t: percent of the last sample period (1/6 s to 1 s)
  unsigned int gpu;        // a kernel was running on the GPU
  unsigned int memory;     // device memory was being read or written
};
struct Memory {  // nvmlMemory_t (v1), bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
inline constexpr Return kSuccess = 0;                      // NVML_SUCCESS
inline constexpr Return kErrorNotSupported = 3;            // NVML_ERROR_NOT_SUPPORTED
inline constexpr unsigned int kPcieUtilTxBytes = 0;        // NVML_PCIE_UTIL_TX_BYTES: GPU -> host
inline constexpr unsigned int kPcieUtilRxBytes = 1;        // NVML_PCIE_UTIL_RX_BYTES: host -> GPU
inline constexpr unsigned int kTemperatureGpu = 0;         // NVML_TEMPERATURE_GPU: the die
inline constexpr unsigned int kDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
}  // namespace nvml

// The NVML entry points GpuMonitor calls, by the name of the NVML symbol each holds. Every pointer
// but error_string must be set; error_string (nvmlErrorString) may be null.
struct NvmlApi {
  nvml::Return (*init)();      // nvmlInit_v2
  nvml::Return (*shutdown)();  // nvmlShutdown
  nvml::Return (*device_get_handle_by_index)(unsigned int index, nvml::Device* device);  // _v2
  // nvmlDeviceGetHandleByPciBusId_v2: "0000:01:00.0" as cudaDeviceGetPCIBusId writes it
  nvml::Return (*device_get_handle_by_pci_bus_id)(const char* pci_bus_id, nvml::Device* device);
  nvml::Return (*device_get_name)(nvml::Device device, char* name, unsigned int length);
  nvml::Return (*device_get_utilization_rates)(nvml::Device device, nvml::Utilization* out);
  nvml::Return (*device_get_memory_info)(nvml::Device device, nvml::Memory* out);
  // nvmlDeviceGetPcieThroughput: KB/s (1 KB = 1024 bytes) over a 20 ms window; the call takes it.
  nvml::Return (*device_get_pcie_throughput)(nvml::Device device, unsigned int counter,
                                             unsigned int* kb_per_s);
  nvml::Return (*device_get_power_usage)(nvml::Device device, unsigned int* milliwatts);
  nvml::Return (*device_get_temperature)(nvml::Device device, unsigned int sensor,
                                         unsigned int* celsius);
  const char* (*error_string)(nvml::Return result);
};

// Loads libnvidia-ml.so.1 and resolves the entry points, once per process (the library stays
// loaded). kUnsupported when the library is missing ("no NVIDIA driver") or lacks a symbol
// (a driver older than NVML v2, about R319); the same error on every later call.
Result<const NvmlApi*> load_nvml();

// One reading of a GPU. Each metric is absent when NVML does not report it for this device.
struct GpuSample {
  std::optional<double> util_pct;               // kernels running, % of the last NVML sample period
  std::optional<std::uint64_t> mem_used_bytes;  // whole device, all processes
  std::optional<std::uint64_t> mem_total_bytes;  // as NVML reports it (the usable size)
  std::optional<double> pcie_tx_gbps;  // GPU -> host, 1 GB = 1e9 bytes, over NVML's 20 ms window
  std::optional<double> pcie_rx_gbps;  // host -> GPU
  std::optional<double> power_w;       // board power draw
  std::optional<double> temp_c;        // GPU die
};

class GpuMonitor {
 public:
  // Opens the GPU at NVML index `index` through the system's NVML (load_nvml()). NVML indexes GPUs
  // in PCI bus order, which is CUDA's ordinal only under CUDA_DEVICE_ORDER=PCI_BUS_ID without
  // CUDA_VISIBLE_DEVICES (or with one GPU). Errors: kUnsupported when NVML cannot be loaded or
  // initialised (no driver, driver/library mismatch), kNotFound when there is no GPU `index`.
  static Result<GpuMonitor> open(unsigned int index);
  // The same through `api` (tests inject fakes); `api` must outlive the monitor.
  static Result<GpuMonitor> open(unsigned int index, const NvmlApi& api);
  // Opens the GPU at PCI address `pci_bus_id` ("0000:01:00.0", DeviceInfo::pci_bus_id): the same
  // GPU the CUDA backend runs on, whatever the ordering and CUDA_VISIBLE_DEVICES. kNotFound when no
  // GPU has that address; otherwise as open(index). `api` as for open(index, api): load_nvml()'s
  // table or tests' fakes.
  static Result<GpuMonitor> open(const std::string& pci_bus_id, const NvmlApi& api);

  GpuMonitor(GpuMonitor&& other) noexcept;
  GpuMonitor& operator=(GpuMonitor&& other) noexcept;
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;
  ~GpuMonitor();  // nvmlShutdown

  unsigned int index() const { return index_; }
  const std::string& name() const { return name_; }  // "NVIDIA H100 80GB HBM3"

  // Reads every metric (about 40 ms: the two PCIe counters each sample a 20 ms window). A metric
  // the device answers NVML_ERROR_NOT_SUPPORTED for is not asked again; other failures (a GPU
  // fallen off the bus) leave the metric absent in this sample only.
  GpuSample sample();

 private:
  // nvmlInit, then `find` the device (`where` names it in the error); index_ is `index`.
  static Result<GpuMonitor> open_with(
      const NvmlApi& api, unsigned int index, const std::string& where,
      const std::function<nvml::Return(const NvmlApi&, nvml::Device*)>& find);
  GpuMonitor(const NvmlApi* api, nvml::Device device, unsigned int index, std::string name)
      : api_(api), device_(device), index_(index), name_(std::move(name)) {}

  // Metrics NVML said this device does not support.
  enum Metric : unsigned {
    kUtil = 1,
    kMemory = 2,
    kPcieTx = 4,
    kPcieRx = 8,
    kPower = 16,
    kTemp = 32
  };
  bool asks(Metric m) const { return (unsupported_ & m) == 0; }
  // Whether `r` is a value; records m as unsupported on NVML_ERROR_NOT_SUPPORTED.
  bool answered(nvml::Return r, Metric m);

  const NvmlApi* api_ = nullptr;  // null once moved from: nothing to shut down
  nvml::Device device_ = nullptr;
  unsigned int index_ = 0;
  std::string name_;
  unsigned unsupported_ = 0;
};

}  // namespace spillway
