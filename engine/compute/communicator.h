// Communicator: one device's end of a group of devices in this process that sum their gradients
// among themselves (docs/architecture.md, "Data parallel"). Rank r of a group of N drives device
// group[r]; the engine of each rank calls the same collectives in the same order on its own
// thread, as NCCL requires.
//
// On one machine the one collective the trainer needs is a reduce-scatter: every rank holds a
// whole block's gradient, each ends with the sum over ranks of its 1/N share, and brings only
// that share down to the host (ZeRO's partitioned gradients: the host link carries a block's
// gradient once per step whatever N is). Past one machine, where each block's state lives on one
// machine, a reduce into the GPU that carries the block and a broadcast of its weights from there.
// The CUDA group is NCCL (loaded at run time, so one-GPU and CPU machines need
// none of it); the CPU group sums in host memory across the ranks' threads, so the data-parallel
// schedule runs in the CPU tests.
//
// Determinism: for a given group (its size and, on CUDA, NCCL's choice of algorithm for that
// topology) the same inputs give the same bits; the sum's order differs from a one-device run, so
// N ranks agree with one device within float rounding, not bit for bit.
// Errors: kInvalidArgument for bad arguments; kUnsupported when the group cannot be made (no NCCL,
// devices of different kinds, a device twice); kInternal for a collective that failed or was
// aborted, surfacing like any asynchronous failure at the next synchronize of its stream.
// Thread-safety: one thread per rank calls its communicator; abort() may be called from any thread.
// Ownership: a communicator borrows its device, which must outlive it.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/device.h"
#include "core/status.h"

namespace spillway::compute {

class Backend;

// The run's worker processes, one per machine, as the communicators of a group that spans them
// see them (host-group.h is the implementation): this process's index and the count, and an
// all-gather of a few bytes between them, for what NCCL cannot carry itself (its unique id).
// Errors: kIo when a process left, the group was aborted or `timeout_s` passed (<= 0: none).
// How long the processes of a run wait for each other to join a group (the worker's HostGroup,
// NCCL's unique id): a Slurm job's machines start seconds to minutes apart.
inline constexpr double kProcessJoinTimeoutS = 600;

class ProcessExchange {
 public:
  virtual ~ProcessExchange() = default;
  virtual int process() const = 0;
  virtual int processes() const = 0;
  // Every process's `mine`, in process order.
  virtual Result<std::vector<std::string>> all_gather(std::string_view mine, double timeout_s) = 0;
  // Whether the group still stands, without waiting: the error the next all_gather would return
  // once a process left or the group was aborted, else ok (also while a round is in flight on
  // another thread, which sees it itself). Any thread: a step's watchdog asks it while the GPUs
  // wait in NCCL for a machine that is gone.
  virtual Status check() { return {}; }
  virtual void abort() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;

  // In place: `buffer` is [ranks() · count] fp32 on this rank's device. Afterwards
  // buffer[rank·count, (rank + 1)·count) holds, element by element, the sum over every rank's
  // buffer of that range; the rest of `buffer` is undefined. Enqueued on `stream` of this rank's
  // device; every rank calls it with the same count, in the same order among its collectives.
  virtual Status reduce_scatter_sum(float* buffer, size_t count, StreamId stream) = 0;

  // Past one machine with the host state sharded by block (docs/architecture.md, "Past one
  // machine"): the GPUs that hold no copy of a block's state take its weights from the one that
  // uploaded them, and its gradient's sum goes to that one alone.
  //
  // In place: afterwards rank `root`'s `buffer` ([count] fp32) holds, element by element, the sum
  // over every rank's buffer, in rank order on the CPU backend (the bits of reduce_scatter_sum's
  // shares); the other ranks' buffers are undefined. Enqueued as reduce_scatter_sum.
  virtual Status reduce_sum(float* buffer, size_t count, int root, StreamId stream) = 0;
  // In place: afterwards every rank's `buffer` ([bytes] on its device) holds rank `root`'s bytes.
  // Enqueued as reduce_scatter_sum.
  virtual Status broadcast(void* buffer, size_t bytes, int root, StreamId stream) = 0;

  // Stops the group: collectives in flight on any rank end with an error instead of waiting for a
  // rank that will never come (a rank that failed or was stopped half-way through a step), and so
  // do later ones; the group cannot be used again. Thread-safe, idempotent.
  virtual void abort() = 0;
};

// One communicator per backend, rank i on group[i] (rank order is the order of the list). All
// backends of one kind, each a different device; a group of one is allowed (its collective only
// keeps the buffer). kUnsupported says what is missing ("NCCL (libnccl.so.2) was not found: ...").
//
// With `processes` (a group of more than one process; null: this process alone) the group spans
// every process, each calling with its own devices, the same count of them on every process: the
// group's ranks are machine-major, process p's group[i] is rank p · group.size() + i, and ranks()
// is processes · group.size(). Every process must call it at the same point (it exchanges NCCL's
// unique id through `processes`), which must outlive the communicators.
Result<std::vector<std::unique_ptr<Communicator>>> make_communicators(
    std::span<Backend* const> group, ProcessExchange* processes = nullptr);

}  // namespace spillway::compute
