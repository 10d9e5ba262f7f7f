// The CPU backend's group of devices (communicator.h): the ranks are CpuBackends driven by one
// thread each, their "device" memory is host memory, so a reduce-scatter is a barrier at which
// every rank publishes its buffer, after which each rank sums its own share over all buffers in
// rank order (r = 0, 1, ..., N-1: deterministic), and a second barrier before anyone reuses its
// buffer. The work is submitted on the rank's stream like any op (strict mode queues it), so the
// engine's stream ordering is tested as on a GPU. Thread-safety: as Communicator.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "compute/communicator.h"

namespace spillway::compute {

class CpuBackend;

namespace cpu {

// One communicator per backend of `group` (every one a CpuBackend). With `processes` (a group
// across processes) one backend per process, whose collectives send the whole buffer to every
// process through `processes` (its rendezvous server: a star, fine for the small models the CPU
// backend trains, and the test of the GPUs' schedule across processes) and sum in rank order as
// above, so that the bits are those of the same ranks in one process. kUnsupported for several
// backends in a process of such a group.
Result<std::vector<std::unique_ptr<Communicator>>> make_cpu_communicators(
    std::span<CpuBackend* const> group, ProcessExchange* processes = nullptr);

}  // namespace cpu
}  // namespace spillway::compute
