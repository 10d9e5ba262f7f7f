// `spillway-worker probe`, and the machine measurement that `plan` shares with it.
#pragma once

#include <string>

#include "train/machine-probe.h"
#include "worker/commands.h"

namespace spillway::worker {

// The CPU AdamW is measured on this many parameters (4 GiB of state): far beyond the caches, as
// in a step, and about 0.1 s per pass on 16 cores.
inline constexpr size_t kAdamwProbeParams = size_t{256} << 20;

// probe_machine(ssd_dir), and when backend `kind` ("auto", "cpu", "cuda") gives a GPU also its
// probe_device figures and the CPU AdamW's rate. `reason` receives make_backend's line saying which
// backend was chosen and why. Errors: make_backend's (for "cuda" without a usable GPU), the
// device's.
Result<MachineProbe> probe_for_backend(const std::string& ssd_dir, const std::string& kind,
                                       std::string* reason);

int run_probe(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
