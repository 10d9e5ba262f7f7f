// ThreadPool: a fixed set of worker threads for data-parallel loops (GEMM-free CPU kernels,
// AdamW, tokenization).
//
// parallel_for splits [0, n) into contiguous chunks, runs them on the workers and the calling
// thread, and returns when all are done. One parallel_for at a time per pool (calls are
// serialised by a mutex); the callable must be safe to run concurrently on disjoint ranges.
// The pool owns its threads and joins them on destruction.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace spillway {

class ThreadPool {
 public:
  // threads == 0: std::thread::hardware_concurrency().
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }  // workers plus the caller

  // Calls fn(begin, end) on chunks of [0, n) of at least `min_chunk` items.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1);

  // The process-wide pool, created on first use.
  static ThreadPool& global();

 private:
  void worker_loop(size_t index);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0, job_chunks_ = 0, generation_ = 0, pending_ = 0;
  bool stop_ = false;
};

}  // namespace spillway
