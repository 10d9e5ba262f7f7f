// Spans: the timeline of a step, the lanes the GUI draws (compute, H2D, D2H, optimizer, SSD). The
// streaming engine and the optimizer report one per block and phase through a SpanSink; the trainer
// writes each as a `span` event (EventWriter::span, README "events.jsonl"). Plain types.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "events/events.h"

namespace spillway {

// (block, phase, start, end): block b of the model (0 the embedding, 1..L the layers, L+1 the
// head), the phase ("h2d", "forward", "backward", "d2h", "reduce", "optimizer", "ssd_read",
// "ssd_write"),
// start and end in seconds of the clock given with the sink. Called from the thread doing the work.
using SpanSink = std::function<void(size_t block, const char* phase, double start_s, double end_s)>;

// A SpanSink call tagged with the device that did the work: in a data-parallel run each GPU's
// spans carry its CUDA index (on the CPU backend, whose ranks share no device index, the rank);
// none with one GPU (train/data-parallel-engine.h). Called from each GPU's thread at once.
using DeviceSpanSink = std::function<void(std::optional<int> device, size_t block,
                                          const char* phase, double start_s, double end_s)>;

// One `span` event is a SpanEvent (events/events.h): block "embed" | "layer" | "head" | "step",
// the layer's index or none, the phase, start and end, and the device or none.

// The event of a SpanSink call on a model of `num_layers` layers, by `device` when given.
inline SpanEvent block_span(size_t block, int num_layers, std::string_view phase, double start_s,
                            double end_s, std::optional<int> device = std::nullopt) {
  const long layer = static_cast<long>(block) - 1;
  const bool is_layer = layer >= 0 && layer < num_layers;
  return {block == 0 ? "embed"
          : is_layer ? "layer"
                     : "head",
          is_layer ? std::optional<int>(int(layer)) : std::nullopt,
          std::string(phase),
          start_s,
          end_s,
          device};
}

}  // namespace spillway
