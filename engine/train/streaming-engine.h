// StreamingEngine: the layer-major step of DESIGN.md on any compute Backend.
//
// Forward: blocks stream host→device through K weight slots (block b+1 is copied on the copy
// stream while block b computes); every micro-batch passes through a layer before the next layer
// is touched, and the input of each layer for each micro-batch is kept as a checkpoint — on the
// device while the arena has room, else in pinned host memory. Head: final norm, LM head and
// cross-entropy fused and chunked over tokens (the full logits never exist). Backward, head down
// to the embedding: the layer is re-loaded, its forward recomputed from the checkpoint,
// backpropagated, and its fp32 weight gradients accumulated over the micro-batches on the device
// and then copied to the host gradient buffers of ModelState.
//
// Device memory is fixed at creation: K weight slots of the largest block, two fp32 gradient
// buffers, the activations of one micro-batch of one layer, and the checkpoints that fit; so it
// does not grow with the number of layers. Creation fails with kOutOfMemory, saying how much is
// needed, when even that does not fit.
//
// Loss semantics (the golden reference): labels are already shifted, -100 is ignored, and the
// loss of a step is the mean cross-entropy over all non-ignored targets of the whole step, so
// splitting the step into micro-batches changes nothing.
// Not thread-safe: one thread drives an engine. The weight gate lets an optimizer running on
// another thread update block b while the engine streams other blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "compute/backend.h"
#include "telemetry/counters.h"
#include "train/model-state.h"

namespace spillway {

struct StreamingConfig {
  int weight_slots = 2;      // K >= 2
  int micro_batch_size = 1;  // sequences per micro-batch
  int max_micro_batches = 1; // micro-batches per step (gradient accumulation)
  int seq_len = 128;
  int lm_head_chunk = 256;   // tokens whose logits exist at once
  bool keep_checkpoints_on_device = true;  // while they fit
};

// One step's tokens: micro_batches × micro_batch_size sequences of seq_len tokens, row-major.
struct StepBatch {
  int micro_batches = 1;
  int micro_batch_size = 1;
  int seq_len = 0;
  std::span<const int32_t> input_ids;  // [micro_batches · micro_batch_size, seq_len]
  std::span<const int32_t> labels;     // same shape; -100 ignored
};

struct StepResult {
  double loss_sum = 0;   // Σ CE over non-ignored targets
  int64_t targets = 0;   // non-ignored targets
  double loss() const { return targets ? loss_sum / static_cast<double>(targets) : 0.0; }
};

// Where the engine placed things on the device, for the planner, telemetry and tests.
struct DeviceMemoryPlan {
  uint64_t weight_slot_bytes = 0;   // all K slots
  uint64_t gradient_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t checkpoint_bytes_device = 0;
  uint64_t checkpoint_bytes_host = 0;
  uint64_t capacity_bytes = 0;
};

class StreamingEngine {
 public:
  // `counters` (optional) receives bytes held per tier/category and bytes moved per link.
  static Result<std::unique_ptr<StreamingEngine>> create(compute::Backend& backend, ModelState& state,
                                                         const StreamingConfig& config,
                                                         TierCounters* counters = nullptr);
  ~StreamingEngine();

  // Forward and backward of one step. Overwrites the host gradients of every block with
  // ∂(mean loss)/∂w. kInvalidArgument for shapes beyond the configured maxima or ids out of range.
  Result<StepResult> forward_backward(const StepBatch& batch);
  // Forward only (eval, generation). When `logits` is given it receives [sequences, seq_len, vocab]
  // fp32 logits (tests and generation; small inputs only).
  Result<StepResult> forward(const StepBatch& batch, float* logits = nullptr);

  // Called before block b's weights are uploaded for a forward pass: blocks until the optimizer
  // has finished with it. Default: no wait.
  void set_weight_gate(std::function<void(size_t block)> gate) { gate_ = std::move(gate); }
  // Receives timeline spans (block index, phase "h2d" | "forward" | "backward" | "d2h", start and
  // end in seconds of `clock`) while set; the trainer turns them into `span` events. On the CPU
  // backend copies are synchronous, so their spans are their real duration; on CUDA they will be
  // recorded with events.
  using SpanSink = std::function<void(size_t block, const char* phase, double start_s, double end_s)>;
  void set_span_sink(SpanSink sink, std::function<double()> clock) {
    span_sink_ = std::move(sink);
    clock_ = std::move(clock);
  }
  // Marks every cached device copy of the weights stale (after the host weights changed).
  void invalidate_weights();

  const DeviceMemoryPlan& memory_plan() const { return plan_; }
  // Bytes moved host→device and device→host so far.
  uint64_t h2d_bytes() const { return h2d_bytes_; }
  uint64_t d2h_bytes() const { return d2h_bytes_; }

  // Device bytes the engine needs for `config` (without checkpoints on the device), for the planner.
  static uint64_t required_device_bytes(const ParameterLayout& layout, const StreamingConfig& config,
                                        size_t act_bytes);

 private:
  struct Impl;
  explicit StreamingEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::function<void(size_t)> gate_;
  SpanSink span_sink_;
  std::function<double()> clock_;
  DeviceMemoryPlan plan_;
  uint64_t h2d_bytes_ = 0, d2h_bytes_ = 0;
};

}  // namespace spillway
