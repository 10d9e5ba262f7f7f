#include "compute/cuda/nccl-communicator.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "compute/cuda/cuda-backend.h"
#include "core/fail-point.h"

#if SPILLWAY_HAVE_NCCL
#include <nccl.h>
#endif

namespace spillway::compute {

#if !SPILLWAY_HAVE_NCCL

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<CudaBackend* const>, ProcessExchange*) {
  return unsupported(
      "this build of the CUDA backend has no NCCL support (nccl.h was not found when it was "
      "built): it trains on one GPU only; install libnccl-dev and rebuild for several");
}

#else

namespace {

// The NCCL functions the group uses, from the library opened at run time.
struct Nccl {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetLastError) last_error = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
  int version = 0;
};

Result<const Nccl*> load_nccl() {
  static Nccl nccl;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("SPILLWAY_NCCL_LIBRARY");
    const std::string path = env && *env ? env : "libnccl.so.2";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed, as the module
    if (!lib) {
      error = "NCCL (" + path + ") could not be opened: " + dlerror() +
              "; training on several GPUs needs NCCL 2.13 or newer: install libnccl2, or point "
              "SPILLWAY_NCCL_LIBRARY at libnccl.so.2";
      return;
    }
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    nccl.comm_init_all = reinterpret_cast<decltype(nccl.comm_init_all)>(sym("ncclCommInitAll"));
    nccl.comm_init_rank = reinterpret_cast<decltype(nccl.comm_init_rank)>(sym("ncclCommInitRank"));
    nccl.get_unique_id = reinterpret_cast<decltype(nccl.get_unique_id)>(sym("ncclGetUniqueId"));
    nccl.group_start = reinterpret_cast<decltype(nccl.group_start)>(sym("ncclGroupStart"));
    nccl.group_end = reinterpret_cast<decltype(nccl.group_end)>(sym("ncclGroupEnd"));
    nccl.comm_destroy = reinterpret_cast<decltype(nccl.comm_destroy)>(sym("ncclCommDestroy"));
    nccl.comm_abort = reinterpret_cast<decltype(nccl.comm_abort)>(sym("ncclCommAbort"));
    nccl.reduce_scatter = reinterpret_cast<decltype(nccl.reduce_scatter)>(sym("ncclReduceScatter"));
    nccl.reduce = reinterpret_cast<decltype(nccl.reduce)>(sym("ncclReduce"));
    nccl.broadcast = reinterpret_cast<decltype(nccl.broadcast)>(sym("ncclBroadcast"));
    nccl.error_string = reinterpret_cast<decltype(nccl.error_string)>(sym("ncclGetErrorString"));
    nccl.last_error = reinterpret_cast<decltype(nccl.last_error)>(sym("ncclGetLastError"));
    nccl.get_version = reinterpret_cast<decltype(nccl.get_version)>(sym("ncclGetVersion"));
    if (!nccl.comm_init_all || !nccl.comm_init_rank || !nccl.get_unique_id || !nccl.group_start ||
        !nccl.group_end || !nccl.comm_destroy || !nccl.comm_abort || !nccl.reduce_scatter ||
        !nccl.reduce || !nccl.broadcast || !nccl.error_string || !nccl.last_error ||
        !nccl.get_version) {
      error =
          path + " lacks NCCL functions this build needs (NCCL 2.13 or newer: ncclGetLastError)";
      return;
    }
    nccl.get_version(&nccl.version);
  });
  if (!error.empty()) return unsupported(error);
  return &nccl;
}

std::string nccl_error(const Nccl& nccl, ncclResult_t r, ncclComm_t comm, const char* what) {
  std::string s = std::string(what) + " failed: " + nccl.error_string(r);
  if (const char* last = nccl.last_error(comm); last && *last) s += " (" + std::string(last) + ")";
  return s;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const Nccl& nccl, ncclComm_t comm, CudaBackend& backend, int rank, int ranks)
      : nccl_(nccl), comm_(comm), backend_(backend), rank_(rank), ranks_(ranks) {}
  ~NcclCommunicator() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) nccl_.comm_destroy(comm_);
  }

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }

  Status reduce_scatter_sum(float* buffer, size_t count, StreamId stream) override {
    return collective(stream, "NCCL reduce-scatter", [&](cudaStream_t s) {
      return nccl_.reduce_scatter(buffer, buffer + static_cast<size_t>(rank_) * count, count,
                                  ncclFloat32, ncclSum, comm_, s);
    });
  }

  Status reduce_sum(float* buffer, size_t count, int root, StreamId stream) override {
    return collective(stream, "NCCL reduce", [&](cudaStream_t s) {
      return nccl_.reduce(buffer, buffer, count, ncclFloat32, ncclSum, root, comm_, s);
    });
  }

  Status broadcast(void* buffer, size_t bytes, int root, StreamId stream) override {
    return collective(stream, "NCCL broadcast", [&](cudaStream_t s) {
      return nccl_.broadcast(buffer, buffer, bytes, ncclUint8, root, comm_, s);
    });
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    nccl_.comm_abort(comm_);
  }

 private:
  // Enqueues `call` on the rank's stream, unless the group was aborted. The caller names the GPU
  // (DataParallelEngine).
  template <typename Call>
  Status collective(StreamId stream, const char* what, Call&& call) {
    SPW_ASSIGN_OR_RETURN(cudaStream_t s, backend_.cuda_stream(stream, what));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_)
        return internal_error(std::string(what) +
                              ": the group was aborted (another GPU failed or was stopped)");
    }
    // An NCCL failure on demand (SPILLWAY_FAIL_POINTS="collective.fail=fail@N"): the fault tests.
    if (fail_point("collective.fail"))
      return internal_error(std::string(what) + " failed: injected by SPILLWAY_FAIL_POINTS");
    const ncclResult_t r = call(s);
    if (r != ncclSuccess) return internal_error(nccl_error(nccl_, r, comm_, what));
    return {};
  }

  const Nccl& nccl_;
  ncclComm_t comm_;
  CudaBackend& backend_;
  const int rank_, ranks_;
  std::mutex mu_;
  bool aborted_ = false;
};

// The group's NCCL communicators across `processes`: process 0's unique id to every process, the
// same count of GPUs on each (checked, since the ranks' numbering rests on it), then this process's
// ranks opened together.
Result<std::vector<ncclComm_t>> init_across_processes(const Nccl& nccl,
                                                      std::span<CudaBackend* const> group,
                                                      ProcessExchange& processes) {
  const int n = static_cast<int>(group.size());
  const int p = processes.process();
  ncclUniqueId id{};
  if (p == 0) {
    if (const ncclResult_t r = nccl.get_unique_id(&id); r != ncclSuccess)
      return internal_error(nccl_error(nccl, r, nullptr, "ncclGetUniqueId"));
  }
  std::string mine(reinterpret_cast<const char*>(&id), sizeof(id));
  mine += std::to_string(n);
  // NCCL's own bootstrap waits for every rank; a process that never comes ends this one's wait
  // within the same time (kIo).
  SPW_ASSIGN_OR_RETURN(const std::vector<std::string> all,
                       processes.all_gather(mine, kProcessJoinTimeoutS));
  for (int q = 0; q < static_cast<int>(all.size()); ++q) {
    if (all[q].substr(sizeof(id)) != std::to_string(n))
      return invalid_argument("process " + std::to_string(q) + " runs " +
                              all[q].substr(sizeof(id)) + " GPUs and process " + std::to_string(p) +
                              " runs " + std::to_string(n) +
                              ": every machine of a run must use the same number "
                              "(placement.devices)");
  }
  std::memcpy(&id, all[0].data(), sizeof(id));
  const int ranks = n * processes.processes();
  std::vector<ncclComm_t> comms(n, nullptr);
  nccl.group_start();
  ncclResult_t r = ncclSuccess;
  int unset_device = -1;  // a GPU that could not be made current: the group is closed first
  for (int i = 0; i < n && r == ncclSuccess && unset_device < 0; ++i) {
    if (cudaSetDevice(group[i]->ordinal()) != cudaSuccess)
      unset_device = group[i]->ordinal();
    else
      r = nccl.comm_init_rank(&comms[i], ranks, id, p * n + i);
  }
  if (const ncclResult_t end = nccl.group_end(); r == ncclSuccess) r = end;
  if (unset_device >= 0)
    return internal_error("cudaSetDevice(" + std::to_string(unset_device) + ") failed");
  if (r != ncclSuccess)
    return internal_error(nccl_error(nccl, r, nullptr, "ncclCommInitRank") + " for " +
                          std::to_string(ranks) + " GPUs on " +
                          std::to_string(processes.processes()) + " machines");
  return comms;
}

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<CudaBackend* const> group, ProcessExchange* processes) {
  SPW_ASSIGN_OR_RETURN(const Nccl* nccl, load_nccl());
  const int n = static_cast<int>(group.size());
  std::vector<ncclComm_t> comms(n, nullptr);
  int first_rank = 0, ranks = n;
  if (processes && processes->processes() > 1) {
    SPW_ASSIGN_OR_RETURN(comms, init_across_processes(*nccl, group, *processes));
    first_rank = processes->process() * n;
    ranks = n * processes->processes();
  } else {
    std::vector<int> devices;
    for (CudaBackend* b : group) devices.push_back(b->ordinal());
    if (const ncclResult_t r = nccl->comm_init_all(comms.data(), n, devices.data());
        r != ncclSuccess)
      return internal_error(nccl_error(*nccl, r, nullptr, "ncclCommInitAll") + " for " +
                            std::to_string(n) + " GPUs");
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(
        std::make_unique<NcclCommunicator>(*nccl, comms[i], *group[i], first_rank + i, ranks));
  return out;
}

#endif  // SPILLWAY_HAVE_NCCL

}  // namespace spillway::compute
