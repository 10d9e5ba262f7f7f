// DeviceSelection: which GPUs a run trains on (job.json's placement.devices; docs/architecture.md,
// "Data parallel"): all of the machine's, the first N, or a list of CUDA device indices. The job
// names a selection; the run resolves it against the GPUs present when it starts, so one job file
// serves a laptop and an eight-GPU node ("all").
//
// The JSON value is "all", an integer count >= 1, or a non-empty array of distinct indices >= 0.
// Thread-safety: plain values.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace spillway::job {

// At most this many GPUs in one process (NCCL's own limit per node is higher; no machine we know of
// has more than 16 GPUs).
inline constexpr int kMaxDevices = 64;

struct DeviceSelection {
  bool all = false;          // every GPU present
  int count = 1;             // the first `count` GPUs (when !all and indices is empty)
  std::vector<int> indices;  // these CUDA device indices, in this order (rank order)

  // "all", "2 GPUs", "GPUs 0, 2": for messages and the plan.
  std::string to_string() const;
  nlohmann::json to_json() const;  // the job.json value
  bool operator==(const DeviceSelection&) const = default;
};

// kInvalidArgument naming placement.devices and what is allowed.
Result<DeviceSelection> parse_device_selection(const nlohmann::json& value);

// The CUDA device indices, in rank order, on a machine with `available` GPUs. kInvalidArgument
// when the selection asks for more GPUs than there are, or for an index that does not exist
// ("placement.devices names GPU 3, but this machine has 2 (0 and 1); ...").
Result<std::vector<int>> resolve_devices(const DeviceSelection& selection, int available);

// The ranks of a run on the CPU backend: the selection's count ("all": 1), which runs the GPUs'
// data-parallel schedule on the host's cores (for tests). kInvalidArgument for a list of GPU
// indices, and for more than one rank unless the job chose the CPU backend itself
// (`backend_is_cpu`): a job that asks for GPUs on a machine without one is told so, not given CPU
// ranks.
Result<int> resolve_cpu_ranks(const DeviceSelection& selection, bool backend_is_cpu);

}  // namespace spillway::job
