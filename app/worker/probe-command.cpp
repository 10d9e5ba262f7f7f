#include "worker/probe-command.h"

#include <nlohmann/json.hpp>
#include <ostream>

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
  if (as_json)
    io.out << j.dump() << std::endl;
  else
    io.out << (usable ? info.name : "no usable GPU: " + why) << std::endl;
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
      {"gpus", m->gpus},
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
      {"ssd_total_bytes", m->ssd_total_bytes}};
  io.out << (as_json ? j.dump() : j.dump(2)) << std::endl;
  return 0;
}

}  // namespace spillway::worker
