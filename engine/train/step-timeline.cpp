#include "train/step-timeline.h"

#include <string>

namespace spillway {

const char* span_phase_name(SpanPhase phase) {
  switch (phase) {
    case SpanPhase::kH2D:
      return "h2d";
    case SpanPhase::kForward:
      return "forward";
    case SpanPhase::kBackward:
      return "backward";
    case SpanPhase::kD2H:
      return "d2h";
    case SpanPhase::kReduce:
      return "reduce";
  }
  return "?";
}

Result<SpanRecorder> SpanRecorder::create(compute::Device& backend, size_t max_spans) {
  SpanRecorder r;
  r.backend_ = &backend;
  SPW_ASSIGN_OR_RETURN(r.start_, backend.create_event(true));
  SPW_ASSIGN_OR_RETURN(r.end_, backend.create_event(true));
  r.begins_.reserve(max_spans);
  r.ends_.reserve(max_spans);
  for (size_t i = 0; i < max_spans; ++i) {
    SPW_ASSIGN_OR_RETURN(compute::Event b, backend.create_event(true));
    SPW_ASSIGN_OR_RETURN(compute::Event e, backend.create_event(true));
    r.begins_.push_back(std::move(b));
    r.ends_.push_back(std::move(e));
  }
  r.spans_.reserve(max_spans);
  return r;
}

Status SpanRecorder::begin_step(compute::StreamId stream) {
  spans_.clear();
  return backend_->record_event(start_, stream);
}

Result<size_t> SpanRecorder::begin(size_t block, SpanPhase phase, compute::StreamId stream) {
  const size_t i = spans_.size();
  if (i == begins_.size())
    return internal_error("timeline: more than " + std::to_string(begins_.size()) +
                          " spans in one step");
  SPW_RETURN_IF_ERROR(backend_->record_event(begins_[i], stream));
  spans_.push_back({block, phase});
  return i;
}

Status SpanRecorder::end(size_t span, compute::StreamId stream) {
  return backend_->record_event(ends_[span], stream);
}

Status SpanRecorder::end_step(compute::StreamId stream) {
  return backend_->record_event(end_, stream);
}

Result<StepTimeline> SpanRecorder::finish(const SpanSink& sink, double host_start_s) {
  StepTimeline t;
  SPW_ASSIGN_OR_RETURN(t.step_s, backend_->elapsed_s(start_, end_));
  for (size_t i = 0; i < spans_.size(); ++i) {
    SPW_ASSIGN_OR_RETURN(const double begin_s, backend_->elapsed_s(start_, begins_[i]));
    SPW_ASSIGN_OR_RETURN(const double end_s, backend_->elapsed_s(start_, ends_[i]));
    const double d = end_s - begin_s;
    switch (spans_[i].phase) {
      case SpanPhase::kH2D:
        t.h2d_s += d;
        break;
      case SpanPhase::kForward:
      case SpanPhase::kBackward:
        t.compute_busy_s += d;
        break;
      case SpanPhase::kD2H:
        t.d2h_s += d;
        break;
      case SpanPhase::kReduce:
        t.reduce_s += d;
        break;
    }
    if (sink)
      sink(spans_[i].block, span_phase_name(spans_[i].phase), host_start_s + begin_s,
           host_start_s + end_s);
  }
  return t;
}

}  // namespace spillway
