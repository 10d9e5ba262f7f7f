// CPU backends for the streaming-engine tests, shared by the golden and SSD tests.
#pragma once

#include <cstddef>
#include <memory>

#include "compute/cpu/cpu-backend.h"
#include "train/streaming-engine.h"

namespace spillway::testing {

// A CPU backend whose "device" holds just what the engine needs for `config` on `layout` plus
// `extra_bytes`: with keep_checkpoints_on_device, every layer streams and the checkpoints that do
// not fit in `extra_bytes` go to the host. `strict`: the strict stream mode (each stream's work
// waits until someone waits for it) with poisoned allocations, so that a missing stream_wait_event
// or synchronize, or a read of memory never written, fails the test.
inline std::unique_ptr<compute::Backend> engine_cpu_backend(const ParameterLayout& layout,
                                                            const StreamingConfig& config,
                                                            bool strict,
                                                            size_t extra_bytes = 1024) {
  const uint64_t need =
      StreamingEngine::required_device_bytes(layout, config, *compute::make_cpu_backend());
  compute::CpuBackendOptions options;
  options.device_capacity_bytes = need + extra_bytes;
  options.strict_streams = strict;
  options.poison_allocations = strict;
  return compute::make_cpu_backend(options);
}

}  // namespace spillway::testing
