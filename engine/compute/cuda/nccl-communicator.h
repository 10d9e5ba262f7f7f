// NCCL groups for the CUDA backend (compute/communicator.h). NCCL is opened with dlopen the first
// time a group is made, so the module (and a one-GPU run) needs no NCCL: $SPILLWAY_NCCL_LIBRARY
// (a path to libnccl.so.2) when set, else libnccl.so.2 on the loader's path (Debian's libnccl2,
// the CUDA toolkit's lib64, or the pip wheel nvidia-nccl-cu13 through LD_LIBRARY_PATH).
//
// One process drives every GPU of the group on this machine, one thread each (ncclCommInitAll, or
// ncclCommInitRank for a group across machines), so the group's communicators are made together.
// The collectives are in place on the rank's stream; NCCL's reductions are deterministic for a
// given group and NCCL version (ring or tree, chosen by size and topology, the same choice each
// time). abort() is ncclCommAbort, which ends kernels waiting for a peer that will never come
// (NCCL's documented way out of a hang). Thread-safety: as Communicator.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "compute/communicator.h"

namespace spillway::compute {

class CudaBackend;

// One communicator per GPU of `group` (rank order), or kUnsupported saying why NCCL is missing.
// With `processes` the group spans them (communicator.h, make_communicators): process 0 makes
// NCCL's unique id, every process gets it through `processes` and opens its GPUs' ranks with
// ncclCommInitRank, inside one ncclGroupStart/End (one thread, several GPUs). NCCL picks its
// transport between machines (InfiniBand, RoCE or sockets: NCCL_SOCKET_IFNAME, NCCL_IB_HCA).
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<CudaBackend* const> group, ProcessExchange* processes = nullptr);

}  // namespace spillway::compute
