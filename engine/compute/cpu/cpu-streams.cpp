// CpuStreams: synchronous or strict (queued until waited for) streams and events.
#include "compute/cpu/cpu-streams.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <vector>

namespace spillway::compute::cpu {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr uint64_t kAll = std::numeric_limits<uint64_t>::max();

}  // namespace

CpuStreams::CpuStreams(bool strict) : strict_(strict) {
  streams_.emplace(0, StreamState{});
}

StreamId CpuStreams::create_stream() {
  const StreamId id = next_stream_++;
  streams_.emplace(id, StreamState{});
  return id;
}

Status CpuStreams::destroy_stream(StreamId stream) {
  if (stream == 0) return invalid_argument("destroy_stream: stream 0 is the backend's own");
  SPW_RETURN_IF_ERROR(check_stream(stream, "destroy_stream"));
  run_until(stream, kAll);  // a stream is destroyed after its work completes
  Status error = streams_.at(stream).error;
  streams_.erase(stream);
  return error;
}

EventId CpuStreams::create_event(bool timing) {
  const EventId id = next_event_++;
  EventState e;
  e.timing = timing;
  events_.emplace(id, e);
  return id;
}

Status CpuStreams::destroy_event(EventId event) {
  SPW_RETURN_IF_ERROR(check_event(event, "destroy_event"));
  events_.erase(event);  // a queued record of it finds no event and does nothing
  return Status::ok_status();
}

Status CpuStreams::check_stream(StreamId stream, const char* what) const {
  if (!streams_.contains(stream)) {
    return invalid_argument(std::string(what) + ": unknown or destroyed stream " +
                            std::to_string(stream));
  }
  return Status::ok_status();
}

Status CpuStreams::check_event(EventId event, const char* what) const {
  if (!events_.contains(event)) {
    return invalid_argument(std::string(what) + ": unknown or destroyed event " +
                            std::to_string(event));
  }
  return Status::ok_status();
}

Status CpuStreams::enqueue(StreamId stream, Work work) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    return invalid_argument("unknown or destroyed stream " + std::to_string(stream));
  }
  if (!it->second.error.ok()) return it->second.error;
  it->second.queue.push_back(Task{next_seq_++, std::move(work)});
  return Status::ok_status();
}

void CpuStreams::run_until(StreamId stream, uint64_t last) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  // Work never creates or destroys streams, so `s` stays valid while work runs (and runs other
  // streams through waits: those only reach work older than the one running, see the header).
  StreamState& s = it->second;
  while (!s.queue.empty() && s.queue.front().seq <= last) {
    Task task = std::move(s.queue.front());
    s.queue.pop_front();
    Status st = task.run();
    if (!st.ok()) {
      s.error = st.with_context("stream " + std::to_string(stream));
      s.error_seq = task.seq;
      s.queue.clear();  // later work would read what the failed work did not write
      return;
    }
  }
}

void CpuStreams::run_all() {
  if (!strict_) return;
  std::vector<StreamId> ids;
  for (const auto& [id, state] : streams_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());  // a fixed order; waits make any order correct
  for (StreamId id : ids) run_until(id, kAll);
}

Status CpuStreams::failure_up_to(StreamId stream, uint64_t last) const {
  auto it = streams_.find(stream);
  if (it != streams_.end() && !it->second.error.ok() && it->second.error_seq <= last)
    return it->second.error;
  return Status::ok_status();
}

Status CpuStreams::record_event(EventId event, StreamId stream) {
  SPW_RETURN_IF_ERROR(check_event(event, "record_event"));
  SPW_RETURN_IF_ERROR(check_stream(stream, "record_event"));
  EventState& e = events_.at(event);
  if (!strict_) {
    e.stream = stream;
    e.complete = true;
    e.time_s = now_s();
    return Status::ok_status();
  }
  // The record's own sequence number: enqueue hands out next_seq_. A record that a later one has
  // replaced (or whose event is gone) does nothing when it runs.
  const uint64_t seq = next_seq_;
  SPW_RETURN_IF_ERROR(enqueue(stream, [this, event, seq]() -> Status {
    auto it = events_.find(event);
    if (it != events_.end() && it->second.record_seq == seq) {
      it->second.complete = true;
      it->second.time_s = now_s();
    }
    return Status::ok_status();
  }));
  e.stream = stream;
  e.record_seq = seq;
  e.complete = false;
  return Status::ok_status();
}

Status CpuStreams::stream_wait_event(StreamId stream, EventId event) {
  SPW_RETURN_IF_ERROR(check_stream(stream, "stream_wait_event"));
  SPW_RETURN_IF_ERROR(check_event(event, "stream_wait_event"));
  const EventState& e = events_.at(event);
  // Never recorded: complete. Recorded on `stream` itself: stream order already holds.
  if (!strict_ || e.stream < 0 || e.stream == stream) return Status::ok_status();
  return enqueue(stream, [this, producer = e.stream, last = e.record_seq]() -> Status {
    run_until(producer, last);
    if (Status failed = failure_up_to(producer, last); !failed.ok()) {
      return Status(failed.code(), "waited for work that failed: " + failed.message());
    }
    return Status::ok_status();
  });
}

Status CpuStreams::synchronize_stream(StreamId stream) {
  SPW_RETURN_IF_ERROR(check_stream(stream, "synchronize_stream"));
  if (!strict_) return Status::ok_status();
  run_until(stream, kAll);
  return streams_.at(stream).error;
}

Status CpuStreams::synchronize_event(EventId event) {
  SPW_RETURN_IF_ERROR(check_event(event, "synchronize_event"));
  const EventState& e = events_.at(event);
  if (!strict_ || e.stream < 0) return Status::ok_status();
  run_until(e.stream, e.record_seq);
  SPW_RETURN_IF_ERROR(failure_up_to(e.stream, e.record_seq));
  if (!e.complete) {
    return internal_error("synchronize_event: the work before event " + std::to_string(event) +
                          "'s record never ran (stream " + std::to_string(e.stream) +
                          " failed and was destroyed)");
  }
  return Status::ok_status();
}

Result<double> CpuStreams::elapsed_s(EventId start, EventId end) {
  SPW_RETURN_IF_ERROR(check_event(start, "elapsed_s"));
  SPW_RETURN_IF_ERROR(check_event(end, "elapsed_s"));
  for (EventId id : {start, end}) {
    const EventState& e = events_.at(id);
    if (!e.timing) {
      return invalid_argument("elapsed_s: event " + std::to_string(id) +
                              " was created without timing");
    }
    if (e.stream < 0)
      return invalid_argument("elapsed_s: event " + std::to_string(id) + " was never recorded");
    if (!e.complete) {
      return invalid_argument("elapsed_s: event " + std::to_string(id) +
                              " has not completed (synchronize_event it first)");
    }
  }
  return events_.at(end).time_s - events_.at(start).time_s;
}

}  // namespace spillway::compute::cpu
