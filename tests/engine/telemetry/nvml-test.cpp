#include "telemetry/nvml.h"

#include <gtest/gtest.h>

#include <cstring>

#include "telemetry/telemetry-sampler.h"

namespace spillway {
namespace {

using Json = nlohmann::json;

// A fake NVML: one GPU at index 0 (PCI 0000:4A:00.0) whose answers the tests set, and a second
// one reachable only by its PCI address (0000:4B:00.0) for the data-parallel samples. NVML is a C
// API of plain function pointers, so the fake's state is global; each test starts from reset().
struct FakeGpu {
  int sessions = 0;  // nvmlInit_v2 calls not yet matched by nvmlShutdown
  nvml::Return init_result = nvml::kSuccess;
  bool power_supported = true;
  int power_calls = 0;
  bool temperature_fails = false;
};
FakeGpu fake;
nvml::DeviceSt* const kDevice = reinterpret_cast<nvml::DeviceSt*>(0x1234);
nvml::DeviceSt* const kDevice2 = reinterpret_cast<nvml::DeviceSt*>(0x5678);

nvml::Return fake_init() {
  if (fake.init_result == nvml::kSuccess) ++fake.sessions;
  return fake.init_result;
}
nvml::Return fake_shutdown() {
  --fake.sessions;
  return nvml::kSuccess;
}
nvml::Return fake_handle(unsigned int index, nvml::Device* device) {
  if (index != 0) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = kDevice;
  return nvml::kSuccess;
}
nvml::Return fake_handle_by_bus(const char* bus_id, nvml::Device* device) {
  if (std::strcmp(bus_id, "0000:4B:00.0") == 0) return *device = kDevice2, nvml::kSuccess;
  if (std::strcmp(bus_id, "0000:4A:00.0") != 0) return 6;  // NVML_ERROR_NOT_FOUND
  *device = kDevice;
  return nvml::kSuccess;
}
nvml::Return fake_name(nvml::Device, char* name, unsigned int length) {
  std::strncpy(name, "NVIDIA H100 80GB HBM3", length - 1);
  return nvml::kSuccess;
}
nvml::Return fake_util(nvml::Device d, nvml::Utilization* u) {
  EXPECT_TRUE(d == kDevice || d == kDevice2);
  *u = d == kDevice ? nvml::Utilization{87, 40} : nvml::Utilization{41, 10};
  return nvml::kSuccess;
}
nvml::Return fake_memory(nvml::Device d, nvml::Memory* m) {
  *m = d == kDevice ? nvml::Memory{80ull << 30, 30ull << 30, 50ull << 30}
                    : nvml::Memory{80ull << 30, 60ull << 30, 20ull << 30};
  return nvml::kSuccess;
}
nvml::Return fake_pcie(nvml::Device d, unsigned int counter, unsigned int* kb_per_s) {
  if (d == kDevice2)
    *kb_per_s = counter == nvml::kPcieUtilTxBytes ? 2'000'000 : 10'000'000;
  else
    *kb_per_s = counter == nvml::kPcieUtilTxBytes ? 1'000'000 : 40'000'000;
  return nvml::kSuccess;
}
nvml::Return fake_power(nvml::Device, unsigned int* mw) {
  ++fake.power_calls;
  if (!fake.power_supported) return nvml::kErrorNotSupported;
  *mw = 412'500;
  return nvml::kSuccess;
}
nvml::Return fake_temperature(nvml::Device d, unsigned int sensor, unsigned int* c) {
  EXPECT_EQ(sensor, nvml::kTemperatureGpu);
  if (fake.temperature_fails) return 15;  // NVML_ERROR_GPU_IS_LOST
  *c = d == kDevice ? 63 : 70;
  return nvml::kSuccess;
}
const char* fake_error_string(nvml::Return r) {
  return r == 9 ? "Driver Not Loaded" : "Invalid Argument";
}

const NvmlApi kFakeApi = {fake_init,  fake_shutdown,    fake_handle,      fake_handle_by_bus,
                          fake_name,  fake_util,        fake_memory,      fake_pcie,
                          fake_power, fake_temperature, fake_error_string};

class Nvml : public testing::Test {
 protected:
  void SetUp() override { fake = FakeGpu{}; }
  void TearDown() override { EXPECT_EQ(fake.sessions, 0) << "every nvmlInit is shut down"; }
};

// This machine has no NVIDIA driver: loading fails with a message that says so, and a sampler
// asked for the GPU runs without any GPU key.
TEST_F(Nvml, WithoutTheDriverOpenFailsAndTheSamplerLeavesGpuKeysOut) {
  if (load_nvml().ok()) GTEST_SKIP() << "this machine has NVML";
  auto gpu = GpuMonitor::open(0);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(gpu.status().message().find("libnvidia-ml.so.1"), std::string::npos)
      << gpu.status().message();
  EXPECT_NE(gpu.status().message().find("driver"), std::string::npos) << gpu.status().message();

  TierCounters counters;
  counters.add(Tier::kHbm, Category::kWeights, 1 << 20);
  TelemetrySamplerOptions opt;
  opt.gpu_index = 0;
  TelemetrySampler sampler(counters, nullptr, opt);
  EXPECT_EQ(sampler.gpu_status().code(), ErrorCode::kUnsupported);
  // The run's GPUs named: NVML's one reason for all of them, and each GPU's entry with what the
  // backend reads of its memory.
  TelemetrySamplerOptions both;
  both.gpus = {{0, "0000:01:00.0", {}},
               {1, "0000:02:00.0", [] {
                  return std::optional<DeviceMemory>(DeviceMemory{80ull << 30, 60ull << 30});
                }}};
  TelemetrySampler two(counters, nullptr, both);
  EXPECT_EQ(two.gpu_status().message(), load_nvml().status().message());
  const SampleEvent e = sample_event_from_json(two.sample_once());
  ASSERT_EQ(e.gpus.size(), 2u);
  EXPECT_FALSE(e.gpus[0].hbm_used_bytes.has_value());
  EXPECT_EQ(e.gpus[1].hbm_used_bytes, std::optional<uint64_t>(20ull << 30));
  EXPECT_FALSE(e.gpus[1].util_percent.has_value());
  EXPECT_EQ(e.gpu_mem_used_bytes, std::optional<uint64_t>(20ull << 30));
  EXPECT_FALSE(e.gpu_util_pct.has_value());

  Json s = sampler.sample_once();
  for (const char* key : {"gpu_util_pct", "gpu_mem_used_bytes", "gpu_mem_total_bytes",
                          "pcie_tx_gbps", "pcie_rx_gbps", "gpu_power_w", "gpu_temp_c"}) {
    EXPECT_FALSE(s.contains(key)) << key;
  }
  EXPECT_EQ(s["tiers"]["hbm"]["weights_bytes"], 1 << 20);  // the engine's own HBM accounting
}

TEST_F(Nvml, MonitorReadsEveryMetricWithItsUnit) {
  auto gpu = GpuMonitor::open(0, kFakeApi);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  EXPECT_EQ(fake.sessions, 1);
  EXPECT_EQ(gpu->name(), "NVIDIA H100 80GB HBM3");
  GpuSample s = gpu->sample();
  EXPECT_EQ(s.util_pct, 87.0);
  EXPECT_EQ(s.mem_used_bytes, 50ull << 30);
  EXPECT_EQ(s.mem_total_bytes, 80ull << 30);
  ASSERT_TRUE(s.pcie_tx_gbps && s.pcie_rx_gbps);
  EXPECT_DOUBLE_EQ(*s.pcie_tx_gbps, 1'000'000 * 1024.0 / 1e9);  // KB/s, 1 KB = 1024 bytes
  EXPECT_DOUBLE_EQ(*s.pcie_rx_gbps, 40'000'000 * 1024.0 / 1e9);
  EXPECT_DOUBLE_EQ(*s.power_w, 412.5);  // from milliwatts
  EXPECT_EQ(s.temp_c, 63.0);
}

TEST_F(Nvml, MissingMetricsAreAbsentAndUnsupportedOnesAreNotAskedAgain) {
  fake.power_supported = false;
  fake.temperature_fails = true;
  auto gpu = GpuMonitor::open(0, kFakeApi);
  ASSERT_TRUE(gpu.ok());
  GpuSample first = gpu->sample();
  EXPECT_FALSE(first.power_w.has_value());
  EXPECT_FALSE(first.temp_c.has_value());
  EXPECT_TRUE(first.util_pct.has_value());
  // A transient failure is asked again; "not supported" is final.
  fake.temperature_fails = false;
  GpuSample second = gpu->sample();
  EXPECT_EQ(second.temp_c, 63.0);
  EXPECT_FALSE(second.power_w.has_value());
  EXPECT_EQ(fake.power_calls, 1);
}

// The trainer names its GPU by the PCI address the CUDA backend reports, so NVML watches the GPU
// that trains whatever CUDA_VISIBLE_DEVICES and the device ordering say.
TEST_F(Nvml, OpensTheGpuAtAPciAddress) {
  auto gpu = GpuMonitor::open(std::string("0000:4A:00.0"), kFakeApi);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  EXPECT_EQ(gpu->name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpu->sample().util_pct, 87.0);

  auto other = GpuMonitor::open(std::string("0000:01:00.0"), kFakeApi);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(other.status().message().find("no GPU at PCI address 0000:01:00.0"), std::string::npos)
      << other.status().message();

  TelemetrySamplerOptions opt;
  opt.gpu_pci_bus_id = "0000:4A:00.0";
  opt.gpu_index = 3;  // ignored: the address wins
  opt.nvml = &kFakeApi;
  TierCounters counters;
  TelemetrySampler sampler(counters, nullptr, opt);
  EXPECT_TRUE(sampler.gpu_status().ok()) << sampler.gpu_status().to_string();
  EXPECT_EQ(sampler.sample_once().value("gpu_util_pct", -1.0), 87.0);
}

TEST_F(Nvml, OpenFailuresSayWhyAndShutDown) {
  auto missing = GpuMonitor::open(3, kFakeApi);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no GPU at NVML index 3"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(fake.sessions, 0);

  fake.init_result = 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  auto no_driver = GpuMonitor::open(0, kFakeApi);
  ASSERT_FALSE(no_driver.ok());
  EXPECT_EQ(no_driver.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(no_driver.status().message().find("Driver Not Loaded"), std::string::npos)
      << no_driver.status().message();
}

TEST_F(Nvml, MovedMonitorShutsDownOnce) {
  auto gpu = GpuMonitor::open(0, kFakeApi);
  ASSERT_TRUE(gpu.ok());
  {
    GpuMonitor moved = std::move(gpu).value();
    EXPECT_EQ(fake.sessions, 1);
    EXPECT_EQ(moved.name(), "NVIDIA H100 80GB HBM3");
  }
  EXPECT_EQ(fake.sessions, 0);
}

TEST_F(Nvml, SamplerWritesTheGpuKeys) {
  TierCounters counters;
  counters.add(Tier::kHbm, Category::kCheckpoints, 3 << 20);
  TelemetrySamplerOptions opt;
  opt.gpu_index = 0;
  opt.nvml = &kFakeApi;
  {
    TelemetrySampler sampler(counters, nullptr, opt);
    EXPECT_TRUE(sampler.gpu_status().ok());
    Json s = sampler.sample_once();
    EXPECT_EQ(s["gpu_util_pct"].get<double>(), 87.0);
    EXPECT_EQ(s["gpu_mem_used_bytes"].get<std::uint64_t>(), 50ull << 30);
    EXPECT_EQ(s["gpu_mem_total_bytes"].get<std::uint64_t>(), 80ull << 30);
    EXPECT_NEAR(s["pcie_rx_gbps"].get<double>(), 40.96, 1e-9);
    EXPECT_NEAR(s["pcie_tx_gbps"].get<double>(), 1.024, 1e-9);
    EXPECT_DOUBLE_EQ(s["gpu_power_w"].get<double>(), 412.5);
    EXPECT_EQ(s["gpu_temp_c"].get<double>(), 63.0);
    EXPECT_EQ(s["tiers"]["hbm"]["checkpoints_bytes"], 3 << 20);
  }
  EXPECT_EQ(fake.sessions, 0);
}

TEST_F(Nvml, SamplerFallsBackOnTheBackendsDeviceMemory) {
  fake.init_result = 9;
  TierCounters counters;
  TelemetrySamplerOptions opt;
  opt.gpu_index = 0;
  opt.nvml = &kFakeApi;
  opt.device_memory = [] {
    return std::optional<DeviceMemory>(DeviceMemory{80ull << 30, 60ull << 30});
  };
  TelemetrySampler sampler(counters, nullptr, opt);
  EXPECT_FALSE(sampler.gpu_status().ok());
  Json s = sampler.sample_once();
  EXPECT_EQ(s["gpu_mem_used_bytes"].get<std::uint64_t>(), 20ull << 30);
  EXPECT_EQ(s["gpu_mem_total_bytes"].get<std::uint64_t>(), 80ull << 30);
  EXPECT_FALSE(s.contains("gpu_util_pct"));
  EXPECT_FALSE(s.contains("pcie_rx_gbps"));
}

// Data parallel: each of the run's GPUs by its CUDA index, opened by PCI address, in "gpus"; the
// top-level keys are the host's totals. A GPU NVML cannot find keeps its entry with the backend's
// memory reading, and gpu_status() names it.
TEST_F(Nvml, SamplerListsEveryGpuOfTheRunAndTheHostTotals) {
  TierCounters counters;
  TelemetrySamplerOptions opt;
  opt.nvml = &kFakeApi;
  opt.gpus = {{0, "0000:4A:00.0", {}},
              {1, "0000:4B:00.0", {}},
              {3, "0000:01:00.0", [] {
                 return std::optional<DeviceMemory>(DeviceMemory{40ull << 30, 30ull << 30});
               }}};
  {
    TelemetrySampler sampler(counters, nullptr, opt);
    EXPECT_EQ(sampler.gpu_status().code(), ErrorCode::kNotFound);
    EXPECT_EQ(sampler.gpu_status().message().rfind("GPU 3: ", 0), 0u)
        << sampler.gpu_status().message();
    const SampleEvent s = sample_event_from_json(sampler.sample_once());
    ASSERT_EQ(s.gpus.size(), 3u);
    EXPECT_EQ(s.gpus[0].index, 0);
    EXPECT_EQ(s.gpus[0].util_percent, 87.0);
    EXPECT_EQ(s.gpus[0].hbm_used_bytes, std::optional<uint64_t>(50ull << 30));
    EXPECT_EQ(s.gpus[0].hbm_total_bytes, std::optional<uint64_t>(80ull << 30));
    EXPECT_NEAR(*s.gpus[0].pcie_rx_bytes_per_s, 40'000'000 * 1024.0, 1);
    EXPECT_NEAR(*s.gpus[0].pcie_tx_bytes_per_s, 1'000'000 * 1024.0, 1);
    EXPECT_EQ(s.gpus[1].index, 1);
    EXPECT_EQ(s.gpus[1].util_percent, 41.0);
    EXPECT_EQ(s.gpus[1].hbm_used_bytes, std::optional<uint64_t>(20ull << 30));
    EXPECT_NEAR(*s.gpus[1].pcie_rx_bytes_per_s, 10'000'000 * 1024.0, 1);
    EXPECT_EQ(s.gpus[2].index, 3);  // not in NVML: the backend's memory, nothing else
    EXPECT_EQ(s.gpus[2].hbm_used_bytes, std::optional<uint64_t>(10ull << 30));
    EXPECT_EQ(s.gpus[2].hbm_total_bytes, std::optional<uint64_t>(40ull << 30));
    EXPECT_FALSE(s.gpus[2].util_percent.has_value());
    EXPECT_FALSE(s.gpus[2].pcie_rx_bytes_per_s.has_value());
    // The host: memory over all three, PCIe and power over the two NVML reads, the mean busy
    // and the hottest die.
    EXPECT_EQ(s.gpu_mem_used_bytes, std::optional<uint64_t>(80ull << 30));
    EXPECT_EQ(s.gpu_mem_total_bytes, std::optional<uint64_t>(200ull << 30));
    EXPECT_NEAR(*s.pcie_rx_gbps, 50'000'000 * 1024.0 / 1e9, 1e-9);
    EXPECT_NEAR(*s.pcie_tx_gbps, 3'000'000 * 1024.0 / 1e9, 1e-9);
    EXPECT_EQ(s.gpu_util_pct, 64.0);
    EXPECT_DOUBLE_EQ(*s.gpu_power_w, 825.0);
    EXPECT_EQ(s.gpu_temp_c, 70.0);
  }
  // One GPU: its message as it was, without naming it.
  opt.gpus = {{0, "0000:01:00.0", {}}};
  {
    TelemetrySampler sampler(counters, nullptr, opt);
    EXPECT_EQ(sampler.gpu_status().message().rfind("GPU telemetry unavailable: no GPU at PCI", 0),
              0u)
        << sampler.gpu_status().message();
  }
  EXPECT_EQ(fake.sessions, 0);
}

}  // namespace
}  // namespace spillway
