#include "job/device-selection.h"

#include <algorithm>
#include <set>

namespace spillway::job {
using nlohmann::json;

namespace {

Status bad(const std::string& what) {
  return invalid_argument(
      "job.json: placement.devices: " + what +
      "; expected \"all\", a count of GPUs (1, 2, ...) or a list of GPU indices ([0, 2])");
}

}  // namespace

std::string DeviceSelection::to_string() const {
  if (all) return "all GPUs";
  if (indices.empty()) return count == 1 ? "1 GPU" : std::to_string(count) + " GPUs";
  std::string s = indices.size() == 1 ? "GPU " : "GPUs ";
  for (size_t i = 0; i < indices.size(); ++i) s += (i ? ", " : "") + std::to_string(indices[i]);
  return s;
}

json DeviceSelection::to_json() const {
  if (all) return "all";
  if (indices.empty()) return count;
  return indices;
}

Result<DeviceSelection> parse_device_selection(const json& v) {
  DeviceSelection s;
  if (v.is_string()) {
    if (v.get<std::string>() != "all") return bad("\"" + v.get<std::string>() + "\"");
    s.all = true;
    return s;
  }
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    if (n < 1 || n > kMaxDevices)
      return bad("a count must be in [1, " + std::to_string(kMaxDevices) + "], got " +
                 std::to_string(n));
    s.count = static_cast<int>(n);
    return s;
  }
  if (v.is_array()) {
    if (v.empty()) return bad("an empty list");
    if (v.size() > static_cast<size_t>(kMaxDevices))
      return bad("more than " + std::to_string(kMaxDevices) + " GPUs");
    std::set<int64_t> seen;
    for (const json& e : v) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= kMaxDevices)
        return bad("an index must be an integer in [0, " + std::to_string(kMaxDevices - 1) +
                   "], got " + e.dump());
      if (!seen.insert(e.get<int64_t>()).second) return bad("GPU " + e.dump() + " is listed twice");
      s.indices.push_back(static_cast<int>(e.get<int64_t>()));
    }
    s.count = static_cast<int>(s.indices.size());
    return s;
  }
  return bad("got " + v.dump());
}

Result<std::vector<int>> resolve_devices(const DeviceSelection& s, int available) {
  const std::string have = available == 1 ? "1 GPU" : std::to_string(available) + " GPUs";
  if (available < 1)
    return invalid_argument("placement.devices asks for " + s.to_string() +
                            ", but this machine has no usable GPU");
  std::vector<int> out;
  if (!s.indices.empty()) {
    for (int i : s.indices) {
      if (i >= available)
        return invalid_argument("placement.devices names GPU " + std::to_string(i) +
                                ", but this machine has " + have + " (indices 0 to " +
                                std::to_string(available - 1) +
                                "); `spillway-worker probe` "
                                "lists them");
    }
    return s.indices;
  }
  const int n = s.all ? available : s.count;
  if (n > available)
    return invalid_argument("placement.devices asks for " + std::to_string(n) +
                            " GPUs, but this machine has " + have + "; lower it, or use \"all\"");
  for (int i = 0; i < n; ++i) out.push_back(i);
  return out;
}

Result<int> resolve_cpu_ranks(const DeviceSelection& s, bool backend_is_cpu) {
  if (!s.indices.empty())
    return invalid_argument("placement.devices lists GPUs (" + s.to_string() +
                            ") but the run is on the CPU backend; set placement.devices to 1");
  const int n = s.all ? 1 : std::max(s.count, 1);
  if (n > 1 && !backend_is_cpu)
    return invalid_argument("placement.devices asks for " + std::to_string(n) +
                            " GPUs, but the run is on the CPU backend (no usable GPU); set "
                            "placement.devices to 1, or placement.backend to \"cpu\" for " +
                            std::to_string(n) + " CPU ranks");
  return n;
}

}  // namespace spillway::job
