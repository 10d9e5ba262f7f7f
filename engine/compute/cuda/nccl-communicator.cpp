#include "compute/cuda/nccl-communicator.h"

#include <dlfcn.h>

#include <cstdlib>
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
    std::span<CudaBackend* const>) {
  return unsupported(
      "this build of the CUDA backend has no NCCL support (nccl.h was not found when it was "
      "built): it trains on one GPU only; install libnccl-dev and rebuild for several");
}

#else

namespace {

// The NCCL functions the group uses, from the library opened at run time.
struct Nccl {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
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
    nccl.comm_destroy = reinterpret_cast<decltype(nccl.comm_destroy)>(sym("ncclCommDestroy"));
    nccl.comm_abort = reinterpret_cast<decltype(nccl.comm_abort)>(sym("ncclCommAbort"));
    nccl.reduce_scatter = reinterpret_cast<decltype(nccl.reduce_scatter)>(sym("ncclReduceScatter"));
    nccl.error_string = reinterpret_cast<decltype(nccl.error_string)>(sym("ncclGetErrorString"));
    nccl.last_error = reinterpret_cast<decltype(nccl.last_error)>(sym("ncclGetLastError"));
    nccl.get_version = reinterpret_cast<decltype(nccl.get_version)>(sym("ncclGetVersion"));
    if (!nccl.comm_init_all || !nccl.comm_destroy || !nccl.comm_abort || !nccl.reduce_scatter ||
        !nccl.error_string || !nccl.last_error || !nccl.get_version) {
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
    SPW_ASSIGN_OR_RETURN(cudaStream_t s, backend_.cuda_stream(stream, "reduce_scatter_sum"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_)
        return internal_error(
            "NCCL reduce-scatter: the group was aborted (another GPU failed or was stopped)");
    }
    // An NCCL failure on demand (SPILLWAY_FAIL_POINTS="collective.fail=fail@N"): the fault tests.
    // The caller names the GPU (DataParallelEngine).
    if (fail_point("collective.fail"))
      return internal_error("NCCL reduce-scatter failed: injected by SPILLWAY_FAIL_POINTS");
    const ncclResult_t r = nccl_.reduce_scatter(buffer, buffer + static_cast<size_t>(rank_) * count,
                                                count, ncclFloat32, ncclSum, comm_, s);
    if (r != ncclSuccess) return internal_error(nccl_error(nccl_, r, comm_, "NCCL reduce-scatter"));
    return {};
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    nccl_.comm_abort(comm_);
  }

 private:
  const Nccl& nccl_;
  ncclComm_t comm_;
  CudaBackend& backend_;
  const int rank_, ranks_;
  std::mutex mu_;
  bool aborted_ = false;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<CudaBackend* const> group) {
  SPW_ASSIGN_OR_RETURN(const Nccl* nccl, load_nccl());
  const int n = static_cast<int>(group.size());
  std::vector<int> devices;
  for (CudaBackend* b : group) devices.push_back(b->ordinal());
  std::vector<ncclComm_t> comms(n, nullptr);
  if (const ncclResult_t r = nccl->comm_init_all(comms.data(), n, devices.data()); r != ncclSuccess)
    return internal_error(nccl_error(*nccl, r, nullptr, "ncclCommInitAll") + " for " +
                          std::to_string(n) + " GPUs");
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_unique<NcclCommunicator>(*nccl, comms[r], *group[r], r, n));
  return out;
}

#endif  // SPILLWAY_HAVE_NCCL

}  // namespace spillway::compute
