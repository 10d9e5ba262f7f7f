// CpuStreams: the streams and events of the CPU backend, synchronous or strict (cpu-backend.h).
//
// Synchronous mode runs each piece of work on the calling thread as it is submitted, so the host
// sees every result at once and an event completes when it is recorded. Strict mode keeps the
// GPU's contract and nothing more: work is queued on its stream and runs, in order, only when
// someone waits for it:
//   - synchronize_stream(s) runs s's queue;
//   - synchronize_event(e) runs e's stream up to e's last record;
//   - stream_wait_event(s, e) queues on s a marker that, when s runs, first runs e's stream up to
//     that record.
// So a consumer that forgets a wait reads what was there before, and the CPU tests see it. Each
// piece of work has a sequence number from one counter for all streams; a wait names the producer
// and the number of its record, so waits only ever point at earlier work (running one cannot
// loop), and a wait on a stream that was destroyed meanwhile finds its work already done.
// A failure inside queued work becomes the stream's sticky error: the rest of its queue is dropped,
// every later synchronize of it (and of streams that wait on the failed work) returns the error,
// and so does submitting more work to it.
//
// Ids are never reused, so a destroyed stream or event stays an error (kInvalidArgument) instead
// of silently naming a newer one. Stream 0 always exists. Not thread-safe (one trainer thread, as
// for every Backend); work runs on the thread that waits for it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <utility>

#include "compute/backend.h"
#include "core/status.h"

namespace spillway::compute::cpu {

class CpuStreams {
 public:
  using Work = std::function<Status()>;

  explicit CpuStreams(bool strict);
  CpuStreams(const CpuStreams&) = delete;
  CpuStreams& operator=(const CpuStreams&) = delete;

  bool strict() const { return strict_; }

  StreamId create_stream();
  // Runs the stream's queued work, then forgets the id; returns the stream's error (nobody else
  // will see it). kInvalidArgument for stream 0 or an unknown id.
  Status destroy_stream(StreamId stream);
  EventId create_event(bool timing);
  // kInvalidArgument for an unknown id.
  Status destroy_event(EventId event);

  // kInvalidArgument "`what`: unknown or destroyed stream N" (or event).
  Status check_stream(StreamId stream, const char* what) const;
  Status check_event(EventId event, const char* what) const;

  // Runs `work` now (synchronous mode: its status is returned) or queues it on `stream` (strict
  // mode: ok, or the stream's sticky error). `work` must own what it uses: it may run long after
  // this call returns. The stream must have been checked.
  template <typename F>
  Status submit(StreamId stream, F&& work) {
    if (!strict_) return work();
    return enqueue(stream, Work(std::forward<F>(work)));
  }

  // Runs every stream's queued work (what cudaFree's implicit device synchronisation does before
  // memory goes). Failures stay with their streams.
  void run_all();

  Status record_event(EventId event, StreamId stream);
  Status stream_wait_event(StreamId stream, EventId event);
  Status synchronize_stream(StreamId stream);
  Status synchronize_event(EventId event);
  // Seconds between the host times at which the two records ran. kInvalidArgument for an event
  // created without timing, never recorded, or whose record has not run yet.
  Result<double> elapsed_s(EventId start, EventId end);

 private:
  struct Task {
    uint64_t seq;
    Work run;
  };
  struct StreamState {
    std::deque<Task> queue;
    Status error;            // sticky: the first failure of its queued work
    uint64_t error_seq = 0;  // the sequence number of the work that failed
  };
  struct EventState {
    bool timing = false;
    StreamId stream = -1;     // of the last record; -1: never recorded (counts as complete)
    uint64_t record_seq = 0;  // the last record's sequence number
    bool complete = true;     // the last record has run
    double time_s = 0.0;      // steady-clock seconds when it ran
  };

  Status enqueue(StreamId stream, Work work);
  // Runs `stream`'s queued work with sequence numbers <= last (a no-op for a destroyed stream).
  void run_until(StreamId stream, uint64_t last);
  // The error of `stream` when its work up to `last` failed, else ok.
  Status failure_up_to(StreamId stream, uint64_t last) const;

  bool strict_;
  std::unordered_map<StreamId, StreamState> streams_;
  std::unordered_map<EventId, EventState> events_;
  StreamId next_stream_ = 1;
  EventId next_event_ = 0;
  uint64_t next_seq_ = 1;
};

}  // namespace spillway::compute::cpu
