#include "worker/probe-command.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "compute/backend-loader.h"
#include "worker/args.h"

namespace spillway::worker {
using nlohmann::json;

Result<MachineProbe> probe_for_backend(const std::string& ssd_dir, const std::string& kind,
                                       std::string* reason) {
  compute::BackendOptions options;
  options.kind = kind;
  SPW_ASSIGN_OR_RETURN(compute::BackendChoice choice, compute::make_backend(options));
  *reason = choice.reason;
  MachineProbe m = probe_machine(ssd_dir);
  // The CPU backend's compute and link are the host's, which probe_machine measured.
  if (!choice.backend->facts().gpu) return m;
  SPW_RETURN_IF_ERROR(probe_device(*choice.backend, &m));
  SPW_ASSIGN_OR_RETURN(m.adamw_params_per_s, measure_adamw(kAdamwProbeParams));
  return m;
}

namespace {

// Every GPU this process sees, by CUDA index — the index placement.devices names — as a JSON
// array of {index, name, total_bytes, pci_bus_id, compute_capability}, each also "usable" and, when
// not, "why" (an sm_75 card, a device in use by another exclusive process). Empty without a CUDA
// module, a driver or a GPU. The list comes from CUDA (cuda_device_count, then a backend per
// index), not NVML, which the telemetry loads too: NVML counts GPUs in PCI order and ignores
// CUDA_VISIBLE_DEVICES, so its indices are not the ones a job names, and it would list GPUs the
// CUDA backend cannot use. Each backend is a device context (about 0.3 s), released at once.
json list_gpus() {
  json gpus = json::array();
  const Result<int> count = compute::cuda_device_count();
  if (!count.ok()) return gpus;
  for (int i = 0; i < *count; ++i) {
    compute::BackendOptions options;
    options.kind = "cuda";
    options.cuda_device = i;
    Result<compute::BackendChoice> choice = compute::make_backend(options);
    json g = {{"index", i}, {"usable", choice.ok()}};
    if (choice.ok()) {
      const compute::DeviceInfo info = choice->backend->device_info();
      g["name"] = info.name;
      g["total_bytes"] = info.total_bytes;
      g["compute_capability"] = info.compute_capability;
      g["pci_bus_id"] = info.pci_bus_id;
      g["attention"] = info.attention;
    } else {
      g["why"] = choice.status().message();
    }
    gpus.push_back(std::move(g));
  }
  return gpus;
}

// "GPU 0: NVIDIA H100 80GB HBM3 · 79.1 GiB · sm_90 · 0000:01:00.0", one line a GPU, or "no GPUs".
std::string gpu_lines(const json& gpus) {
  if (gpus.empty()) return "GPUs: none";
  std::string text;
  for (const json& g : gpus) {
    text += (text.empty() ? "" : "\n") + std::string("GPU ") +
            std::to_string(g["index"].get<int>()) + ": ";
    if (!g["usable"].get<bool>()) {
      text += "not usable: " + g["why"].get<std::string>();
      continue;
    }
    char gib[32];
    std::snprintf(gib, sizeof(gib), "%.1f GiB", g["total_bytes"].get<double>() / (1ull << 30));
    text += g["name"].get<std::string>() + " · " + gib + " · sm_" +
            std::to_string(g["compute_capability"].get<int>()) + " · " +
            g["pci_bus_id"].get<std::string>();
  }
  return text;
}

}  // namespace

// `probe --gpu`: whether a usable CUDA GPU is there, without measuring anything (a second or so,
// the time the CUDA module takes to load): what the GUI's backend choice shows. Exit 0 either way.
int probe_gpu(bool as_json, CommandIo io) {
  compute::DeviceInfo info;
  std::string why;
  const bool usable = compute::probe_cuda(&info, &why);
  json j = {{"usable", usable}};
  if (usable) {
    j["name"] = info.name;
    j["total_bytes"] = info.total_bytes;
    j["compute_capability"] = info.compute_capability;
    j["pci_bus_id"] = info.pci_bus_id;
  } else {
    j["why"] = why;
  }
  j["gpus"] = list_gpus();
  if (as_json)
    io.out << j.dump() << std::endl;
  else
    io.out << (usable ? info.name : "no usable GPU: " + why) << "\n"
           << gpu_lines(j["gpus"]) << std::endl;
  return 0;
}

int run_probe(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--ssd-dir", "--backend"}, {"--json", "--gpu"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool as_json = args->has("--json");
  if (args->has("--gpu")) return probe_gpu(as_json, io);
  std::string reason;
  auto m = probe_for_backend(args->get("--ssd-dir").value_or("."),
                             args->get("--backend").value_or("auto"), &reason);
  if (!m.ok()) return report_failure(io, as_json, m.status());
  // Figures that were not measured are null, not 0.
  auto measured = [](double v, double scale) { return v > 0 ? json(v / scale) : json(nullptr); };
  json j = {
      {"backend", m->backend},
      {"backend_reason", reason},
      {"device", m->device.empty() ? json(nullptr) : json(m->device)},
      {"attention", m->attention.empty() ? json(nullptr) : json(m->attention)},
      {"nccl_bus_gbps", measured(m->nccl_bus_bytes_per_s, 1e9)},
      {"compute_gflops", m->compute_flops / 1e9},
      {"h2d_gbps", m->h2d_bytes_per_s / 1e9},
      {"d2h_gbps", measured(m->d2h_bytes_per_s, 1e9)},
      {"duplex_gbps", measured(m->duplex_bytes_per_s, 1e9)},
      {"host_mem_gbps", m->host_mem_bytes_per_s / 1e9},
      {"adamw_mparams_per_s", measured(m->adamw_params_per_s, 1e6)},
      {"ssd_gbps", measured(m->ssd_bytes_per_s, 1e9)},
      {"dram_total_bytes", m->dram_total_bytes},
      {"dram_available_bytes", m->dram_available_bytes},
      {"device_total_bytes", m->device_total_bytes ? json(m->device_total_bytes) : json(nullptr)},
      {"device_free_bytes", m->device_free_bytes ? json(m->device_free_bytes) : json(nullptr)},
      {"ssd_free_bytes", m->ssd_free_bytes},
      {"ssd_total_bytes", m->ssd_total_bytes},
      {"gpus", list_gpus()}};
  if (as_json)
    io.out << j.dump() << std::endl;
  else
    io.out << j.dump(2) << "\n" << gpu_lines(j["gpus"]) << std::endl;
  return 0;
}

}  // namespace spillway::worker
