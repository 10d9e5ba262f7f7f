#include "worker/bench-ops.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "train/machine-probe.h"

namespace spillway::worker {
namespace {

using nlohmann::json;

// Device memory freed when it goes.
struct DeviceFree {
  compute::Device* dev;
  void operator()(void* p) const { dev->device_free(p); }
};
using DeviceMemory = std::unique_ptr<void, DeviceFree>;

Result<DeviceMemory> device_memory(compute::Device& dev, size_t bytes) {
  SPW_ASSIGN_OR_RETURN(void* p, dev.device_alloc(bytes));
  return DeviceMemory(p, DeviceFree{&dev});
}

// Bytes read plus written per second of copy_d2d of `bytes`: `reps` copies after one warm-up,
// between two timing events on stream 0.
Result<double> copy_bytes_per_s(compute::Device& dev, size_t bytes, int reps) {
  SPW_ASSIGN_OR_RETURN(DeviceMemory src, device_memory(dev, bytes));
  SPW_ASSIGN_OR_RETURN(DeviceMemory dst, device_memory(dev, bytes));
  SPW_RETURN_IF_ERROR(dev.fill_zero(src.get(), bytes, 0));
  SPW_RETURN_IF_ERROR(dev.copy_d2d(dst.get(), src.get(), bytes, 0));
  SPW_ASSIGN_OR_RETURN(compute::Event start, dev.create_event(true));
  SPW_ASSIGN_OR_RETURN(compute::Event end, dev.create_event(true));
  SPW_RETURN_IF_ERROR(dev.record_event(start, 0));
  for (int r = 0; r < reps; ++r) SPW_RETURN_IF_ERROR(dev.copy_d2d(dst.get(), src.get(), bytes, 0));
  SPW_RETURN_IF_ERROR(dev.record_event(end, 0));
  SPW_RETURN_IF_ERROR(dev.synchronize_event(end));
  SPW_ASSIGN_OR_RETURN(const double s, dev.elapsed_s(start, end));
  return 2.0 * static_cast<double>(bytes) * reps / std::max(s, 1e-9);
}

std::string format(const char* fmt, double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

}  // namespace

Result<OpCeilings> measure_op_ceilings(compute::Backend& backend) {
  const bool gpu = backend.facts().gpu;
  OpCeilings c;
  c.copy_bytes = gpu ? uint64_t{1} << 30 : uint64_t{64} << 20;
  SPW_ASSIGN_OR_RETURN(c.copy_bytes_per_s,
                       copy_bytes_per_s(backend.device(), c.copy_bytes, gpu ? 10 : 3));
  DeviceProbeSizes sizes;  // the GPU's: 8192³
  if (!gpu) sizes = {512, 5, size_t{1} << 20, 1};
  MachineProbe probe;
  SPW_RETURN_IF_ERROR(probe_device(backend, &probe, sizes));
  // The probe's workspace went with its buffers: the backend forgets it (CUDA refuses an empty
  // workspace, so it keeps the pointer until the engine hands over its own, before any op).
  (void)backend.set_workspace(nullptr, 0, compute::OpShapes{});
  c.gemm_flops_per_s = probe.compute_flops;
  c.gemm_n = sizes.gemm_n;
  return c;
}

json ops_json(const std::vector<OpFamilyTime>& families, const OpCeilings& ceilings) {
  // The compute stream: the GEMMs'.
  compute::StreamId compute = 0;
  for (const OpFamilyTime& f : families)
    if (f.family == OpFamily::kGemmForward && !f.streams.empty()) compute = *f.streams.begin();
  json rows = json::array();
  for (const OpFamilyTime& f : families) {
    const bool flops = op_family_counts_flops(f.family);
    const double s = std::max(f.seconds, 1e-12);
    const double rate = flops ? f.flops / s / 1e12 : f.bytes / s / 1e9;
    const double ceiling =
        flops ? ceilings.gemm_flops_per_s / 1e12 : ceilings.copy_bytes_per_s / 1e9;
    json shapes = json::array();
    for (const std::string& shape : f.shapes) shapes.push_back(shape);
    rows.push_back(
        {{"op", op_family_name(f.family)},
         {"calls", f.count},
         {"s", f.seconds},
         {flops ? "flops" : "bytes", flops ? f.flops : f.bytes},
         {"unit", flops ? "TFLOPS" : "GB/s"},
         {"rate", rate},
         {"ceiling", ceiling},
         {"ceiling_op", flops ? "gemm " + std::to_string(ceilings.gemm_n) + "^3"
                              : "copy_d2d " + std::to_string(ceilings.copy_bytes >> 20) + " MiB"},
         {"fraction", ceiling > 0 ? rate / ceiling : 0.0},
         {"shapes", shapes},
         {"overlapped", f.streams != std::set<compute::StreamId>{compute}}});
  }
  return rows;
}

json ops_sum_json(const json& ops, double step_s, double profiled_step_s) {
  double sum = 0;
  for (const json& row : ops)
    if (!row["overlapped"].get<bool>()) sum += row["s"].get<double>();
  return {{"s", sum},
          {"step_s", step_s},
          {"profiled_step_s", profiled_step_s},
          {"other_s", profiled_step_s - sum}};
}

void print_ops_table(std::ostream& out, const json& r) {
  char line[200];
  std::snprintf(line, sizeof(line), "  %-20s %7s %9s %12s %14s %10s %8s\n", "op (one step)",
                "calls", "time s", "work", "rate", "ceiling", "of it");
  out << line;
  for (const json& row : r["ops"]) {
    const bool flops = row.contains("flops");
    const double work = flops ? row["flops"].get<double>() : row["bytes"].get<double>();
    const std::string unit = row["unit"].get<std::string>();
    const std::string name =
        row["op"].get<std::string>() + (row["overlapped"].get<bool>() ? " *" : "");
    std::snprintf(line, sizeof(line), "  %-20s %7lld %9.4g %12s %14s %10s %8.2f\n", name.c_str(),
                  static_cast<long long>(row["calls"].get<int64_t>()), row["s"].get<double>(),
                  (format("%.3g", work) + (flops ? " FLOP" : " B")).c_str(),
                  (format("%.3g ", row["rate"].get<double>()) + unit).c_str(),
                  format("%.4g", row["ceiling"].get<double>()).c_str(),
                  row["fraction"].get<double>());
    out << line;
  }
  const json& sum = r["ops_sum"];
  std::snprintf(
      line, sizeof(line),
      "  %-20s %7s %9.4f of the profiled step's %.4f s (the timed steps': %.4f s); %.4f s "
      "outside the ops\n",
      "sum", "", sum["s"].get<double>(), sum["profiled_step_s"].get<double>(),
      sum["step_s"].get<double>(), sum["other_s"].get<double>());
  out << line;
  const json& c = r["op_ceilings"];
  out << "  ceilings, this process: copy_d2d of " << c["copy_bytes"].get<uint64_t>() / (1 << 20)
      << " MiB " << format("%.4g", c["copy_gb_s"].get<double>()) << " GB/s, GEMM "
      << c["gemm_n"].get<int>() << "^3 " << format("%.4g", c["gemm_tflops"].get<double>())
      << " TFLOPS; * off the compute stream (overlapped), not in the sum\n";
}

}  // namespace spillway::worker
