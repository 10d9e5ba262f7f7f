#include "compute/cpu/cpu-communicator.h"

#include <condition_variable>
#include <mutex>
#include <string>

#include "compute/cpu/cpu-backend.h"
#include "core/fail-point.h"
#include "core/thread-pool.h"

namespace spillway::compute::cpu {
namespace {

// What the ranks of one group share: the buffers of the collective under way and a reusable
// barrier (a generation count, so a fast rank's next arrival never mixes with a slow rank's last).
struct Group {
  explicit Group(int n) : ranks(n), buffers(n, nullptr) {}
  const int ranks;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<float*> buffers;  // [rank], set before the first barrier of a collective
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;

  Status aborted_error() const {
    return internal_error(
        "the collective was aborted: another device of the group failed or was stopped");
  }

  // Blocks until every rank has arrived, or the group is aborted.
  Status barrier() {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) return aborted_error();
    const uint64_t gen = generation;
    if (++arrived == ranks) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return {};
    }
    cv.wait(lock, [&] { return aborted || generation != gen; });
    return aborted ? aborted_error() : Status();
  }

  void abort() {
    std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    cv.notify_all();
  }
};

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<Group> group, CpuBackend& backend, int rank)
      : group_(std::move(group)), backend_(backend), rank_(rank) {}

  int rank() const override { return rank_; }
  int ranks() const override { return group_->ranks; }

  Status reduce_scatter_sum(float* buffer, size_t count, StreamId stream) override {
    if (!buffer && count > 0) return invalid_argument("reduce_scatter_sum: a null buffer");
    // A collective that fails as NCCL's would (SPILLWAY_FAIL_POINTS="collective.fail=fail@N").
    if (fail_point("collective.fail"))
      return internal_error("reduce-scatter failed: injected by SPILLWAY_FAIL_POINTS");
    return backend_.submit_work(stream, [group = group_, rank = rank_, buffer, count]() -> Status {
      {
        std::lock_guard<std::mutex> lock(group->mu);
        group->buffers[rank] = buffer;
      }
      SPW_RETURN_IF_ERROR(group->barrier());
      // This rank's share, summed over the ranks in rank order: the other ranks only read theirs.
      float* mine = buffer + static_cast<size_t>(rank) * count;
      std::vector<const float*> from(group->ranks);
      for (int r = 0; r < group->ranks; ++r)
        from[r] = group->buffers[r] + static_cast<size_t>(rank) * count;
      ThreadPool::global().parallel_for(
          count,
          [&](size_t lo, size_t hi) {
            for (size_t i = lo; i < hi; ++i) {
              float s = from[0][i];
              for (int r = 1; r < group->ranks; ++r) s += from[r][i];
              mine[i] = s;
            }
          },
          size_t{1} << 14);
      // Nobody writes its buffer again before every rank has read its share of it.
      return group->barrier();
    });
  }

  void abort() override { group_->abort(); }

 private:
  std::shared_ptr<Group> group_;
  CpuBackend& backend_;
  const int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(
    std::span<CpuBackend* const> group) {
  auto shared = std::make_shared<Group>(static_cast<int>(group.size()));
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t r = 0; r < group.size(); ++r)
    out.push_back(std::make_unique<CpuCommunicator>(shared, *group[r], static_cast<int>(r)));
  return out;
}

}  // namespace spillway::compute::cpu
