// HostGroup: the worker processes of one run across machines (docs/architecture.md, "Past one
// machine"), one process per machine, and the one collective they need on the host: every process
// hands in a few bytes and gets every process's back, in rank order (an all-gather of strings).
// The run uses it to agree on what NCCL cannot carry: NCCL's unique id (rank 0's, for
// ncclCommInitRank), the step's loss and target counts, a stop asked for on any machine, and, on
// the CPU backend, the gradients themselves (compute/cpu/cpu-communicator.h).
//
// The transport is TCP through a rendezvous server that rank 0 runs on a thread of its own at the
// rendezvous address's port (all interfaces), as torch.distributed's TCPStore: every process,
// rank 0 included, keeps one connection to it. A round: each process sends its payload; once the
// server has every one it sends all of them, in rank order, to every process. One round at a
// time, in the same order on every process, as NCCL's collectives. (compute/rendezvous.h: the
// wire format and the server.)
//
// Any failure ends the group for every process: the server tells every process still connected
// why, then closes every connection, so no process waits for one that is gone.
// Errors: kInvalidArgument for a bad spec (rank outside [0, processes), an address without a
// port) and for processes that disagree (two claiming one rank, different process counts,
// different protocol versions: every process is told); kIo when the group cannot form within the
// timeout (which processes are missing, and the address), when a process leaves or the group is
// aborted mid-round ("process 1 left the group (connection closed)"), or when a round outlives
// its timeout (naming the processes that did not send): the whole run stops with one clear line,
// never a hang.
// Timeouts are the server's: it knows who is missing. A process gives up on its own only when the
// server has said nothing for its timeout and 10 s more (process 0's machine gone).
// Thread-safety: one thread calls join() and all_gather(); abort() may be called from any thread.
// Ownership: rank 0's HostGroup owns the server; its destructor ends the group for the others and
// waits until their machines have received why (at most 2 s for one that does not answer).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compute/communicator.h"
#include "core/status.h"

namespace spillway::compute {

// Which process this is among the run's processes, and where they meet.
struct ProcessGroupSpec {
  int rank = 0;            // 0 .. processes - 1; machine-major: rank 0 serves the rendezvous
  int processes = 1;       // one per machine
  std::string rendezvous;  // "host:port" of rank 0's server; "" with one process
  std::string source;      // where rank and count came from, for messages ("--rank/--processes",
                           // "SPILLWAY_RANK", "Slurm (SLURM_PROCID)", ...)
  bool multi() const { return processes > 1; }
};

// The spec from the worker's command line when it gave --rank or --processes (flags: the values
// of --rank, --processes and --rendezvous, -1/"" when absent), else from the environment `env`
// (name → value):
// - SPILLWAY_RANK, SPILLWAY_PROCESSES, SPILLWAY_RENDEZVOUS;
// - Slurm's srun: SLURM_PROCID, SLURM_NTASKS;
// - Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE; MPICH/Hydra: PMI_RANK, PMI_SIZE;
// - torchrun's RANK, WORLD_SIZE.
// The nearest launcher wins, in that order (torchrun's and mpirun's processes inherit a Slurm
// allocation's SLURM_PROCID, which is not their rank). A launcher's count alone of 1 is rank 0.
// Under a launcher the address is SPILLWAY_RENDEZVOUS, else MASTER_ADDR:MASTER_PORT (torchrun's
// and many Slurm scripts'). None of them: one process (rank 0 of 1). kInvalidArgument names the
// variable or flag that is wrong or missing (a count but no address, a rank out of range, a value
// that is not a number).
Result<ProcessGroupSpec> process_group_spec(int flag_rank, int flag_processes,
                                            const std::string& flag_rendezvous,
                                            const std::map<std::string, std::string>& env);
// The process's own environment, as a map for process_group_spec.
std::map<std::string, std::string> environment();

class HostGroup final : public ProcessExchange {
 public:
  // Joins the group: rank 0 starts the server and connects to it; the others connect, retrying
  // until `timeout_s` (the first machines of a Slurm job start seconds apart; <= 0: no limit).
  // Returns once every process has joined. A group of one process needs no address and opens no
  // socket. kIo names the processes that did not join, or the address that could not be reached;
  // rank 0's kIo also when the port is taken.
  static Result<std::unique_ptr<HostGroup>> join(const ProcessGroupSpec& spec, double timeout_s);
  ~HostGroup() override;

  int process() const override;
  int processes() const override;
  // One round: `mine` from this process, every process's payload back in rank order (this
  // process's included). Payloads may differ in size (up to 4 GiB each). Waits at most
  // `timeout_s` for the others once the server has this process's payload (<= 0: no limit).
  Result<std::vector<std::string>> all_gather(std::string_view mine, double timeout_s) override;
  // Outside a round the server sends nothing but a failure (a process left, the group ended):
  // this process's connection readable, or closed, means that, and check() returns it.
  Status check() override;
  // Ends the group for every process: this process's rounds in flight and later fail (kIo
  // "aborted"), and the server (on rank 0) closes every connection, so the others' rounds fail too
  // ("process K left the group"). Idempotent.
  void abort() override;

 private:
  struct Impl;
  explicit HostGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spillway::compute
