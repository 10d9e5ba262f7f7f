// The processes of a group across machines as threads of this one (compute::ProcessExchange):
// what HostGroup does over TCP, in memory, so that the engine's part past one machine is tested
// without sockets (its transport is host-group-test's).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "compute/communicator.h"

namespace spillway::testing {

class ThreadExchanges {
 public:
  explicit ThreadExchanges(int n) : n_(n), payloads_(n) {
    for (int p = 0; p < n; ++p) ends_.push_back(std::make_unique<End>(*this, p));
  }
  compute::ProcessExchange& of(int p) { return *ends_[p]; }
  // Process p is gone as a machine that died is: check() says so on every process, but a round
  // waits for it until someone aborts the group (as NCCL's kernels wait for a lost peer).
  void lose(int p) {
    std::lock_guard<std::mutex> lock(mu_);
    lost_ = "process " + std::to_string(p) + " left the group (connection closed)";
  }

 private:
  struct End final : compute::ProcessExchange {
    End(ThreadExchanges& group, int p) : group(group), p(p) {}
    int process() const override { return p; }
    int processes() const override { return group.n_; }
    Result<std::vector<std::string>> all_gather(std::string_view mine, double) override {
      std::unique_lock<std::mutex> lock(group.mu_);
      if (group.aborted_) return io_error("a process left the group");
      group.payloads_[p] = std::string(mine);
      const uint64_t round = group.round_;
      if (++group.arrived_ == group.n_) {
        group.result_ = group.payloads_;
        group.arrived_ = 0;
        ++group.round_;
        group.cv_.notify_all();
        return group.result_;
      }
      group.cv_.wait(lock, [&] { return group.aborted_ || group.round_ != round; });
      if (group.round_ == round) return io_error("a process left the group");
      return group.result_;
    }
    Status check() override {
      std::lock_guard<std::mutex> lock(group.mu_);
      return group.lost_.empty() ? Status() : io_error(group.lost_);
    }
    void abort() override {
      std::lock_guard<std::mutex> lock(group.mu_);
      group.aborted_ = true;
      group.cv_.notify_all();
    }
    ThreadExchanges& group;
    const int p;
  };
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> payloads_, result_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  bool aborted_ = false;
  std::string lost_;
  std::vector<std::unique_ptr<End>> ends_;
};

}  // namespace spillway::testing
