// NCCL groups for the CUDA backend (compute/communicator.h). NCCL is opened with dlopen the first
// time a group is made, so the module (and a one-GPU run) needs no NCCL: $SPILLWAY_NCCL_LIBRARY
// (a path to libnccl.so.2) when set, else libnccl.so.2 on the loader's path (Debian's libnccl2,
// the CUDA toolkit's lib64, or the pip wheel nvidia-nccl-cu13 through LD_LIBRARY_PATH).
//
// One process drives every GPU of the group, one thread each (ncclCommInitAll), so the group's
// communicators are made together. The reduce-scatter is in place on the rank's stream; NCCL's
// reductions are deterministic for a given group and NCCL version (ring or tree, chosen by size
// and topology, the same choice each time). abort() is ncclCommAbort, which ends kernels waiting
// for a peer that will never come (NCCL's documented way out of a hang).
// Thread-safety: as Communicator.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "compute/communicator.h"

namespace spillway::compute {

class CudaBackend;

// One communicator per GPU of `group` (rank order), or kUnsupported saying why NCCL is missing.
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<CudaBackend* const> group);

}  // namespace spillway::compute
