// StreamingEngine: the layer-major step (docs/architecture.md, "The step") on any compute Backend.
//
// Forward: blocks stream host→device through K weight slots (WeightSlots: block b+1 is copied on
// the H2D stream while block b computes); every micro-batch passes through a layer before the next
// layer is touched, and the input of each layer for each micro-batch is kept as a checkpoint
// (ActivationStore: on the device while the arena has room, else in pinned host memory). Head:
// final norm, LM head and cross-entropy fused and chunked over tokens (the full logits never
// exist). Backward, head down to the embedding: the layer is re-loaded, its forward recomputed from
// the checkpoint, backpropagated (BlockMath), and its fp32 weight gradients accumulated over the
// micro-batches on the device, then copied to the host gradient buffers of ModelState on the D2H
// stream while the compute stream reduces them to their sum of squares (for the gradient norm).
//
// Streams and synchronisation: every op runs on one compute stream; weights go up on an H2D stream
// and gradients come down on a D2H stream, all owned by the engine and ordered only by events. A
// step's token ids and labels go up once; its per-token losses and per-block gradient sums of
// squares come down once. The host waits inside a step only in the weight gate (the optimizer
// finishing a block before it is uploaded for a forward pass) and once at the end of the step,
// after which the step's timeline is read from its timing events (StepResult::timeline, and the
// span sink).
//
// Device memory is one arena fixed at creation: K weight slots of the largest block (and an fp32
// staging chunk when the backend computes in bf16), fp32 gradient buffers, the activations of one
// micro-batch of one layer, the step's ids, labels, losses and gradient sums of squares, the
// backend's workspace, and the checkpoints that fit; so it does not grow with the number of layers
// (but for one double per block). Creation fails with kOutOfMemory, saying how much is needed,
// when even that does not fit. The master weights and gradients of `state` are registered with the
// backend (pinned) for the engine's life, so one engine at a time works on a state.
//
// Loss semantics (the golden reference): labels are already shifted, -100 is ignored, and the
// loss of a step is the mean cross-entropy over all non-ignored targets of the whole step, so
// splitting the step into micro-batches changes nothing.
// Not thread-safe: one thread drives an engine. The weight gate lets an optimizer running on
// another thread update block b while the engine streams other blocks. The backend and the state
// must outlive the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "compute/backend.h"
#include "telemetry/counters.h"
#include "train/block-owners.h"
#include "train/model-state.h"
#include "train/step-timeline.h"

namespace spillway {

class HbmState;

// The LM head's default chunk: the most tokens, a power of two from 256 to 4,096, whose logits and
// their gradient ([chunk, vocab] fp32 each) fit in kLmHeadLogitsBytes. Each chunk adds its part of
// the head's weight gradient into the fp32 [vocab, hidden] buffer, reading and writing all of it:
// on the H100, llama3.2-3b (vocab 128,256) at 64K tokens per step took 3.83 s with chunks of 256,
// 3.59 s with 1,024 (1 GiB of logits), 3.60 s with 2,048 and 3.72 s with 4,096.
inline constexpr uint64_t kLmHeadLogitsBytes = uint64_t{1} << 30;
int lm_head_chunk_for(int64_t vocab);

struct StreamingConfig {
  int weight_slots = 2;       // K >= 2
  int micro_batch_size = 1;   // sequences per micro-batch
  int max_micro_batches = 1;  // micro-batches per step (gradient accumulation)
  int seq_len = 0;            // positions per sequence (data.seq_len): required, create() refuses 0
  int lm_head_chunk = 0;      // tokens whose logits exist at once; 0: lm_head_chunk_for(vocab)
  bool keep_checkpoints_on_device = true;  // while they fit
  // With keep_checkpoints_on_device, the layers whose checkpoints (the input of each layer for
  // each micro-batch; the head's input counts as layer num_layers) stay on the device, the first
  // in forward order: -1, every layer's while they fit; k >= 0, at most the first k of the
  // num_layers + 1, the others in pinned host memory (each crosses the link three times a step).
  // The micro-batches' activation gradients stay on the device either way. The planner trades
  // the device's room for checkpoints against the HBM state tier's blocks (planner.h).
  int device_checkpoint_layers = -1;
  // Selective activation checkpointing: the last k layers (0 <= k <= num_layers) keep every
  // activation their backward reads (BlockMath::saved_bytes a micro-batch) on the device from
  // their forward to their backward, for every micro-batch of the step, and skip the recompute:
  // the same bits, about a quarter less of those layers' compute, k · micro-batches ·
  // saved_bytes more HBM (part of the fixed part, DeviceMemoryPlan::saved_activation_bytes). The
  // last layers, because their backward comes first after the head. The planner chooses k
  // (planner.h).
  int saved_activation_layers = 0;
  // The j layers before those (k + j <= num_layers) keep every activation but the MLP's gate, up
  // and activation (BlockMath::saved_bytes without the MLP's: 57.4 KB a token of llama2-7b's
  // against 123.5), which their backward recomputes from the saved normed input of the MLP: two
  // GEMMs instead of the whole forward, about half the memory of a saved layer for most of its
  // gain, more at long sequences, where attention is most of a layer's forward.
  int mlp_recompute_layers = 0;
  // Blocks whose master, gradients and AdamW moments stay on the device (hbm-state.h), the first
  // in forward order: -1, as many as fit (hbm_state_blocks below); 0, none. Their state is loaded
  // by whoever updates it (Optimizer::set_hbm_state) before the first pass.
  int hbm_state_blocks = 0;
  // Data parallel (data-parallel-engine.h): the GPUs of the group this engine is one of. With more
  // than one, set_communicator() names the group before the first pass: each block's gradient is
  // summed over the group by a reduce-scatter and only this engine's 1/N share comes down (the
  // gradient buffers are padded to a multiple of N floats), and the HBM state tier holds none.
  int data_parallel_ranks = 1;
  // Past one machine (docs/architecture.md, "Past one machine"): the group spans this many
  // processes, one per machine, each with data_parallel_ranks devices; the communicator has
  // data_parallel_ranks × data_parallel_processes ranks (machine-major). The host state is then
  // sharded by block: block_owners ([block], block-owners.h) names the machine that holds each
  // block's state and its GPU that carries the block. That GPU alone uploads the block's weights,
  // which the group broadcasts to every GPU, and brings down its gradient, which the group sums
  // into it alone (a reduce in place of the reduce-scatter); the ModelState holds that machine's
  // blocks (ModelState::holds). Every pass, forward() too, takes every GPU of every machine: a
  // block's broadcast needs them all (DataParallelEngine::forward).
  int data_parallel_processes = 1;
  std::vector<BlockOwner> block_owners;
  // Page-lock the host master weights and gradients for the engine's life. Off for every engine
  // of a group but the first: one registration (portable) serves every GPU.
  bool register_host_state = true;
  // forward() may return the logits of micro-batches of up to this many tokens: reserves
  // [logits_tokens, vocab] fp32 on the device (eval and generation with small inputs; 0 for
  // training).
  int logits_tokens = 0;
};

// One step's tokens: micro_batches × micro_batch_size sequences of seq_len tokens, row-major.
struct StepBatch {
  int micro_batches = 1;
  int micro_batch_size = 1;
  int seq_len = 0;
  std::span<const int32_t> input_ids;  // [micro_batches · micro_batch_size, seq_len]
  std::span<const int32_t> labels;     // same shape; -100 ignored
  // Same shape when rows pack several examples: each token's position within its example
  // (compute/backend.h, Positions: 0 at an example's first token, one more than the token before
  // it inside one); empty: positions 0..seq_len-1 in every row.
  std::span<const int32_t> positions{};
  // The non-ignored targets of the whole step, over every GPU of a data-parallel group: the mean
  // loss divides by it. 0: this batch's own.
  int64_t loss_targets = 0;
};

struct StepResult {
  double loss_sum = 0;  // Σ CE over non-ignored targets (per-token fp32 losses summed in double)
  int64_t targets = 0;  // non-ignored targets
  // forward_backward: Σ g² of each block's fp32 gradient, [num_blocks] in block order, reduced on
  // the device (Backend::sum_squares) as the gradient came down: the global gradient norm without
  // a pass over the host gradients (Optimizer::begin_step). Empty after forward().
  std::vector<double> grad_sumsq;
  StepTimeline timeline;  // device time of the step and of its streams' work (the first GPU's)
  // Each GPU's timeline, in rank order, for a data-parallel step (empty for one GPU).
  std::vector<StepTimeline> device_timelines;
  double loss() const { return targets ? loss_sum / static_cast<double>(targets) : 0.0; }
};

// Where the engine places things on the device, for the planner, telemetry and tests. Every part
// counts its 256-aligned reservations in the arena.
struct DeviceMemoryPlan {
  uint64_t weight_slot_bytes =
      0;  // the K slots, and the fp32 staging chunk when act_dtype is not fp32
  uint64_t gradient_bytes = 0;  // fp32 gradient buffers: 2, or 3 with tied embeddings
  // One micro-batch's layer activations, the device stand-ins of host checkpoints, the step's ids,
  // labels, losses and gradient sums of squares, the logits buffer (logits_tokens) and the
  // backend's workspace.
  uint64_t workspace_bytes = 0;
  uint64_t backend_workspace_bytes = 0;  // the part of workspace_bytes that the backend's ops use
  // The saved activations of StreamingConfig::saved_activation_layers and mlp_recompute_layers
  // (Category::kActivations in the tier counters).
  uint64_t saved_activation_bytes = 0;
  uint64_t checkpoint_bytes_device = 0;
  uint64_t checkpoint_bytes_host = 0;
  uint64_t capacity_bytes = 0;  // the device's total
  size_t state_blocks = 0;      // blocks of the HBM state tier (hbm-state.h)
  uint64_t state_bytes = 0;     // their master, gradients and moments
  // What the engine needs on the device apart from checkpoints and the HBM state tier.
  uint64_t fixed_bytes() const {
    return weight_slot_bytes + gradient_bytes + workspace_bytes + saved_activation_bytes;
  }
};

class StreamingEngine {
 public:
  // `counters` (optional) receives bytes held per tier/category and bytes moved per link.
  // kOutOfMemory when the device cannot hold fixed_bytes(); kInvalidArgument for a bad config.
  static Result<std::unique_ptr<StreamingEngine>> create(compute::Backend& backend,
                                                         ModelState& state,
                                                         const StreamingConfig& config,
                                                         TierCounters* counters = nullptr);
  // As above, with memory, streams, events and copies taken from `device` (the backend's device
  // or a wrapper of it, such as the bench's MeteredDevice) and the ops from `backend`.
  static Result<std::unique_ptr<StreamingEngine>> create(compute::Device& device,
                                                         compute::Backend& backend,
                                                         ModelState& state,
                                                         const StreamingConfig& config,
                                                         TierCounters* counters = nullptr);
  ~StreamingEngine();

  // Forward and backward of one step. Overwrites the host gradients of every block with
  // ∂(mean loss)/∂w (in a data-parallel group, this GPU's share of each block, summed over the
  // group, and grad_sumsq is that share's). kInvalidArgument for shapes beyond the configured
  // maxima or ids out of range.
  Result<StepResult> forward_backward(const StepBatch& batch);
  // Forward only (eval, generation). When `logits` is given (micro-batches of at most
  // config.logits_tokens tokens) it receives [sequences, seq_len, vocab] fp32 host logits, copied
  // back one micro-batch at a time.
  Result<StepResult> forward(const StepBatch& batch, float* logits = nullptr);

  // Called before block b's weights are uploaded for a forward pass: blocks until the optimizer
  // has finished with it. Default: no wait.
  void set_weight_gate(std::function<void(size_t block)> gate);
  // Receives the step's timeline spans (block index, phase "h2d" | "forward" | "backward" | "d2h",
  // start and end in seconds of `clock`) at the end of each step, timed on the device by events
  // and placed at `clock`'s reading at step start; the trainer turns them into `span` events.
  using SpanSink = spillway::SpanSink;
  void set_span_sink(SpanSink sink, std::function<double()> clock);
  // Joins the data-parallel group of config.data_parallel_ranks devices as `comm`'s rank (its
  // ranks() must match), before the first pass. `on_failure` is called on the engine's thread
  // when a pass fails, before the engine waits for its own queued work: the group's owner aborts
  // the group there, so that no GPU waits for this one's collectives (nor this one for theirs).
  // `comm` must outlive the engine.
  Status set_communicator(compute::Communicator* comm, std::function<void()> on_failure);
  // Marks every cached device copy of the weights stale (after the host weights changed).
  void invalidate_weights();
  // A flag (the trainer's SIGTERM) read before each micro-batch of each layer: once set, the pass
  // under way stops there with kCancelled after the work already queued has finished, so a step of
  // ten minutes stops within about one layer's compute of one micro-batch. The host gradients are
  // then partial and the step must not be applied; the host weights are untouched. Null: never.
  // The flag must outlive the engine.
  void set_stop_flag(const std::atomic<bool>* stop);

  const DeviceMemoryPlan& memory_plan() const;
  // The HBM state tier (null when config.hbm_state_blocks came to none).
  HbmState* hbm_state();
  // Bytes moved host→device and device→host so far.
  uint64_t h2d_bytes() const;
  uint64_t d2h_bytes() const;

  // The ops' largest shapes for `config`: what Backend::workspace_bytes is asked about.
  static compute::OpShapes op_shapes(const ModelConfig& model, const StreamingConfig& config);
  // config.lm_head_chunk, or when 0 lm_head_chunk_for(model.vocab_size).
  static int lm_head_chunk(const ModelConfig& model, const StreamingConfig& config);
  // The fixed part of the engine's device memory (no checkpoints on the device) for activations of
  // `act` and a backend workspace of `backend_workspace_bytes`: for the planner, which may have no
  // backend at hand.
  static DeviceMemoryPlan plan_device_memory(const ParameterLayout& layout,
                                             const StreamingConfig& config, DType act,
                                             uint64_t backend_workspace_bytes);
  // Bytes one training step moves across the host link, activations all on the device (checkpoints
  // spilled to the host add theirs). Up: every block's fp32 master for the forward (a tied head's
  // embedding a second time) and every layer's again for the backward, less the layers still in a
  // weight slot when the backward starts (slots are reused least recently used: the last K - 1
  // layers stay, K - 2 with a tied head holding the embedding), plus the token ids and labels
  // (int32). Down: every block's fp32 gradient once, the per-token fp32 losses and the per-block
  // double sums of squares. The engine's h2d_bytes() and d2h_bytes() move by exactly these. Data
  // parallel, the first GPU's; past one machine (config.block_owners) the busiest GPU's, each
  // carrying only its own blocks both ways.
  struct LinkBytes {
    uint64_t h2d = 0, d2h = 0;
  };
  // The first `hbm_blocks` blocks (the HBM state tier) cross in neither direction.
  static LinkBytes plan_link_bytes(const ParameterLayout& layout, const StreamingConfig& config,
                                   size_t hbm_blocks = 0);
  // Device memory left free beside the arena when the HBM state tier takes "as many as fit": the
  // libraries' lazy allocations (cuBLAS handles, NCCL later) and other processes' growth.
  static constexpr uint64_t kHbmStateReserveBytes = uint64_t{1} << 30;
  // Device bytes of the activation buffers `config` keeps on the device when they fit: the
  // micro-batches' activation gradients and the checkpoints of every layer, or of the first
  // config.device_checkpoint_layers; 0 without keep_checkpoints_on_device. What create()'s arena
  // holds for them beside the fixed part and the HBM state tier.
  static uint64_t device_checkpoint_bytes(const ParameterLayout& layout,
                                          const StreamingConfig& config, DType act);
  // How many blocks the HBM state tier holds on a device with `free_bytes` free (the engine's
  // device_memory_info at setup, the planner's probe): config.hbm_state_blocks when >= 0 (at most
  // every block; create() fails when they do not fit), else, on a GPU, as many of the first
  // blocks as fit beside the fixed part, the checkpoints kept on the device
  // (device_checkpoint_bytes: every one unless config.device_checkpoint_layers says fewer, which
  // is how the planner trades checkpoints for blocks) and kHbmStateReserveBytes; none with
  // `host_memory` (the CPU backend: the "device" is DRAM already).
  static size_t hbm_state_blocks(const ParameterLayout& layout, const StreamingConfig& config,
                                 DType act, uint64_t backend_workspace_bytes, uint64_t free_bytes,
                                 bool host_memory);
  // Device bytes the engine needs on `backend` for `config` without checkpoints on the device.
  static uint64_t required_device_bytes(const ParameterLayout& layout,
                                        const StreamingConfig& config,
                                        const compute::Backend& backend);

 private:
  struct Impl;
  explicit StreamingEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spillway
