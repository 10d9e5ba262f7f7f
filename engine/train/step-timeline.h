// SpanRecorder: the timeline of one step, timed by backend events (GPU time, not host enqueue
// time), and LinkTraffic: the bytes the step moved over the host link.
//
// A span is one block's phase on the stream that does the work: "h2d" (its weights uploaded),
// "forward" or "backward" (its compute for every micro-batch), "d2h" (its gradients downloaded).
// It is a pair of timing events recorded around the work; nothing is read back until the step's one
// host synchronisation, after which finish() turns every pair into seconds relative to an event
// recorded at step start and offsets them by the host clock read at step start, so recording costs
// no synchronisation. The events come from a pool created at setup: none is created inside a step.
//
// Not thread-safe: the engine's thread drives it. Ownership: owns its events; must not outlive its
// backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "compute/backend.h"
#include "telemetry/counters.h"
#include "telemetry/span.h"

namespace spillway {

// kReduce: a collective between the GPUs of a data-parallel run on its own stream: a block's
// gradient summed (NCCL reduce-scatter), or, past one machine with the host state sharded by
// block, its gradient summed into the GPU that carries it or its weights broadcast from there.
enum class SpanPhase { kH2D, kForward, kBackward, kD2H, kReduce };
// "h2d", "forward", "backward", "d2h", "reduce": the `phase` of span events.
const char* span_phase_name(SpanPhase phase);

// What one step's timeline adds up to, in seconds of device time.
struct StepTimeline {
  double step_s = 0;          // step-start event to step-end event, every stream joined
  double compute_busy_s = 0;  // Σ "forward" and "backward" spans: the compute stream's busy time
  double h2d_s = 0;           // Σ "h2d" spans: the link busy uploading weights
  double d2h_s = 0;           // Σ "d2h" spans: the link busy downloading gradients
  double reduce_s = 0;        // Σ "reduce" spans: gradients summed between GPUs (data parallel)
  // The part of the step the compute stream had nothing to run (waiting for weights or the weight
  // gate between blocks): the GPU idle fraction of the benchmark. A wait for a host checkpoint's
  // copy inside a block's span counts as busy.
  double compute_idle_fraction() const { return step_s > 0 ? 1.0 - compute_busy_s / step_s : 0.0; }
};

class SpanRecorder {
 public:
  // A pool for up to `max_spans` spans a step. kOutOfMemory / kInternal from event creation.
  static Result<SpanRecorder> create(compute::Device& backend, size_t max_spans);

  // Starts a step: forgets the previous spans and records the step-start event on `stream`.
  // Streams that must not run ahead of the step's start wait for start_event().
  Status begin_step(compute::StreamId stream);
  compute::EventId start_event() const { return start_; }
  // Records the start of a span of `block` on `stream`; returns its index for end().
  // kInternal when the pool is exhausted (max_spans was computed too small: a bug).
  Result<size_t> begin(size_t block, SpanPhase phase, compute::StreamId stream);
  Status end(size_t span, compute::StreamId stream);
  // Records the step-end event on `stream`, after which the caller synchronises on end_event().
  Status end_step(compute::StreamId stream);
  compute::EventId end_event() const { return end_; }
  // After end_event() completed: the step's totals, and every span handed to `sink` (when set) at
  // host_start_s + its offset from the step-start event. Errors of elapsed_s pass through.
  Result<StepTimeline> finish(const SpanSink& sink, double host_start_s);

 private:
  struct Span {
    size_t block;
    SpanPhase phase;
  };
  compute::Device* backend_ = nullptr;
  compute::Event start_, end_;
  std::vector<compute::Event> begins_, ends_;  // [max_spans] each
  std::vector<Span> spans_;                    // this step's, in the order they began
};

// Runs `fn` (which enqueues work on `stream`) as a span of `block`.
template <typename Fn>
Status timed(SpanRecorder& recorder, size_t block, SpanPhase phase, compute::StreamId stream,
             Fn&& fn) {
  SPW_ASSIGN_OR_RETURN(size_t span, recorder.begin(block, phase, stream));
  SPW_RETURN_IF_ERROR(fn());
  return recorder.end(span, stream);
}

// Bytes moved over the host link, cumulative, also reported to `counters` (when set) per link.
struct LinkTraffic {
  TierCounters* counters = nullptr;
  uint64_t h2d_bytes = 0, d2h_bytes = 0;
  void moved(Link link, uint64_t bytes) {
    if (link == Link::kH2D) h2d_bytes += bytes;
    if (link == Link::kD2H) d2h_bytes += bytes;
    if (counters) counters->add_moved(link, bytes);
  }
};

}  // namespace spillway
