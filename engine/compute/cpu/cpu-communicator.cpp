#include "compute/cpu/cpu-communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "compute/cpu/cpu-backend.h"
#include "core/fail-point.h"
#include "core/thread-pool.h"

namespace spillway::compute::cpu {
namespace {

// to[t][i] = from[0][i] + from[1][i] + ... for i < count, for every t: the sum over the ranks in
// rank order, the one order both groups use, so a group across processes gives the bits of the
// same ranks in one process.
void sum_in_rank_order(const std::vector<const float*>& from, size_t count,
                       const std::vector<float*>& to) {
  ThreadPool::global().parallel_for(
      count,
      [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) {
          float s = from[0][i];
          for (size_t r = 1; r < from.size(); ++r) s += from[r][i];
          for (float* t : to) t[i] = s;
        }
      },
      size_t{1} << 14);
}

// `root` is a rank of a group of `ranks`.
Status check_root(const char* what, int root, int ranks) {
  if (root >= 0 && root < ranks) return {};
  return invalid_argument(std::string(what) + ": root " + std::to_string(root) + " of " +
                          std::to_string(ranks) + " ranks");
}

// What every collective checks before it is enqueued: a buffer where there are bytes, and the
// fail point that fails it as NCCL's would (SPILLWAY_FAIL_POINTS="collective.fail=fail@N").
Status check_call(const char* what, const void* buffer, size_t count) {
  if (!buffer && count > 0) return invalid_argument(std::string(what) + ": a null buffer");
  if (fail_point("collective.fail"))
    return internal_error(std::string(what) + " failed: injected by SPILLWAY_FAIL_POINTS");
  return {};
}

// What the ranks of one group share: the buffers of the collective under way and a reusable
// barrier (a generation count, so a fast rank's next arrival never mixes with a slow rank's last).
struct Group {
  explicit Group(int n) : ranks(n), buffers(n, nullptr) {}
  const int ranks;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<void*> buffers;  // [rank], set before the first barrier of a collective
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
    return sum(buffer, count, stream, kOwn, "reduce-scatter");
  }

  Status reduce_sum(float* buffer, size_t count, int root, StreamId stream) override {
    SPW_RETURN_IF_ERROR(check_root("reduce", root, group_->ranks));
    const size_t share = (count + group_->ranks - 1) / group_->ranks;
    return sum(buffer, share, stream, root, "reduce", count);
  }

  Status broadcast(void* buffer, size_t bytes, int root, StreamId stream) override {
    SPW_RETURN_IF_ERROR(check_root("broadcast", root, group_->ranks));
    SPW_RETURN_IF_ERROR(check_call("broadcast", buffer, bytes));
    return backend_.submit_work(
        stream, [group = group_, rank = rank_, buffer, bytes, root]() -> Status {
          {
            std::lock_guard<std::mutex> lock(group->mu);
            group->buffers[rank] = buffer;
          }
          SPW_RETURN_IF_ERROR(group->barrier());
          if (rank != root) std::memcpy(buffer, group->buffers[root], bytes);
          return group->barrier();  // the root's buffer stays until every rank has its copy
        });
  }

  void abort() override { group_->abort(); }

 private:
  // Where the sums go: kOwn, or a rank (>= 0) that receives every share.
  static constexpr int kOwn = -1;

  // Each rank sums its share, `share` floats at rank · share (clipped to `total` floats), over
  // the ranks in rank order, into its own buffer or rank `to`'s: the ranks touch disjoint
  // ranges.
  Status sum(float* buffer, size_t share, StreamId stream, int to, const char* what,
             size_t total = SIZE_MAX) {
    SPW_RETURN_IF_ERROR(check_call(what, buffer, share));
    if (total == SIZE_MAX) total = share * group_->ranks;
    return backend_.submit_work(
        stream, [group = group_, rank = rank_, buffer, share, total, to]() -> Status {
          {
            std::lock_guard<std::mutex> lock(group->mu);
            group->buffers[rank] = buffer;
          }
          SPW_RETURN_IF_ERROR(group->barrier());
          const size_t begin = std::min(total, static_cast<size_t>(rank) * share);
          const size_t count = std::min(total, begin + share) - begin;
          auto at = [&](int r) { return static_cast<float*>(group->buffers[r]) + begin; };
          std::vector<const float*> from(group->ranks);
          for (int r = 0; r < group->ranks; ++r) from[r] = at(r);
          std::vector<float*> into;
          if (to == kOwn) into.push_back(at(rank));
          if (to >= 0) into.push_back(at(to));
          sum_in_rank_order(from, count, into);
          // Nobody writes its buffer again before every rank has read its share of it.
          return group->barrier();
        });
  }

  std::shared_ptr<Group> group_;
  CpuBackend& backend_;
  const int rank_;
};

// A rank of a group across processes, one CPU backend each: every collective sends this rank's
// whole buffer to every process and sums the ranks' in rank order, as Group does in one process.
class CpuProcessCommunicator final : public Communicator {
 public:
  CpuProcessCommunicator(ProcessExchange& processes, CpuBackend& backend)
      : processes_(processes), backend_(backend) {}

  int rank() const override { return processes_.process(); }
  int ranks() const override { return processes_.processes(); }

  Status reduce_scatter_sum(float* buffer, size_t count, StreamId stream) override {
    return sum(buffer, count * ranks(), static_cast<size_t>(rank()) * count, count, stream,
               "reduce-scatter");
  }
  Status reduce_sum(float* buffer, size_t count, int root, StreamId stream) override {
    SPW_RETURN_IF_ERROR(check_root("reduce", root, ranks()));
    // Every rank takes part in the exchange; only the root keeps the sum.
    return sum(buffer, count, 0, rank() == root ? count : 0, stream, "reduce");
  }
  Status broadcast(void* buffer, size_t bytes, int root, StreamId stream) override {
    SPW_RETURN_IF_ERROR(check_root("broadcast", root, ranks()));
    SPW_RETURN_IF_ERROR(check_call("broadcast", buffer, bytes));
    return backend_.submit_work(stream, [this, buffer, bytes, root]() -> Status {
      const bool mine = rank() == root;
      auto all = processes_.all_gather(
          std::string_view(mine ? static_cast<const char*>(buffer) : "", mine ? bytes : 0), 0);
      if (!all.ok()) return all.status().with_context("broadcast");
      const std::string& theirs = (*all)[root];
      if (theirs.size() != bytes)
        return internal_error("broadcast: process " + std::to_string(root) + " sent " +
                              std::to_string(theirs.size()) + " bytes, expected " +
                              std::to_string(bytes));
      if (!mine) std::memcpy(buffer, theirs.data(), bytes);
      return Status();
    });
  }
  void abort() override { processes_.abort(); }

 private:
  // Sums elements [begin, begin + count) of every rank's `total`-float buffer into this one's.
  Status sum(float* buffer, size_t total, size_t begin, size_t count, StreamId stream,
             const char* what) {
    SPW_RETURN_IF_ERROR(check_call(what, buffer, total));
    return backend_.submit_work(stream, [this, buffer, total, begin, count, what]() -> Status {
      // No time limit: DataParallelEngine's watchdog aborts a step that hangs.
      auto all = processes_.all_gather(
          std::string_view(reinterpret_cast<const char*>(buffer), total * sizeof(float)), 0);
      if (!all.ok()) return all.status().with_context(what);
      for (const std::string& b : *all) {
        if (b.size() != total * sizeof(float))
          return internal_error(std::string(what) + ": a process sent " + std::to_string(b.size()) +
                                " bytes, expected " + std::to_string(total * sizeof(float)));
      }
      std::vector<const float*> from;
      for (const std::string& b : *all)
        from.push_back(reinterpret_cast<const float*>(b.data()) + begin);
      sum_in_rank_order(from, count, {buffer + begin});
      return Status();
    });
  }

  ProcessExchange& processes_;
  CpuBackend& backend_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_cpu_communicators(
    std::span<CpuBackend* const> group, ProcessExchange* processes) {
  if (processes && processes->processes() > 1) {
    if (group.size() != 1)
      return unsupported(
          "on the CPU backend a run across processes takes one CPU rank per process "
          "(placement.devices 1), not " +
          std::to_string(group.size()));
    std::vector<std::unique_ptr<Communicator>> out;
    out.push_back(std::make_unique<CpuProcessCommunicator>(*processes, *group[0]));
    return out;
  }
  auto shared = std::make_shared<Group>(static_cast<int>(group.size()));
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t r = 0; r < group.size(); ++r)
    out.push_back(std::make_unique<CpuCommunicator>(shared, *group[r], static_cast<int>(r)));
  return out;
}

}  // namespace spillway::compute::cpu
