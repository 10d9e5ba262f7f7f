// The step: setup of the device arena and the engine's parts, and the layer-major pass over them.
#include "train/streaming-engine.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tiers/device-arena.h"
#include "tiers/host-pool.h"
#include "train/activation-store.h"
#include "train/block-math.h"
#include "train/hbm-state.h"
#include "train/weight-slots.h"

namespace spillway {

using compute::Backend;
using compute::Device;
using compute::StreamId;
using Access = ActivationStore::Access;

namespace {

uint64_t aligned(uint64_t bytes) {
  return compute::align_to_device(bytes);
}

// Timeline spans a step can record: per block at most an upload for the forward and one for the
// backward, each followed past one machine by a broadcast (the state sharded by block), a forward
// and a backward compute span, a gradient reduce (data parallel) and download (8 · (L + 2) covers
// the tied head's second upload of the embedding, since the embedding's backward needs no
// weights).
constexpr size_t kSpansPerBlock = 8;

int tokens_per_micro_batch(const StreamingConfig& c) {
  return c.micro_batch_size * c.seq_len;
}
size_t tokens_per_step(const StreamingConfig& c) {
  return static_cast<size_t>(c.max_micro_batches) * tokens_per_micro_batch(c);
}
int gradient_buffers(const ModelConfig& c) {
  return c.tie_word_embeddings ? 3 : 2;
}
// A block's share of its gradient on each of `ranks` GPUs: ceil(numel / ranks) floats, so that the
// reduce-scatter's buffer is `ranks` equal shares (the last padded with zeros).
size_t share_numel(size_t numel, int ranks) {
  return (numel + ranks - 1) / ranks;
}
// Whether the engine is one of a data-parallel group (of GPUs of this machine, or of machines).
bool grouped(const StreamingConfig& c) {
  return c.data_parallel_ranks > 1 || c.data_parallel_processes > 1;
}
// A gradient buffer's floats: the largest block, padded to the group's multiple.
size_t grad_buffer_numel(const ParameterLayout& layout, const StreamingConfig& c) {
  return share_numel(layout.max_block_numel(), c.data_parallel_ranks) * c.data_parallel_ranks;
}
// One activation buffer: [micro-batch tokens, hidden] of `act`.
uint64_t activation_bytes(const ModelConfig& m, const StreamingConfig& c, DType act) {
  return aligned(static_cast<uint64_t>(tokens_per_micro_batch(c)) * m.hidden_size *
                 dtype_size(act));
}
// The step's ids and labels ([max tokens] int32 each) and per-token losses ([max tokens] fp32).
uint64_t step_io_bytes(const StreamingConfig& c) {
  return 4 * aligned(tokens_per_step(c) * 4);  // ids, labels, positions, losses
}
// The step's per-block gradient sums of squares, [num_blocks] double.
uint64_t grad_sumsq_bytes(const ParameterLayout& layout) {
  return aligned(layout.num_blocks() * sizeof(double));
}
// A micro-batch's logits for forward(), [logits_tokens, vocab] fp32.
uint64_t logits_bytes(const ModelConfig& m, const StreamingConfig& c) {
  return aligned(static_cast<uint64_t>(c.logits_tokens) * m.vocab_size * sizeof(float));
}

}  // namespace

int lm_head_chunk_for(int64_t vocab) {
  int chunk = 4096;
  while (chunk > 256 &&
         2 * uint64_t(chunk) * uint64_t(std::max<int64_t>(vocab, 1)) * sizeof(float) >
             kLmHeadLogitsBytes)
    chunk /= 2;
  return chunk;
}

int StreamingEngine::lm_head_chunk(const ModelConfig& model, const StreamingConfig& config) {
  return config.lm_head_chunk > 0 ? config.lm_head_chunk : lm_head_chunk_for(model.vocab_size);
}

compute::OpShapes StreamingEngine::op_shapes(const ModelConfig& model,
                                             const StreamingConfig& config) {
  return BlockMath::op_shapes(model, config.micro_batch_size, config.seq_len,
                              lm_head_chunk(model, config));
}

DeviceMemoryPlan StreamingEngine::plan_device_memory(const ParameterLayout& layout,
                                                     const StreamingConfig& config, DType act,
                                                     uint64_t backend_workspace_bytes) {
  const ModelConfig& c = layout.config();
  DeviceMemoryPlan p;
  p.weight_slot_bytes = WeightSlots::slot_bytes(layout, config.weight_slots, act) +
                        WeightSlots::staging_bytes(layout, act);
  p.gradient_bytes =
      gradient_buffers(c) * aligned(grad_buffer_numel(layout, config) * sizeof(float));
  p.backend_workspace_bytes = aligned(backend_workspace_bytes);
  p.workspace_bytes = BlockMath::scratch_bytes(c, tokens_per_micro_batch(config), act) +
                      ActivationStore::staging_bytes(activation_bytes(c, config, act)) +
                      step_io_bytes(config) + grad_sumsq_bytes(layout) + logits_bytes(c, config) +
                      p.backend_workspace_bytes;
  const int full = std::clamp(config.saved_activation_layers, 0, c.num_layers);
  const int part = std::clamp(config.mlp_recompute_layers, 0, c.num_layers - full);
  const int tokens = tokens_per_micro_batch(config);
  p.saved_activation_bytes = static_cast<uint64_t>(config.max_micro_batches) *
                             (full * BlockMath::saved_bytes(c, tokens, act) +
                              part * BlockMath::saved_bytes(c, tokens, act, /*mlp=*/false));
  return p;
}

StreamingEngine::LinkBytes StreamingEngine::plan_link_bytes(const ParameterLayout& layout,
                                                            const StreamingConfig& config,
                                                            size_t hbm_blocks) {
  const ModelConfig& c = layout.config();
  const auto& blocks = layout.blocks();  // embedding, layers 1..L, head
  const size_t L = static_cast<size_t>(c.num_layers);
  const uint64_t tokens = tokens_per_step(config);
  const int ranks = std::max(1, config.data_parallel_ranks);
  const bool sharded =
      config.data_parallel_processes > 1 && config.block_owners.size() == blocks.size();
  // The bytes of GPU `rank` of the group (past one machine, where each carries its own blocks).
  auto of_rank = [&](int rank) {
    auto fp32 = [&](size_t b) -> uint64_t {
      const bool here = !sharded || config.block_owners[b].rank(ranks) == rank;
      return b < hbm_blocks || !here ? 0 : blocks[b].numel * 4;
    };
    LinkBytes bytes;
    for (size_t b = 0; b < blocks.size(); ++b) bytes.h2d += fp32(b);
    if (c.tie_word_embeddings) bytes.h2d += fp32(0);
    const size_t others =
        c.tie_word_embeddings ? 2 : 1;  // blocks after the last layer in the slots
    const size_t resident = std::min(
        L, static_cast<size_t>(std::max(0, config.weight_slots - static_cast<int>(others))));
    for (size_t l = 0; l + resident < L; ++l) bytes.h2d += fp32(1 + l);
    bytes.h2d += 2 * tokens * sizeof(int32_t);  // ids and labels (packed rows add 4 bytes a token)
    // Down: each GPU of a data-parallel group brings its share of every gradient, the first GPU
    // (whose bytes these are) a whole ceil(numel / N); past one machine the whole gradient of
    // each block it carries.
    for (size_t b = 0; b < blocks.size(); ++b)
      bytes.d2h += sharded ? fp32(b) : b < hbm_blocks ? 0 : share_numel(blocks[b].numel, ranks) * 4;
    bytes.d2h += tokens * sizeof(float) + blocks.size() * sizeof(double);
    return bytes;
  };
  if (!sharded) return of_rank(0);
  LinkBytes most;
  for (int r = 0; r < ranks * config.data_parallel_processes; ++r) {
    const LinkBytes b = of_rank(r);
    if (b.h2d + b.d2h > most.h2d + most.d2h) most = b;
  }
  return most;
}

uint64_t StreamingEngine::device_checkpoint_bytes(const ParameterLayout& layout,
                                                  const StreamingConfig& config, DType act) {
  if (!config.keep_checkpoints_on_device) return 0;
  const ModelConfig& c = layout.config();
  const uint64_t layers = static_cast<uint64_t>(c.num_layers) + 1;  // the head's input too
  const uint64_t kept =
      config.device_checkpoint_layers < 0
          ? layers
          : std::min<uint64_t>(layers, static_cast<uint64_t>(config.device_checkpoint_layers));
  // The activation gradients (one buffer per micro-batch) and the kept layers' checkpoints.
  return (kept + 1) * config.max_micro_batches * activation_bytes(c, config, act);
}

size_t StreamingEngine::hbm_state_blocks(const ParameterLayout& layout,
                                         const StreamingConfig& config, DType act,
                                         uint64_t backend_workspace_bytes, uint64_t free_bytes,
                                         bool host_memory) {
  const size_t n = layout.num_blocks();
  if (config.hbm_state_blocks >= 0) return std::min<size_t>(config.hbm_state_blocks, n);
  if (host_memory || grouped(config)) return 0;
  const uint64_t fixed =
      plan_device_memory(layout, config, act, backend_workspace_bytes).fixed_bytes();
  // The checkpoints kept on the device first: one spilled to the host crosses the link three times
  // a step (how many to keep is the planner's trade).
  uint64_t used = fixed + kHbmStateReserveBytes + device_checkpoint_bytes(layout, config, act);
  size_t blocks = 0;
  while (blocks < n && used + HbmState::block_bytes(layout, blocks) <= free_bytes)
    used += HbmState::block_bytes(layout, blocks++);
  return blocks;
}

uint64_t StreamingEngine::required_device_bytes(const ParameterLayout& layout,
                                                const StreamingConfig& config,
                                                const compute::Backend& backend) {
  const uint64_t ws = backend.workspace_bytes(op_shapes(layout.config(), config));
  return plan_device_memory(layout, config, backend.act_dtype(), ws).fixed_bytes();
}

// A device buffer of fp32 weight gradients, [max block numel], accumulated over a step's
// micro-batches and then downloaded into the block's host gradient.
struct GradBuffer {
  float* ptr = nullptr;
  compute::Event computed;    // compute has finished accumulating into it
  compute::Event reduced;     // data parallel: its reduce-scatter over the group has finished
  compute::Event downloaded;  // its download to the host has finished: it may be zeroed again
};

struct StreamingEngine::Impl {
  Device& dev;  // memory, streams, copies (the bench's is metered)
  Backend& be;  // the ops
  ModelState& st;
  const StreamingConfig cfg;
  const ParameterLayout& layout;
  const ModelConfig& mc;
  const DType act;
  LinkTraffic traffic;
  DeviceMemoryPlan plan;
  SpanSink sink;
  std::function<double()> clock;
  std::vector<void*> registered;  // host memory registered with the backend

  // Every op runs on `compute`; weights go up on `h2d`, gradients and losses come down on `d2h`;
  // the activation store copies host checkpoints on `act_h2d` and `act_d2h`.
  compute::Stream compute, h2d, d2h, act_h2d, act_d2h;
  compute::Event inputs_ready, losses_ready, grad_sumsq_ready;
  std::vector<compute::Event> joins;  // one per copy stream: the step's end waits for them all
  std::unique_ptr<DeviceArena> arena;
  std::unique_ptr<HostPool> pool;
  HostRegion host_tokens;         // [3, max step tokens] int32, pinned: ids, labels, then positions
  HostRegion host_losses;         // [max step tokens] fp32, pinned
  HostRegion host_grad_sumsq;     // [num_blocks] double, pinned
  int32_t* dev_ids = nullptr;     // [max step tokens] int32
  int32_t* dev_labels = nullptr;  // [max step tokens] int32
  int32_t* dev_positions = nullptr;  // [max step tokens] int32: packed rows' (StepBatch)
  float* dev_losses = nullptr;       // [max step tokens] fp32
  double* dev_grad_sumsq = nullptr;  // [num_blocks] double: Σ g² of each block's gradient
  float* dev_logits = nullptr;       // [logits_tokens, vocab] fp32
  bool workspace_set = false;
  SpanRecorder timeline;
  std::unique_ptr<HbmState> hbm;  // the HBM state tier; null when it holds no block
  std::unique_ptr<WeightSlots> weights;
  std::unique_ptr<ActivationStore> acts;
  std::optional<BlockMath> math;
  // Each layer's saved activations (StreamingConfig::saved_activation_layers and
  // mlp_recompute_layers), [num_layers] once any: micro-batch m's area at base + m · stride, null
  // base for a layer that recomputes.
  struct SavedLayer {
    char* base = nullptr;
    uint64_t stride = 0;  // BlockMath::saved_bytes of one micro-batch
    bool mlp = true;
  };
  std::vector<SavedLayer> saved_layers;
  std::vector<GradBuffer>
      grads;  // [0]: the head's, [1] and [0] alternate down the layers; [2]: tied embeddings
  std::vector<GradBuffer> state_grads;  // the HBM state tier's blocks' (no events: never copied)
  const std::atomic<bool>* stop = nullptr;  // set_stop_flag
  // Data parallel: the group (set_communicator), the stream its reduce-scatters run on, and the
  // block whose share's sum of squares waits to be reduced on the compute stream (one block late,
  // so that the compute stream never waits for a reduce-scatter still running).
  compute::Communicator* comm = nullptr;
  std::function<void()> on_failure;
  compute::Stream reduce;
  GradBuffer* pending_sumsq = nullptr;
  size_t pending_block = 0;

  Impl(Device& d, Backend& b, ModelState& s, const StreamingConfig& c, TierCounters* counters)
      : dev(d), be(b), st(s), cfg(c), layout(s.layout()), mc(s.config()), act(d.act_dtype()) {
    traffic.counters = counters;
  }

  ~Impl() {
    // Nothing may still be reading or writing memory that is freed or unregistered below (a step
    // that failed half-way can leave work in flight).
    for (StreamId s : all_streams()) (void)dev.synchronize_stream(s);
    if (workspace_set)
      (void)be.set_workspace(nullptr, 0, compute::OpShapes{});  // it lies in the arena
    for (void* p : registered) dev.host_unregister(p);
  }

  // The streams the step's end joins: the copies' and, data parallel, the reduce-scatters'.
  std::vector<StreamId> copy_streams() const {
    std::vector<StreamId> s = {h2d.id(), d2h.id(), act_h2d.id(), act_d2h.id()};
    if (grouped(cfg)) s.push_back(reduce.id());
    return s;
  }
  std::vector<StreamId> all_streams() const {
    std::vector<StreamId> s = copy_streams();
    s.push_back(compute.id());
    return s;
  }

  // Layer l's saved activations of micro-batch m: the last saved_activation_layers whole, the
  // mlp_recompute_layers before them without the MLP's intermediates; none before those.
  SavedArea saved_area(int l, int m) const {
    if (static_cast<size_t>(l) >= saved_layers.size() || !saved_layers[l].base) return {};
    const SavedLayer& s = saved_layers[l];
    return {s.base + static_cast<uint64_t>(m) * s.stride, s.mlp};
  }

  Result<void*> reserve(const std::string& name, uint64_t bytes, Category category) {
    return arena->reserve(name, bytes, category);
  }

  Status setup() {
    if (cfg.weight_slots < 2) return invalid_argument("streaming: weight_slots must be at least 2");
    if (cfg.logits_tokens < 0)
      return invalid_argument("streaming: logits_tokens must not be negative");
    if (cfg.data_parallel_ranks < 1 || cfg.data_parallel_processes < 1)
      return invalid_argument(
          "streaming: data_parallel_ranks and data_parallel_processes must be at least 1");
    if (cfg.saved_activation_layers < 0 || cfg.mlp_recompute_layers < 0 ||
        cfg.saved_activation_layers + cfg.mlp_recompute_layers > mc.num_layers)
      return invalid_argument(
          "streaming: saved_activation_layers " + std::to_string(cfg.saved_activation_layers) +
          " and mlp_recompute_layers " + std::to_string(cfg.mlp_recompute_layers) +
          " are not counts of the model's " + std::to_string(mc.num_layers) + " layers");
    if (cfg.micro_batch_size < 1 || cfg.max_micro_batches < 1 || cfg.seq_len < 1 ||
        cfg.lm_head_chunk < 0)
      return invalid_argument(
          "streaming: micro_batch_size, micro-batches and seq_len must be positive, lm_head_chunk "
          "not negative");
    // Pinned, so that uploads of the master weights and downloads of the gradients run at link
    // speed.
    for (size_t b = 0; cfg.register_host_state && b < layout.num_blocks(); ++b) {
      const size_t bytes = layout.blocks()[b].numel * sizeof(float);
      for (float* p : {st.master(b), st.grad(b)}) {
        if (!p) continue;  // a block of the HBM state tier has no host gradient
        SPW_RETURN_IF_ERROR(dev.host_register(p, bytes));
        registered.push_back(p);
      }
    }
    size_t free_bytes = 0, total_bytes = 0;
    SPW_RETURN_IF_ERROR(dev.device_memory_info(&free_bytes, &total_bytes));
    const compute::OpShapes shapes = op_shapes(mc, cfg);
    const uint64_t backend_ws = be.workspace_bytes(shapes);
    DeviceMemoryPlan need = plan_device_memory(layout, cfg, act, backend_ws);
    need.state_blocks =
        hbm_state_blocks(layout, cfg, act, backend_ws, free_bytes, dev.facts().host_memory());
    need.state_bytes = HbmState::bytes(layout, need.state_blocks);
    if (need.state_blocks > 0 && grouped(cfg))
      return invalid_argument(
          "placement.hbm_state_blocks: the HBM state tier trains on one GPU only for now; with "
          "several GPUs set it to -1 or 0");
    for (size_t b = need.state_blocks; b < layout.num_blocks(); ++b) {
      if (!st.grad(b) && st.holds(b))  // another machine's block has no host state here
        return invalid_argument("streaming: block " + layout.blocks()[b].name +
                                " has no host gradient but is outside the HBM state tier's " +
                                std::to_string(need.state_blocks) +
                                " blocks (ModelState::create's device_grad_blocks)");
    }
    if (cfg.hbm_state_blocks > 0 && need.fixed_bytes() <= free_bytes &&
        need.fixed_bytes() + need.state_bytes > free_bytes) {
      return out_of_memory("the device has " + std::to_string(free_bytes) +
                           " bytes free; streaming needs " + std::to_string(need.fixed_bytes()) +
                           " and the state of the first " + std::to_string(need.state_blocks) +
                           " blocks (placement.hbm_state_blocks) " +
                           std::to_string(need.state_bytes) +
                           " more; lower placement.hbm_state_blocks, or -1 for as many as fit");
    }
    if (need.fixed_bytes() > free_bytes) {
      return out_of_memory(
          "the device has " + std::to_string(free_bytes) + " bytes free but streaming needs " +
          std::to_string(need.fixed_bytes()) + " (" + std::to_string(cfg.weight_slots) +
          " weight slots of " + std::to_string(layout.max_block_numel() * dtype_size(act)) +
          " bytes, gradient buffers, the backend's workspace of " + std::to_string(backend_ws) +
          " bytes and the activations of one micro-batch of " +
          std::to_string(cfg.micro_batch_size) + " x " + std::to_string(cfg.seq_len) +
          " tokens); lower micro_batch_size or seq_len");
    }
    SPW_ASSIGN_OR_RETURN(compute, dev.create_stream());
    SPW_ASSIGN_OR_RETURN(h2d, dev.create_stream());
    SPW_ASSIGN_OR_RETURN(d2h, dev.create_stream());
    SPW_ASSIGN_OR_RETURN(act_h2d, dev.create_stream());
    SPW_ASSIGN_OR_RETURN(act_d2h, dev.create_stream());
    SPW_ASSIGN_OR_RETURN(inputs_ready, dev.create_event());
    SPW_ASSIGN_OR_RETURN(losses_ready, dev.create_event());
    SPW_ASSIGN_OR_RETURN(grad_sumsq_ready, dev.create_event());
    if (grouped(cfg)) {
      SPW_ASSIGN_OR_RETURN(reduce, dev.create_stream());
    }
    for (size_t i = 0; i < copy_streams().size(); ++i) {
      SPW_ASSIGN_OR_RETURN(compute::Event e, dev.create_event());
      joins.push_back(std::move(e));
    }

    // One arena: the fixed part plus the checkpoints kept on the device, or what the device has
    // free.
    const uint64_t act_buf = activation_bytes(mc, cfg, act);
    const uint64_t buffers = (static_cast<uint64_t>(mc.num_layers) + 2) * cfg.max_micro_batches;
    const uint64_t device_acts = device_checkpoint_bytes(layout, cfg, act);
    const uint64_t wanted = need.fixed_bytes() + need.state_bytes + device_acts;
    DeviceAllocator device{[this](size_t n) { return dev.device_alloc(n); },
                           [this](void* p) { dev.device_free(p); }, dev.name()};
    const uint64_t capacity = std::min<uint64_t>(wanted, free_bytes);
    SPW_ASSIGN_OR_RETURN(
        arena, DeviceArena::create(capacity, device, traffic.counters, compute::kDeviceAlignment));
    // Pinned slabs sized for the checkpoints when some will spill to the host; otherwise the pool
    // holds only the step's ids, labels and losses.
    HostPoolConfig pc;
    const bool spills = capacity < wanted || device_acts < buffers * act_buf;
    pc.slab_bytes = spills ? std::clamp<size_t>(buffers * act_buf, 1 << 20, 256 << 20) : 1 << 20;
    HostAllocator host{[this](size_t n) { return dev.host_alloc_pinned(n); },
                       [this](void* p, size_t) { dev.host_free_pinned(p); },
                       "pinned host memory (" + dev.name() + ")"};
    pool = std::make_unique<HostPool>(pc, host, traffic.counters);

    SPW_ASSIGN_OR_RETURN(timeline, SpanRecorder::create(dev, kSpansPerBlock * layout.num_blocks()));
    SPW_ASSIGN_OR_RETURN(weights, WeightSlots::create(dev, *arena, st, cfg.weight_slots, h2d,
                                                      compute, timeline, traffic));
    if (need.state_blocks > 0) {
      SPW_ASSIGN_OR_RETURN(hbm, HbmState::create(dev, be, *arena, st, need.state_blocks, compute));
      weights->set_device_state(hbm.get());
    }
    grads.resize(gradient_buffers(mc));
    for (size_t i = 0; i < grads.size(); ++i) {
      // [max block numel] fp32
      // [max block numel, padded to the group's multiple] fp32
      SPW_ASSIGN_OR_RETURN(
          void* p, reserve("gradients." + std::to_string(i),
                           grad_buffer_numel(layout, cfg) * sizeof(float), Category::kGradients));
      grads[i].ptr = static_cast<float*>(p);
      SPW_ASSIGN_OR_RETURN(grads[i].computed, dev.create_event());
      SPW_ASSIGN_OR_RETURN(grads[i].reduced, dev.create_event());
      SPW_ASSIGN_OR_RETURN(grads[i].downloaded, dev.create_event());
    }
    state_grads.resize(need.state_blocks);  // their pointers: begin_grad
    SPW_ASSIGN_OR_RETURN(BlockMath m, BlockMath::create(be, layout, tokens_per_micro_batch(cfg),
                                                        lm_head_chunk(mc, cfg), *arena));
    math.emplace(std::move(m));
    if (need.saved_activation_bytes > 0) {
      // Layer-major from the first saved layer, [micro-batches] areas of BlockMath::saved_bytes
      // each: the partial layers' (without the MLP's intermediates), then the whole ones'. Each
      // layer's forward leaves there what its backward reads.
      SPW_ASSIGN_OR_RETURN(void* p, reserve("activations.saved", need.saved_activation_bytes,
                                            Category::kActivations));
      const int first_whole = mc.num_layers - cfg.saved_activation_layers;
      char* at = static_cast<char*>(p);
      saved_layers.resize(mc.num_layers);
      for (int l = first_whole - cfg.mlp_recompute_layers; l < mc.num_layers; ++l) {
        const bool mlp = l >= first_whole;
        const uint64_t stride = BlockMath::saved_bytes(mc, tokens_per_micro_batch(cfg), act, mlp);
        saved_layers[l] = {at, stride, mlp};
        at += stride * cfg.max_micro_batches;
      }
    }
    if (backend_ws > 0) {
      // [backend_ws] bytes: the ops' scratch (logits chunks, partial sums, GEMM workspace)
      SPW_ASSIGN_OR_RETURN(void* p, reserve("backend.workspace", backend_ws, Category::kWorkspace));
      SPW_RETURN_IF_ERROR(be.set_workspace(p, backend_ws, shapes));
      workspace_set = true;
    }
    const size_t max_tokens = tokens_per_step(cfg);
    SPW_ASSIGN_OR_RETURN(void* ids,
                         reserve("step.ids", max_tokens * sizeof(int32_t), Category::kWorkspace));
    SPW_ASSIGN_OR_RETURN(
        void* labels, reserve("step.labels", max_tokens * sizeof(int32_t), Category::kWorkspace));
    SPW_ASSIGN_OR_RETURN(void* positions, reserve("step.positions", max_tokens * sizeof(int32_t),
                                                  Category::kWorkspace));
    SPW_ASSIGN_OR_RETURN(void* losses,
                         reserve("step.losses", max_tokens * sizeof(float), Category::kWorkspace));
    dev_ids = static_cast<int32_t*>(ids);        // [max step tokens] int32
    dev_labels = static_cast<int32_t*>(labels);  // [max step tokens] int32
    dev_positions = static_cast<int32_t*>(positions);
    dev_losses = static_cast<float*>(losses);  // [max step tokens] fp32
    SPW_ASSIGN_OR_RETURN(
        void* sumsq, reserve("step.grad_sumsq", grad_sumsq_bytes(layout), Category::kWorkspace));
    dev_grad_sumsq = static_cast<double*>(sumsq);  // [num_blocks] double
    if (cfg.logits_tokens > 0) {
      // [logits_tokens, vocab] fp32
      SPW_ASSIGN_OR_RETURN(void* p,
                           reserve("step.logits", logits_bytes(mc, cfg), Category::kWorkspace));
      dev_logits = static_cast<float*>(p);
    }
    // [3, max step tokens] int32, [max step tokens] fp32 and [num_blocks] double, pinned
    SPW_ASSIGN_OR_RETURN(host_tokens,
                         pool->allocate(3 * max_tokens * sizeof(int32_t), Category::kWorkspace,
                                        "token ids, labels and positions"));
    SPW_ASSIGN_OR_RETURN(host_losses, pool->allocate(max_tokens * sizeof(float),
                                                     Category::kWorkspace, "per-token losses"));
    SPW_ASSIGN_OR_RETURN(host_grad_sumsq,
                         pool->allocate(layout.num_blocks() * sizeof(double), Category::kWorkspace,
                                        "gradient sums of squares"));

    // Last: the checkpoints take what is left.
    SPW_ASSIGN_OR_RETURN(
        acts,
        ActivationStore::create(dev, *arena, *pool, mc.num_layers, cfg.max_micro_batches, act_buf,
                                cfg.keep_checkpoints_on_device, cfg.device_checkpoint_layers,
                                {compute, act_h2d, act_d2h}, traffic));
    plan = need;
    plan.workspace_bytes =
        need.workspace_bytes - ActivationStore::staging_bytes(act_buf) + acts->staging_bytes();
    plan.checkpoint_bytes_device = acts->device_bytes();
    plan.checkpoint_bytes_host = acts->host_bytes();
    plan.capacity_bytes = total_bytes;
    return {};
  }

  // --- gradient buffers
  // ----------------------------------------------------------------------------
  // Block b's gradient buffer, zeroed on the compute stream: the HBM state tier's own for its
  // blocks (`index` unused), else buffer `index`, once its last download has finished.
  Result<GradBuffer*> begin_grad(int index, size_t b) {
    if (hbm && hbm->holds(b)) {
      GradBuffer& g = state_grads[b];
      g.ptr = hbm->grad(b);
      SPW_RETURN_IF_ERROR(dev.fill_zero(g.ptr, layout.blocks()[b].numel * sizeof(float), compute));
      return &g;
    }
    GradBuffer& g = grads[index];
    SPW_RETURN_IF_ERROR(
        dev.stream_wait_event(compute, g.downloaded));  // its previous download has finished
    // Data parallel: the padding too, which the reduce-scatter sums.
    const int ranks = cfg.data_parallel_ranks;
    const size_t numel = share_numel(layout.blocks()[b].numel, ranks) * ranks;
    SPW_RETURN_IF_ERROR(dev.fill_zero(g.ptr, numel * sizeof(float), compute));
    return &g;
  }

  // Block b's gradient is complete: it comes down on the D2H stream while the compute stream
  // reduces it to its sum of squares (both only read it; the buffer's next begin_grad follows the
  // reduction on the compute stream and waits for the download). Called once per block and step, so
  // each block's final gradient is counted once, tied embeddings included: the LM head's part of
  // the gradient is the embedding block's (ghead holds the final norm's only).
  Status finish_grad(GradBuffer& g, size_t b) {
    const size_t numel = layout.blocks()[b].numel, bytes = numel * sizeof(float);
    if (hbm && hbm->holds(b))  // it stays on the device for the GPU's AdamW
      return be.sum_squares(dev_grad_sumsq + b, compute::f32(g.ptr, {static_cast<int64_t>(numel)}),
                            compute);
    if (comm) return finish_grad_share(g, b);
    SPW_RETURN_IF_ERROR(dev.record_event(g.computed, compute));
    SPW_RETURN_IF_ERROR(dev.stream_wait_event(d2h, g.computed));
    SPW_RETURN_IF_ERROR(timed(timeline, b, SpanPhase::kD2H, d2h,
                              [&] { return dev.copy_d2h(st.grad(b), g.ptr, bytes, d2h); }));
    SPW_RETURN_IF_ERROR(dev.record_event(g.downloaded, d2h));
    SPW_RETURN_IF_ERROR(be.sum_squares(
        dev_grad_sumsq + b, compute::f32(g.ptr, {static_cast<int64_t>(numel)}), compute));
    traffic.moved(Link::kD2H, bytes);
    return {};
  }

  // Data parallel: block b's gradient is summed over the group on the reduce stream (a reduce-
  // scatter in place), then this GPU's share comes down on the D2H stream; its sum of squares is
  // reduced on the compute stream one block later (flush_share_sumsq), by when the reduce-scatter
  // has long finished, so the compute stream never waits for it.
  // This GPU's share of block b's gradient: each rank's is `size` floats of the padded buffer;
  // [first, first + count) of them lie inside the block (count 0 past a small block's end).
  struct Share {
    size_t size, first, count;
  };
  Share share_of(size_t b) const {
    const size_t numel = layout.blocks()[b].numel;
    if (sharded()) {  // the whole block, on the GPU that carries it
      const bool here = cfg.block_owners[b].rank(cfg.data_parallel_ranks) == comm->rank();
      return {numel, 0, here ? numel : 0};
    }
    const size_t size = share_numel(numel, cfg.data_parallel_ranks);
    const int local = comm->rank() % cfg.data_parallel_ranks;  // machine-major ranks
    const size_t first = std::min(numel, static_cast<size_t>(local) * size);
    return {size, first, std::min(numel, first + size) - first};
  }

  Status finish_grad_share(GradBuffer& g, size_t b) {
    const Share sh = share_of(b);  // a struct: lambdas cannot capture structured bindings (C++20)
    SPW_RETURN_IF_ERROR(dev.record_event(g.computed, compute));
    SPW_RETURN_IF_ERROR(dev.stream_wait_event(reduce, g.computed));
    SPW_RETURN_IF_ERROR(timed(timeline, b, SpanPhase::kReduce, reduce, [&] {
      // Across machines the GPU that carries the block alone needs the sum.
      if (sharded())
        return comm->reduce_sum(g.ptr, sh.size, cfg.block_owners[b].rank(cfg.data_parallel_ranks),
                                reduce);
      return comm->reduce_scatter_sum(g.ptr, sh.size, reduce);
    }));
    SPW_RETURN_IF_ERROR(dev.record_event(g.reduced, reduce));
    SPW_RETURN_IF_ERROR(dev.stream_wait_event(d2h, g.reduced));
    if (sh.count > 0) {
      SPW_RETURN_IF_ERROR(timed(timeline, b, SpanPhase::kD2H, d2h, [&] {
        return dev.copy_d2h(st.grad(b) + sh.first, g.ptr + sh.first, sh.count * sizeof(float), d2h);
      }));
      traffic.moved(Link::kD2H, sh.count * sizeof(float));
    }
    SPW_RETURN_IF_ERROR(dev.record_event(g.downloaded, d2h));
    SPW_RETURN_IF_ERROR(flush_share_sumsq());
    pending_sumsq = &g;
    pending_block = b;
    return {};
  }

  // The sum of squares of the pending block's share, on the compute stream after its reduce.
  Status flush_share_sumsq() {
    if (!pending_sumsq) return {};
    GradBuffer& g = *std::exchange(pending_sumsq, nullptr);
    const size_t b = pending_block;
    const Share sh = share_of(b);
    SPW_RETURN_IF_ERROR(dev.stream_wait_event(compute, g.reduced));
    return be.sum_squares(dev_grad_sumsq + b,
                          compute::f32(g.ptr + sh.first, {static_cast<int64_t>(sh.count)}),
                          compute);
  }

  // --- the step
  // ------------------------------------------------------------------------------------
  Status check_batch(const StepBatch& batch, const float* logits) const {
    if (batch.micro_batches < 1 || batch.micro_batches > cfg.max_micro_batches)
      return invalid_argument("streaming: " + std::to_string(batch.micro_batches) +
                              " micro-batches, the engine was set up for 1.." +
                              std::to_string(cfg.max_micro_batches));
    if (batch.micro_batch_size < 1 || batch.micro_batch_size > cfg.micro_batch_size)
      return invalid_argument(
          "streaming: micro-batch of " + std::to_string(batch.micro_batch_size) +
          " sequences, the engine was set up for at most " + std::to_string(cfg.micro_batch_size));
    if (batch.seq_len < 1 || batch.seq_len > cfg.seq_len)
      return invalid_argument("streaming: sequence length " + std::to_string(batch.seq_len) +
                              " exceeds the configured " + std::to_string(cfg.seq_len));
    if (logits && batch.micro_batch_size * batch.seq_len > cfg.logits_tokens)
      return invalid_argument("streaming: logits of micro-batches of " +
                              std::to_string(batch.micro_batch_size * batch.seq_len) +
                              " tokens, the engine was set up for at most " +
                              std::to_string(cfg.logits_tokens) +
                              " (StreamingConfig::logits_tokens)");
    const size_t tokens =
        static_cast<size_t>(batch.micro_batches) * batch.micro_batch_size * batch.seq_len;
    if (batch.input_ids.size() != tokens || batch.labels.size() != tokens)
      return invalid_argument("streaming: batch holds " + std::to_string(batch.input_ids.size()) +
                              " ids and " + std::to_string(batch.labels.size()) +
                              " labels, expected " + std::to_string(tokens));
    for (size_t i = 0; i < tokens; ++i) {
      if (batch.input_ids[i] < 0 || batch.input_ids[i] >= mc.vocab_size)
        return invalid_argument("streaming: token id " + std::to_string(batch.input_ids[i]) +
                                " at position " + std::to_string(i) +
                                " is outside the vocabulary [0, " + std::to_string(mc.vocab_size) +
                                ")");
      if (batch.labels[i] != -100 && (batch.labels[i] < 0 || batch.labels[i] >= mc.vocab_size))
        return invalid_argument("streaming: label " + std::to_string(batch.labels[i]) +
                                " at position " + std::to_string(i) +
                                " is neither -100 nor a token id");
    }
    if (!batch.positions.empty()) {
      if (batch.positions.size() != tokens)
        return invalid_argument("streaming: batch holds " + std::to_string(batch.positions.size()) +
                                " positions, expected " + std::to_string(tokens));
      // compute::Positions: each row starts an example, which goes on one position at a time
      // until the next starts at 0.
      for (size_t i = 0; i < tokens; ++i) {
        const int32_t p = batch.positions[i];
        const bool row_start = i % batch.seq_len == 0;
        if (row_start ? p != 0 : p != 0 && p != batch.positions[i - 1] + 1)
          return invalid_argument("streaming: position " + std::to_string(p) + " at token " +
                                  std::to_string(i) +
                                  " neither starts an example (0) nor follows the token before "
                                  "it (packed rows restart at 0 at each example)");
      }
    }
    return {};
  }

  // The step's ids, labels and positions (packed rows only), staged through pinned memory, up
  // once on the H2D stream.
  Status upload_tokens(const StepBatch& batch, size_t tokens) {
    const size_t bytes = tokens * sizeof(int32_t);
    int32_t* host_ids = host_tokens.as<int32_t>();
    int32_t* host_labels = host_ids + tokens_per_step(cfg);
    int32_t* host_positions = host_labels + tokens_per_step(cfg);
    std::memcpy(host_ids, batch.input_ids.data(), bytes);
    std::memcpy(host_labels, batch.labels.data(), bytes);
    SPW_RETURN_IF_ERROR(dev.copy_h2d(dev_ids, host_ids, bytes, h2d));
    SPW_RETURN_IF_ERROR(dev.copy_h2d(dev_labels, host_labels, bytes, h2d));
    size_t moved = 2 * bytes;
    // Bounds on every micro-batch's examples, for the attention of packed rows (BlockMath).
    compute::PackedBounds bounds;
    if (!batch.positions.empty()) {
      const size_t n = static_cast<size_t>(batch.micro_batch_size) * batch.seq_len;
      for (size_t first = 0; first < tokens; first += n) {
        const compute::PackedBounds b =
            compute::packed_bounds(batch.positions.subspan(first, n), batch.seq_len);
        bounds.examples = std::max(bounds.examples, b.examples);
        bounds.longest = std::max(bounds.longest, b.longest);
      }
    }
    math->set_packed_bounds(bounds);
    if (!batch.positions.empty()) {
      std::memcpy(host_positions, batch.positions.data(), bytes);
      SPW_RETURN_IF_ERROR(dev.copy_h2d(dev_positions, host_positions, bytes, h2d));
      moved += bytes;
    }
    SPW_RETURN_IF_ERROR(dev.record_event(inputs_ready, h2d));
    SPW_RETURN_IF_ERROR(dev.stream_wait_event(compute, inputs_ready));
    traffic.moved(Link::kH2D, moved);
    return {};
  }

  // The per-token losses, down once on the D2H stream.
  Status download_losses(size_t tokens) {
    SPW_RETURN_IF_ERROR(dev.record_event(losses_ready, compute));
    SPW_RETURN_IF_ERROR(dev.stream_wait_event(d2h, losses_ready));
    SPW_RETURN_IF_ERROR(dev.copy_d2h(host_losses.data(), dev_losses, tokens * sizeof(float), d2h));
    traffic.moved(Link::kD2H, tokens * sizeof(float));
    return {};
  }

  // The blocks' gradient sums of squares, down once on the D2H stream after the last of them.
  Status download_grad_sumsq() {
    const size_t bytes = layout.num_blocks() * sizeof(double);
    SPW_RETURN_IF_ERROR(dev.record_event(grad_sumsq_ready, compute));
    SPW_RETURN_IF_ERROR(dev.stream_wait_event(d2h, grad_sumsq_ready));
    SPW_RETURN_IF_ERROR(dev.copy_d2h(host_grad_sumsq.data(), dev_grad_sumsq, bytes, d2h));
    traffic.moved(Link::kD2H, bytes);
    return {};
  }

  // The step's one host synchronisation: the compute stream waits for every copy stream, then the
  // host for the step-end event.
  Status end_step() {
    const std::vector<StreamId> streams = copy_streams();
    for (size_t i = 0; i < streams.size(); ++i) {
      SPW_RETURN_IF_ERROR(dev.record_event(joins[i], streams[i]));
      SPW_RETURN_IF_ERROR(dev.stream_wait_event(compute, joins[i]));
    }
    SPW_RETURN_IF_ERROR(timeline.end_step(compute));
    return dev.synchronize_event(timeline.end_event());
  }

  // kCancelled once the stop flag is set: checked before each micro-batch of each layer.
  Status check_stop() const {
    if (stop && stop->load(std::memory_order_relaxed))
      return cancelled("the step was stopped on request");
    return {};
  }

  Result<StepResult> run(const StepBatch& batch, bool train, float* logits) {
    Result<StepResult> r = run_pass(batch, train, logits);
    // A pass that stopped half-way (a stop request, a failure) may leave copies and kernels queued
    // that read or write host memory the caller is about to use (the master weights it
    // checkpoints): they finish before the caller sees the error.
    // In a data-parallel group the others would wait for this GPU's collectives for ever: the
    // group is aborted first, so that their passes (and this one's queued work) end.
    if (!r.ok()) {
      pending_sumsq = nullptr;
      if (on_failure) on_failure();
      for (StreamId s : all_streams()) (void)dev.synchronize_stream(s);
    }
    return r;
  }

  // Past one machine: the host state is sharded by block (StreamingConfig::block_owners).
  bool sharded() const { return cfg.data_parallel_processes > 1; }

  Result<StepResult> run_pass(const StepBatch& batch, bool train, float* logits) {
    SPW_RETURN_IF_ERROR(check_batch(batch, logits));
    if (train && grouped(cfg) && !comm)
      return invalid_argument(
          "streaming: a data-parallel engine trains only in its group "
          "(set_communicator)");
    weights->invalidate();  // the host weights may have changed since the last pass
    const int M = batch.micro_batches, mb = batch.micro_batch_size, T = batch.seq_len, n = mb * T;
    const int L = mc.num_layers, V = mc.vocab_size;
    const size_t tokens = static_cast<size_t>(M) * n;
    const size_t act_bytes =
        static_cast<size_t>(n) * mc.hidden_size * dtype_size(act);  // one micro-batch's buffer
    const size_t head_block = layout.num_blocks() - 1;
    StepResult result;
    for (int32_t lab : batch.labels) result.targets += lab != -100;
    const int64_t targets = batch.loss_targets > 0 ? batch.loss_targets : result.targets;
    const float scale = train && targets ? 1.0f / static_cast<float>(targets) : 0.0f;
    auto open = [&](size_t buffer, Access access) { return acts->open(buffer, access, act_bytes); };
    // Micro-batch m's positions on the device (packed rows), or null.
    auto positions = [&](int m) -> const int32_t* {
      return batch.positions.empty() ? nullptr : dev_positions + static_cast<size_t>(m) * n;
    };

    const double host_start_s = clock ? clock() : 0.0;
    SPW_RETURN_IF_ERROR(timeline.begin_step(compute));
    for (StreamId s : copy_streams())
      SPW_RETURN_IF_ERROR(dev.stream_wait_event(s, timeline.start_event()));
    SPW_RETURN_IF_ERROR(upload_tokens(batch, tokens));

    // Forward: the embedding, then each layer for every micro-batch; the next block is prefetched
    // once this one's compute is enqueued, so its weight gate never holds that compute back.
    SPW_ASSIGN_OR_RETURN(const char* we, weights->acquire(0, true));
    SPW_RETURN_IF_ERROR(timed(timeline, 0, SpanPhase::kForward, compute, [&]() -> Status {
      for (int m = 0; m < M; ++m) {
        SPW_ASSIGN_OR_RETURN(ActivationStore::View out,
                             open(acts->checkpoint(0, m), Access::kWrite));
        SPW_RETURN_IF_ERROR(
            math->embedding_forward(out.ptr, dev_ids + static_cast<size_t>(m) * n, we, n, compute));
        SPW_RETURN_IF_ERROR(acts->close(out));
      }
      return {};
    }));
    SPW_RETURN_IF_ERROR(weights->prefetch(1, true));
    SPW_RETURN_IF_ERROR(weights->release(0));
    for (int l = 0; l < L; ++l) {
      const size_t b = 1 + l;
      SPW_ASSIGN_OR_RETURN(const char* w, weights->acquire(b, true));
      SPW_RETURN_IF_ERROR(timed(timeline, b, SpanPhase::kForward, compute, [&]() -> Status {
        for (int m = 0; m < M; ++m) {
          SPW_RETURN_IF_ERROR(check_stop());
          SPW_ASSIGN_OR_RETURN(ActivationStore::View x,
                               open(acts->checkpoint(l, m), Access::kRead));
          SPW_ASSIGN_OR_RETURN(ActivationStore::View out,
                               open(acts->checkpoint(l + 1, m), Access::kWrite));
          SPW_RETURN_IF_ERROR(math->layer_forward(l, w, x.ptr, out.ptr, mb, T, positions(m),
                                                  compute, train ? saved_area(l, m) : SavedArea{}));
          SPW_RETURN_IF_ERROR(acts->close(x));
          SPW_RETURN_IF_ERROR(acts->close(out));
        }
        return {};
      }));
      SPW_RETURN_IF_ERROR(weights->prefetch(b + 1, true));
      SPW_RETURN_IF_ERROR(weights->release(b));
    }

    // Head: final norm + LM head + cross-entropy, fused with its backward when training.
    SPW_ASSIGN_OR_RETURN(const char* wh, weights->acquire(head_block, true));
    const char* wlm = nullptr;  // [vocab, hidden]
    if (mc.tie_word_embeddings) {
      SPW_ASSIGN_OR_RETURN(wlm, weights->acquire(0, true));
    } else {
      wlm = wh + layout.head_lm_offset() * dtype_size(act);
    }
    GradBuffer* ghead = nullptr;
    GradBuffer* gembed = nullptr;
    if (train) {
      SPW_ASSIGN_OR_RETURN(ghead, begin_grad(0, head_block));
      if (mc.tie_word_embeddings) {
        SPW_ASSIGN_OR_RETURN(gembed, begin_grad(2, 0));
      }
    }
    float* dlm = !train ? nullptr : gembed ? gembed->ptr : ghead->ptr + layout.head_lm_offset();
    SPW_RETURN_IF_ERROR(
        timed(timeline, head_block, train ? SpanPhase::kBackward : SpanPhase::kForward, compute,
              [&]() -> Status {
                for (int m = 0; m < M; ++m) {
                  SPW_RETURN_IF_ERROR(check_stop());
                  const size_t at = static_cast<size_t>(m) * n;
                  SPW_ASSIGN_OR_RETURN(ActivationStore::View x,
                                       open(acts->checkpoint(L, m), Access::kRead));
                  ActivationStore::View dy;
                  if (train) {
                    SPW_ASSIGN_OR_RETURN(dy, open(acts->gradient(m), Access::kWrite));
                  }
                  SPW_RETURN_IF_ERROR(math->head(wh, wlm, x.ptr, dev_labels + at, dev_losses + at,
                                                 scale, dy.ptr, ghead ? ghead->ptr : nullptr, dlm,
                                                 logits ? dev_logits : nullptr, n, compute));
                  if (logits) {
                    // On the compute stream: the next micro-batch overwrites the buffer (eval and
                    // generation only).
                    SPW_RETURN_IF_ERROR(dev.copy_d2h(logits + at * V, dev_logits,
                                                     static_cast<size_t>(n) * V * sizeof(float),
                                                     compute));
                  }
                  SPW_RETURN_IF_ERROR(acts->close(x));
                  if (train) SPW_RETURN_IF_ERROR(acts->close(dy));
                }
                return {};
              }));
    SPW_RETURN_IF_ERROR(download_losses(tokens));
    if (mc.tie_word_embeddings) SPW_RETURN_IF_ERROR(weights->release(0));
    if (train && L > 0)
      SPW_RETURN_IF_ERROR(weights->prefetch(L, false));  // the first block of the backward
    SPW_RETURN_IF_ERROR(weights->release(head_block));

    if (train) {
      SPW_RETURN_IF_ERROR(finish_grad(*ghead, head_block));
      // Backward, layer L-1 down to 0: reload, recompute from the checkpoint, backpropagate; the
      // gradient buffers alternate so that one downloads while the next accumulates.
      int next_grad = 1;
      for (int l = L - 1; l >= 0; --l) {
        const size_t b = 1 + l;
        SPW_ASSIGN_OR_RETURN(const char* w, weights->acquire(b, false));
        SPW_ASSIGN_OR_RETURN(GradBuffer * g, begin_grad(next_grad, b));
        next_grad = 1 - next_grad;
        SPW_RETURN_IF_ERROR(timed(timeline, b, SpanPhase::kBackward, compute, [&]() -> Status {
          for (int m = 0; m < M; ++m) {
            SPW_RETURN_IF_ERROR(check_stop());
            SPW_ASSIGN_OR_RETURN(ActivationStore::View x,
                                 open(acts->checkpoint(l, m), Access::kRead));
            SPW_ASSIGN_OR_RETURN(ActivationStore::View dy,
                                 open(acts->gradient(m), Access::kUpdate));
            SPW_RETURN_IF_ERROR(math->layer_backward(l, w, g->ptr, x.ptr, dy.ptr, mb, T,
                                                     positions(m), compute, saved_area(l, m)));
            SPW_RETURN_IF_ERROR(acts->close(x));
            SPW_RETURN_IF_ERROR(acts->close(dy));
          }
          return {};
        }));
        if (b > 1)
          SPW_RETURN_IF_ERROR(
              weights->prefetch(b - 1, false));  // the embedding's backward needs no weights
        SPW_RETURN_IF_ERROR(weights->release(b));
        SPW_RETURN_IF_ERROR(finish_grad(*g, b));
      }
      // Embedding: scatter-add the gradient reaching the token embeddings (into the LM head's
      // gradient when they are tied).
      GradBuffer* ge = gembed;
      if (!ge) {
        SPW_ASSIGN_OR_RETURN(ge, begin_grad(next_grad, 0));
      }
      SPW_RETURN_IF_ERROR(timed(timeline, 0, SpanPhase::kBackward, compute, [&]() -> Status {
        for (int m = 0; m < M; ++m) {
          SPW_ASSIGN_OR_RETURN(ActivationStore::View dy, open(acts->gradient(m), Access::kRead));
          SPW_RETURN_IF_ERROR(math->embedding_backward(
              ge->ptr, dev_ids + static_cast<size_t>(m) * n, dy.ptr, n, compute));
          SPW_RETURN_IF_ERROR(acts->close(dy));
        }
        return {};
      }));
      SPW_RETURN_IF_ERROR(finish_grad(*ge, 0));
      SPW_RETURN_IF_ERROR(flush_share_sumsq());
      SPW_RETURN_IF_ERROR(download_grad_sumsq());
    }

    SPW_RETURN_IF_ERROR(end_step());
    const float* losses = host_losses.as<float>();
    for (size_t i = 0; i < tokens; ++i) result.loss_sum += losses[i];
    if (train) {
      const double* sumsq = host_grad_sumsq.as<double>();
      result.grad_sumsq.assign(sumsq, sumsq + layout.num_blocks());
    }
    SPW_ASSIGN_OR_RETURN(result.timeline, timeline.finish(sink, host_start_s));
    return result;
  }
};

StreamingEngine::StreamingEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamingEngine::~StreamingEngine() = default;

Result<std::unique_ptr<StreamingEngine>> StreamingEngine::create(compute::Backend& backend,
                                                                 ModelState& state,
                                                                 const StreamingConfig& config,
                                                                 TierCounters* counters) {
  return create(backend.device(), backend, state, config, counters);
}

Result<std::unique_ptr<StreamingEngine>> StreamingEngine::create(compute::Device& device,
                                                                 compute::Backend& backend,
                                                                 ModelState& state,
                                                                 const StreamingConfig& config,
                                                                 TierCounters* counters) {
  std::unique_ptr<StreamingEngine> engine(
      new StreamingEngine(std::make_unique<Impl>(device, backend, state, config, counters)));
  SPW_RETURN_IF_ERROR(engine->impl_->setup());
  return engine;
}

Result<StepResult> StreamingEngine::forward_backward(const StepBatch& batch) {
  return impl_->run(batch, true, nullptr);
}

Result<StepResult> StreamingEngine::forward(const StepBatch& batch, float* logits) {
  return impl_->run(batch, false, logits);
}

void StreamingEngine::set_weight_gate(std::function<void(size_t block)> gate) {
  impl_->weights->set_gate(std::move(gate));
}

Status StreamingEngine::set_communicator(compute::Communicator* comm,
                                         std::function<void()> on_failure) {
  const StreamingConfig& c = impl_->cfg;
  if (!comm || comm->ranks() != c.data_parallel_ranks * c.data_parallel_processes)
    return invalid_argument(
        "streaming: a communicator of " + std::to_string(comm ? comm->ranks() : 0) +
        " ranks for an engine set up for " + std::to_string(c.data_parallel_ranks) +
        " devices on each of " + std::to_string(c.data_parallel_processes) + " processes");
  if (c.data_parallel_processes > 1) {
    const ModelState& st = impl_->st;
    if (c.block_owners.size() != st.num_blocks())
      return invalid_argument(
          "streaming: block_owners names " + std::to_string(c.block_owners.size()) + " blocks of " +
          std::to_string(st.num_blocks()) + ", for " + std::to_string(c.data_parallel_processes) +
          " processes (it is for a group across machines)");
    const int process = comm->rank() / c.data_parallel_ranks;
    for (size_t b = 0; b < st.num_blocks(); ++b) {
      const BlockOwner& o = c.block_owners[b];
      if (o.process < 0 || o.process >= c.data_parallel_processes || o.gpu < 0 ||
          o.gpu >= c.data_parallel_ranks || st.holds(b) != (o.process == process))
        return invalid_argument("streaming: block " + st.layout().blocks()[b].name +
                                " belongs to GPU " + std::to_string(o.gpu) + " of process " +
                                std::to_string(o.process) + ", but process " +
                                std::to_string(process) + "'s state " +
                                (st.holds(b) ? "holds" : "does not hold") + " it");
    }
    impl_->weights->set_sharing(comm, &c.block_owners, c.data_parallel_ranks, impl_->reduce.id());
  }
  impl_->comm = comm;
  impl_->on_failure = std::move(on_failure);
  return {};
}

void StreamingEngine::set_stop_flag(const std::atomic<bool>* stop) {
  impl_->stop = stop;
}

void StreamingEngine::set_span_sink(SpanSink sink, std::function<double()> clock) {
  impl_->sink = std::move(sink);
  impl_->clock = std::move(clock);
}

void StreamingEngine::invalidate_weights() {
  impl_->weights->invalidate();
}

HbmState* StreamingEngine::hbm_state() {
  return impl_->hbm.get();
}

const DeviceMemoryPlan& StreamingEngine::memory_plan() const {
  return impl_->plan;
}
uint64_t StreamingEngine::h2d_bytes() const {
  return impl_->traffic.h2d_bytes;
}
uint64_t StreamingEngine::d2h_bytes() const {
  return impl_->traffic.d2h_bytes;
}

}  // namespace spillway
