#include "train/streaming-engine.h"

#include "tiers/device-arena.h"
#include "tiers/host-pool.h"

#include <algorithm>
#include <cstring>

namespace spillway {

using compute::Backend;
using compute::EventId;
using compute::StreamId;

namespace {

constexpr size_t kDeviceAlign = 256;
size_t align_bytes(size_t n) { return (n + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign; }

// Bytes of the per-micro-batch workspace for `tokens` tokens of one layer.
struct WorkspaceShape {
  size_t h, qd, kvd, f, tokens, lse;
  size_t act_elems() const { return tokens * (10 * h + 4 * qd + 4 * kvd + 6 * f); }
  size_t f32_elems() const { return 2 * tokens + lse; }
};

WorkspaceShape workspace_shape(const ModelConfig& c, const StreamingConfig& s) {
  const size_t tokens = static_cast<size_t>(s.micro_batch_size) * s.seq_len;
  return {static_cast<size_t>(c.hidden_size), static_cast<size_t>(c.q_dim()), static_cast<size_t>(c.kv_dim()),
          static_cast<size_t>(c.intermediate_size), tokens, static_cast<size_t>(c.num_heads) * tokens};
}

}  // namespace

uint64_t StreamingEngine::required_device_bytes(const ParameterLayout& layout, const StreamingConfig& config,
                                                size_t act_bytes) {
  const ModelConfig& c = layout.config();
  const WorkspaceShape ws = workspace_shape(c, config);
  const int grad_buffers = c.tie_word_embeddings ? 3 : 2;
  return config.weight_slots * align_bytes(layout.max_block_numel() * act_bytes) +
         grad_buffers * align_bytes(layout.max_block_numel() * sizeof(float)) + align_bytes(ws.act_elems() * act_bytes) +
         align_bytes(ws.f32_elems() * sizeof(float)) + 8 * kDeviceAlign;
}

// An activation buffer [tokens, hidden] of one micro-batch: on the device, or in pinned host
// memory and staged through a device buffer when used.
struct ActBuf {
  void* dev = nullptr;
  void* host = nullptr;
};

struct StreamingEngine::Impl {
  Backend& be;
  ModelState& st;
  StreamingConfig cfg;
  TierCounters* counters;
  const ParameterLayout& layout;
  const ModelConfig& mc;
  size_t act;  // bytes per activation element
  const compute::RopeScaling rs;  // Llama-3 rope scaling of the model (factor 0: none)
  StreamingEngine* owner = nullptr;

  StreamId copy_stream = 0, d2h_stream = 0;
  // The device arena holds every device buffer (weight slots, gradients, workspace, the
  // checkpoints that fit); checkpoints that do not fit go to pinned host slabs. Both count their
  // bytes in `counters` by tier and category.
  std::unique_ptr<DeviceArena> arena;
  std::unique_ptr<HostPool> pool;
  std::vector<HostRegion> host_regions;  // after `pool`: released before it
  int reservations = 0;

  struct Slot {
    void* ptr = nullptr;
    long block = -1;
    uint64_t version = 0;
    uint64_t last_use = 0;
    bool pinned = false;
    EventId ready = 0, free = 0;
  };
  std::vector<Slot> slots;
  uint64_t version = 1, tick = 0;

  struct GradBuf {
    float* ptr = nullptr;
    EventId done = 0;
  };
  std::vector<GradBuf> grads;
  int next_grad = 0;

  // Workspace views (act dtype unless noted).
  char* ws_act = nullptr;
  float* ws_f32 = nullptr;
  void *xn, *x2, *xn2, *o, *y, *dxn, *dxn2, *dx2, *stage_a, *stage_b;
  void *q, *att, *dq, *datt, *k, *v, *dk, *dv, *g, *u, *a, *dg, *du, *da;
  float *rstd1, *rstd2, *lse;

  std::vector<ActBuf> chk;  // [(layer 0..L) · M + m]: input of layer l (l = L: of the head)
  std::vector<ActBuf> dy;   // [M]: gradient flowing down, per micro-batch

  Impl(Backend& b, ModelState& s, const StreamingConfig& c, TierCounters* k)
      : be(b),
        st(s),
        cfg(c),
        counters(k),
        layout(s.layout()),
        mc(s.config()),
        act(dtype_size(b.act_dtype())),
        rs{mc.rope_scaling_factor, mc.rope_low_freq_factor, mc.rope_high_freq_factor, mc.rope_original_max_position} {}

  Result<void*> dev_alloc(size_t bytes, Category cat) {
    return arena->reserve(std::string(category_name(cat)) + "." + std::to_string(reservations++), bytes, cat);
  }

  Status setup() {
    if (cfg.weight_slots < 2) return invalid_argument("streaming: weight_slots must be at least 2");
    if (cfg.micro_batch_size < 1 || cfg.max_micro_batches < 1 || cfg.seq_len < 1)
      return invalid_argument("streaming: micro_batch_size, micro-batches and seq_len must be positive");
    size_t free_bytes = 0, total_bytes = 0;
    SPW_RETURN_IF_ERROR(be.device_memory_info(&free_bytes, &total_bytes));
    const uint64_t need = required_device_bytes(layout, cfg, act);
    if (need > free_bytes) {
      return out_of_memory("the device has " + std::to_string(free_bytes) + " bytes free but streaming needs " +
                           std::to_string(need) + " (" + std::to_string(cfg.weight_slots) + " weight slots of " +
                           std::to_string(layout.max_block_numel() * act) + " bytes, gradient buffers and the "
                           "activations of one micro-batch of " + std::to_string(cfg.micro_batch_size) + " x " +
                           std::to_string(cfg.seq_len) + " tokens); lower micro_batch_size or seq_len");
    }
    SPW_ASSIGN_OR_RETURN(copy_stream, be.create_stream());
    SPW_ASSIGN_OR_RETURN(d2h_stream, be.create_stream());
    // One arena: what streaming needs plus every checkpoint, or what the device has free.
    const WorkspaceShape shape = workspace_shape(mc, cfg);
    const size_t buf_bytes = align_bytes(shape.tokens * shape.h * act);
    const size_t buffers = (static_cast<size_t>(mc.num_layers) + 2) * cfg.max_micro_batches;  // checkpoints + dy
    const uint64_t wanted = need + (cfg.keep_checkpoints_on_device ? buffers * buf_bytes : 0);
    DeviceAllocator device{[this](size_t n) { return be.device_alloc(n); }, [this](void* p) { be.device_free(p); }, be.name()};
    SPW_ASSIGN_OR_RETURN(arena, DeviceArena::create(std::min<uint64_t>(wanted, free_bytes), device, counters, kDeviceAlign));
    HostPoolConfig pc;
    pc.slab_bytes = std::clamp<size_t>(buffers * buf_bytes, 1 << 20, 256 << 20);
    HostAllocator host{[this](size_t n) { return be.host_alloc_pinned(n); }, [this](void* p, size_t) { be.host_free_pinned(p); },
                       "pinned host memory (" + be.name() + ")"};
    pool = std::make_unique<HostPool>(pc, host, counters);

    owner->plan_.capacity_bytes = total_bytes;
    slots.resize(cfg.weight_slots);
    const size_t slot_bytes = layout.max_block_numel() * act;
    for (Slot& s : slots) {
      SPW_ASSIGN_OR_RETURN(s.ptr, dev_alloc(slot_bytes, Category::kWeights));
      SPW_ASSIGN_OR_RETURN(s.ready, be.create_event());
      SPW_ASSIGN_OR_RETURN(s.free, be.create_event());
      owner->plan_.weight_slot_bytes += align_bytes(slot_bytes);
    }
    grads.resize(mc.tie_word_embeddings ? 3 : 2);
    for (GradBuf& g : grads) {
      SPW_ASSIGN_OR_RETURN(void* p, dev_alloc(layout.max_block_numel() * sizeof(float), Category::kGradients));
      g.ptr = static_cast<float*>(p);
      SPW_ASSIGN_OR_RETURN(g.done, be.create_event());
      owner->plan_.gradient_bytes += align_bytes(layout.max_block_numel() * sizeof(float));
    }

    const WorkspaceShape ws = workspace_shape(mc, cfg);
    SPW_ASSIGN_OR_RETURN(void* wa, dev_alloc(ws.act_elems() * act, Category::kWorkspace));
    SPW_ASSIGN_OR_RETURN(void* wf, dev_alloc(ws.f32_elems() * sizeof(float), Category::kWorkspace));
    owner->plan_.workspace_bytes = align_bytes(ws.act_elems() * act) + align_bytes(ws.f32_elems() * sizeof(float));
    ws_act = static_cast<char*>(wa);
    ws_f32 = static_cast<float*>(wf);
    char* p = ws_act;
    auto take = [&](size_t elems) {
      void* r = p;
      p += elems * act;
      return r;
    };
    const size_t n = ws.tokens;
    for (void** t : {&xn, &x2, &xn2, &o, &y, &dxn, &dxn2, &dx2, &stage_a, &stage_b}) *t = take(n * ws.h);
    for (void** t : {&q, &att, &dq, &datt}) *t = take(n * ws.qd);
    for (void** t : {&k, &v, &dk, &dv}) *t = take(n * ws.kvd);
    for (void** t : {&g, &u, &a, &dg, &du, &da}) *t = take(n * ws.f);
    rstd1 = ws_f32;
    rstd2 = ws_f32 + n;
    lse = ws_f32 + 2 * n;

    // Checkpoints and activation gradients: on the device while they fit, the rest pinned on the host.
    const size_t M = cfg.max_micro_batches;
    chk.resize((mc.num_layers + 1) * M);
    dy.resize(M);
    auto place = [&](ActBuf& b) -> Status {
      if (cfg.keep_checkpoints_on_device && arena->largest_free_bytes() >= buf_bytes) {
        SPW_ASSIGN_OR_RETURN(b.dev, dev_alloc(buf_bytes, Category::kCheckpoints));
        owner->plan_.checkpoint_bytes_device += buf_bytes;
        return {};
      }
      auto h = pool->allocate(buf_bytes, Category::kCheckpoints, "activation checkpoint");
      if (!h.ok()) return h.status();
      b.host = h->data();
      host_regions.push_back(std::move(*h));
      owner->plan_.checkpoint_bytes_host += buf_bytes;
      return {};
    };
    for (ActBuf& b : dy) SPW_RETURN_IF_ERROR(place(b));
    for (ActBuf& b : chk) SPW_RETURN_IF_ERROR(place(b));
    return {};
  }

  // --- weight slots ----------------------------------------------------------------------------
  int find_slot(size_t b) const {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].block == static_cast<long>(b) && slots[i].version == version) return static_cast<int>(i);
    }
    return -1;
  }

  // Makes block b resident (uploading it on the copy stream if needed) and returns its slot, or
  // -1 when every slot is pinned (only for prefetches).
  Result<int> ensure(size_t b, bool forward, bool may_fail) {
    int i = find_slot(b);
    if (i >= 0) return i;
    int victim = -1;
    for (size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].pinned) continue;
      if (victim < 0 || slots[s].last_use < slots[victim].last_use) victim = static_cast<int>(s);
    }
    if (victim < 0) {
      if (may_fail) return -1;
      return internal_error("streaming: every weight slot is pinned");
    }
    if (forward && owner->gate_) owner->gate_(b);
    Slot& s = slots[victim];
    const size_t count = layout.blocks()[b].numel;
    SPW_RETURN_IF_ERROR(be.stream_wait_event(copy_stream, s.free));
    SPW_RETURN_IF_ERROR(timed(b, "h2d", [&] { return be.upload_f32(s.ptr, st.master(b), count, copy_stream); }));
    SPW_RETURN_IF_ERROR(be.record_event(s.ready, copy_stream));
    s.block = static_cast<long>(b);
    s.version = version;
    s.last_use = ++tick;
    moved(Link::kH2D, count * act);
    return victim;
  }

  // Acquires block b for compute: resident, pinned, and the compute stream waits for its copy.
  Result<char*> acquire(size_t b, bool forward) {
    SPW_ASSIGN_OR_RETURN(int i, ensure(b, forward, false));
    Slot& s = slots[i];
    s.pinned = true;
    s.last_use = ++tick;
    SPW_RETURN_IF_ERROR(be.stream_wait_event(0, s.ready));
    return static_cast<char*>(s.ptr);
  }

  Status release(size_t b) {
    int i = find_slot(b);
    if (i < 0) return {};
    slots[i].pinned = false;
    return be.record_event(slots[i].free, 0);
  }

  Status prefetch(size_t b, bool forward) {
    if (b >= layout.num_blocks()) return {};
    auto r = ensure(b, forward, true);
    return r.ok() ? Status() : r.status();
  }

  // Times `fn` as a span of block b when a span sink is set.
  template <typename Fn>
  Status timed(size_t b, const char* phase, Fn&& fn) {
    if (!owner->span_sink_) return fn();
    const double t0 = owner->clock_();
    Status st = fn();
    owner->span_sink_(b, phase, t0, owner->clock_());
    return st;
  }

  void moved(Link l, uint64_t bytes) {
    if (l == Link::kH2D) owner->h2d_bytes_ += bytes;
    if (l == Link::kD2H) owner->d2h_bytes_ += bytes;
    if (counters) counters->add_moved(l, bytes);
  }

  // --- activation buffers ------------------------------------------------------------------------
  size_t act_buf_bytes(int tokens) const { return static_cast<size_t>(tokens) * mc.hidden_size * act; }

  Result<void*> load(ActBuf& b, void* stage, int tokens) {
    if (b.dev) return b.dev;
    SPW_RETURN_IF_ERROR(be.copy_h2d(stage, b.host, act_buf_bytes(tokens), 0));
    moved(Link::kH2D, act_buf_bytes(tokens));
    return stage;
  }
  void* target(ActBuf& b, void* stage) { return b.dev ? b.dev : stage; }
  Status store(ActBuf& b, const void* from, int tokens) {
    if (b.dev) return {};
    SPW_RETURN_IF_ERROR(be.copy_d2h(b.host, from, act_buf_bytes(tokens), 0));
    moved(Link::kD2H, act_buf_bytes(tokens));
    return {};
  }

  // --- one transformer layer -----------------------------------------------------------------------
  const void* wp(const char* w, size_t off) const { return off == kNoParam ? nullptr : w + off * act; }
  float* gp(float* g, size_t off) const { return off == kNoParam ? nullptr : g + off; }

  // out[N, h] = layer(x[N, h]) for `batch` sequences of `seq` tokens; fills the workspace that the
  // backward needs.
  Status layer_forward(const char* w, const void* x, void* out, int batch, int seq) {
    const LayerOffsets& L = layout.layer_offsets();
    const int n = batch * seq, h = mc.hidden_size, qd = mc.q_dim(), kvd = mc.kv_dim(), f = mc.intermediate_size;
    SPW_RETURN_IF_ERROR(be.rmsnorm_forward(xn, rstd1, x, wp(w, L.attn_norm), n, h, mc.rms_norm_eps));
    SPW_RETURN_IF_ERROR(be.linear_forward(q, xn, wp(w, L.wq), wp(w, L.bq), n, h, qd));
    SPW_RETURN_IF_ERROR(be.linear_forward(k, xn, wp(w, L.wk), wp(w, L.bk), n, h, kvd));
    SPW_RETURN_IF_ERROR(be.linear_forward(v, xn, wp(w, L.wv), wp(w, L.bv), n, h, kvd));
    SPW_RETURN_IF_ERROR(be.rope_forward(q, batch, seq, mc.num_heads, mc.head_dim, mc.rope_theta, rs));
    SPW_RETURN_IF_ERROR(be.rope_forward(k, batch, seq, mc.num_kv_heads, mc.head_dim, mc.rope_theta, rs));
    SPW_RETURN_IF_ERROR(be.attention_forward(att, lse, q, k, v, batch, seq, mc.num_heads, mc.num_kv_heads, mc.head_dim));
    SPW_RETURN_IF_ERROR(be.linear_forward(o, att, wp(w, L.wo), nullptr, n, qd, h));
    SPW_RETURN_IF_ERROR(be.copy_d2d(x2, x, static_cast<size_t>(n) * h * act, 0));
    SPW_RETURN_IF_ERROR(be.add_inplace(x2, o, static_cast<size_t>(n) * h));  // [N, h] residual
    SPW_RETURN_IF_ERROR(be.rmsnorm_forward(xn2, rstd2, x2, wp(w, L.mlp_norm), n, h, mc.rms_norm_eps));
    SPW_RETURN_IF_ERROR(be.linear_forward(g, xn2, wp(w, L.w_gate), nullptr, n, h, f));
    SPW_RETURN_IF_ERROR(be.linear_forward(u, xn2, wp(w, L.w_up), nullptr, n, h, f));
    SPW_RETURN_IF_ERROR(be.swiglu_forward(a, g, u, n, f));
    SPW_RETURN_IF_ERROR(be.linear_forward(out, a, wp(w, L.w_down), nullptr, n, f, h));
    return be.add_inplace(out, x2, static_cast<size_t>(n) * h);
  }

  // Recomputes the layer from its checkpoint x, then dx[N, h] = ∂loss/∂x given dyv = ∂loss/∂out,
  // and dw (fp32, the layer's block layout) += ∂loss/∂w.
  Status layer_backward(const char* w, float* dw, const void* x, const void* dyv, void* dx, int batch, int seq) {
    SPW_RETURN_IF_ERROR(layer_forward(w, x, y, batch, seq));
    const LayerOffsets& L = layout.layer_offsets();
    const int n = batch * seq, h = mc.hidden_size, qd = mc.q_dim(), kvd = mc.kv_dim(), f = mc.intermediate_size;
    // MLP: out = x2 + down(swiglu(gate(xn2), up(xn2)))
    SPW_RETURN_IF_ERROR(be.linear_backward(da, gp(dw, L.w_down), nullptr, dyv, a, wp(w, L.w_down), n, f, h, false));
    SPW_RETURN_IF_ERROR(be.swiglu_backward(dg, du, da, g, u, n, f));
    SPW_RETURN_IF_ERROR(be.linear_backward(dxn2, gp(dw, L.w_gate), nullptr, dg, xn2, wp(w, L.w_gate), n, h, f, false));
    SPW_RETURN_IF_ERROR(be.linear_backward(dxn2, gp(dw, L.w_up), nullptr, du, xn2, wp(w, L.w_up), n, h, f, true));
    SPW_RETURN_IF_ERROR(be.copy_d2d(dx2, dyv, static_cast<size_t>(n) * h * act, 0));
    SPW_RETURN_IF_ERROR(be.rmsnorm_backward(dx2, gp(dw, L.mlp_norm), dxn2, x2, wp(w, L.mlp_norm), rstd2, n, h, true));
    // Attention: x2 = x + o_proj(attn(rope(q), rope(k), v))
    SPW_RETURN_IF_ERROR(be.linear_backward(datt, gp(dw, L.wo), nullptr, dx2, att, wp(w, L.wo), n, qd, h, false));
    SPW_RETURN_IF_ERROR(be.attention_backward(dq, dk, dv, datt, q, k, v, att, lse, batch, seq, mc.num_heads,
                                              mc.num_kv_heads, mc.head_dim));
    if (L.bk != kNoParam) {  // the key bias apart from dk (see Backend::attention_key_bias_backward)
      SPW_RETURN_IF_ERROR(be.attention_key_bias_backward(gp(dw, L.bk), datt, q, k, v, batch, seq, mc.num_heads,
                                                         mc.num_kv_heads, mc.head_dim, mc.rope_theta, rs));
    }
    SPW_RETURN_IF_ERROR(be.rope_backward(dq, batch, seq, mc.num_heads, mc.head_dim, mc.rope_theta, rs));
    SPW_RETURN_IF_ERROR(be.rope_backward(dk, batch, seq, mc.num_kv_heads, mc.head_dim, mc.rope_theta, rs));
    SPW_RETURN_IF_ERROR(be.linear_backward(dxn, gp(dw, L.wq), gp(dw, L.bq), dq, xn, wp(w, L.wq), n, h, qd, false));
    SPW_RETURN_IF_ERROR(be.linear_backward(dxn, gp(dw, L.wk), nullptr, dk, xn, wp(w, L.wk), n, h, kvd, true));
    SPW_RETURN_IF_ERROR(be.linear_backward(dxn, gp(dw, L.wv), gp(dw, L.bv), dv, xn, wp(w, L.wv), n, h, kvd, true));
    SPW_RETURN_IF_ERROR(be.copy_d2d(dx, dx2, static_cast<size_t>(n) * h * act, 0));
    return be.rmsnorm_backward(dx, gp(dw, L.attn_norm), dxn, x, wp(w, L.attn_norm), rstd1, n, h, true);
  }

  // --- gradient buffers ----------------------------------------------------------------------------
  Result<GradBuf*> begin_grad(int index, size_t b) {
    GradBuf& gb = grads[index];
    SPW_RETURN_IF_ERROR(be.synchronize_event(gb.done));  // its previous download has finished
    SPW_RETURN_IF_ERROR(be.fill_zero(gb.ptr, layout.blocks()[b].numel * sizeof(float), 0));
    return &gb;
  }
  Status finish_grad(GradBuf& gb, size_t b) {
    const size_t count = layout.blocks()[b].numel;
    EventId computed = gb.done;
    SPW_RETURN_IF_ERROR(be.record_event(computed, 0));
    SPW_RETURN_IF_ERROR(be.stream_wait_event(d2h_stream, computed));
    SPW_RETURN_IF_ERROR(timed(b, "d2h", [&] { return be.download_f32(st.grad(b), gb.ptr, count, d2h_stream); }));
    SPW_RETURN_IF_ERROR(be.record_event(gb.done, d2h_stream));
    moved(Link::kD2H, count * sizeof(float));
    return {};
  }

  // --- the pass ------------------------------------------------------------------------------------
  Status check_batch(const StepBatch& batch) const {
    if (batch.micro_batches < 1 || batch.micro_batches > cfg.max_micro_batches)
      return invalid_argument("streaming: " + std::to_string(batch.micro_batches) + " micro-batches, the engine was set up for 1.." +
                              std::to_string(cfg.max_micro_batches));
    if (batch.micro_batch_size < 1 || batch.micro_batch_size > cfg.micro_batch_size)
      return invalid_argument("streaming: micro-batch of " + std::to_string(batch.micro_batch_size) +
                              " sequences, the engine was set up for at most " + std::to_string(cfg.micro_batch_size));
    if (batch.seq_len < 1 || batch.seq_len > cfg.seq_len)
      return invalid_argument("streaming: sequence length " + std::to_string(batch.seq_len) + " exceeds the configured " +
                              std::to_string(cfg.seq_len));
    const size_t tokens = static_cast<size_t>(batch.micro_batches) * batch.micro_batch_size * batch.seq_len;
    if (batch.input_ids.size() != tokens || batch.labels.size() != tokens)
      return invalid_argument("streaming: batch holds " + std::to_string(batch.input_ids.size()) + " ids and " +
                              std::to_string(batch.labels.size()) + " labels, expected " + std::to_string(tokens));
    for (size_t i = 0; i < tokens; ++i) {
      if (batch.input_ids[i] < 0 || batch.input_ids[i] >= mc.vocab_size)
        return invalid_argument("streaming: token id " + std::to_string(batch.input_ids[i]) + " at position " +
                                std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(mc.vocab_size) + ")");
      if (batch.labels[i] != -100 && (batch.labels[i] < 0 || batch.labels[i] >= mc.vocab_size))
        return invalid_argument("streaming: label " + std::to_string(batch.labels[i]) + " at position " + std::to_string(i) +
                                " is neither -100 nor a token id");
    }
    return {};
  }

  Result<StepResult> run(const StepBatch& batch, bool train, float* logits) {
    SPW_RETURN_IF_ERROR(check_batch(batch));
    ++version;  // the host weights may have changed since the last pass
    const int M = batch.micro_batches, mb = batch.micro_batch_size, T = batch.seq_len, n = mb * T;
    const int L = mc.num_layers, h = mc.hidden_size, V = mc.vocab_size;
    const size_t head_block = layout.num_blocks() - 1;
    StepResult result;
    for (int32_t lab : batch.labels) result.targets += lab != -100;
    const float scale = train && result.targets ? 1.0f / static_cast<float>(result.targets) : 0.0f;
    auto ids = [&](int m) { return batch.input_ids.data() + static_cast<size_t>(m) * n; };
    auto labels = [&](int m) { return batch.labels.data() + static_cast<size_t>(m) * n; };
    auto C = [&](int l, int m) -> ActBuf& { return chk[static_cast<size_t>(l) * cfg.max_micro_batches + m]; };

    // Forward: embedding, then each layer for every micro-batch, prefetching the next block.
    SPW_ASSIGN_OR_RETURN(char* we, acquire(0, true));
    SPW_RETURN_IF_ERROR(prefetch(1, true));
    SPW_RETURN_IF_ERROR(timed(0, "forward", [&]() -> Status {
      for (int m = 0; m < M; ++m) {
        void* out = target(C(0, m), stage_b);
        SPW_RETURN_IF_ERROR(be.embedding_forward(out, ids(m), we, n, h));
        SPW_RETURN_IF_ERROR(store(C(0, m), out, n));
      }
      return {};
    }));
    SPW_RETURN_IF_ERROR(release(0));
    for (int l = 0; l < L; ++l) {
      SPW_ASSIGN_OR_RETURN(char* w, acquire(1 + l, true));
      SPW_RETURN_IF_ERROR(prefetch(2 + l, true));
      SPW_RETURN_IF_ERROR(timed(1 + l, "forward", [&]() -> Status {
        for (int m = 0; m < M; ++m) {
          SPW_ASSIGN_OR_RETURN(void* x, load(C(l, m), stage_a, n));
          void* out = target(C(l + 1, m), stage_b);
          SPW_RETURN_IF_ERROR(layer_forward(w, x, out, mb, T));
          SPW_RETURN_IF_ERROR(store(C(l + 1, m), out, n));
        }
        return {};
      }));
      SPW_RETURN_IF_ERROR(release(1 + l));
    }

    // Head: final norm + LM head + cross-entropy, fused with its backward when training.
    SPW_ASSIGN_OR_RETURN(char* wh, acquire(head_block, true));
    const char* wlm = nullptr;
    if (mc.tie_word_embeddings) {
      SPW_ASSIGN_OR_RETURN(char* e, acquire(0, true));
      wlm = e;
    } else {
      wlm = wh + layout.head_lm_offset() * act;
    }
    GradBuf* ghead = nullptr;
    GradBuf* gembed = nullptr;
    if (train) {
      SPW_ASSIGN_OR_RETURN(ghead, begin_grad(0, head_block));
      next_grad = 1;
      if (mc.tie_word_embeddings) {
        SPW_ASSIGN_OR_RETURN(gembed, begin_grad(2, 0));
      }
    }
    float* dlm = !train ? nullptr : mc.tie_word_embeddings ? gembed->ptr : ghead->ptr + layout.head_lm_offset();
    const void* wnorm = wh + layout.head_norm_offset() * act;
    SPW_RETURN_IF_ERROR(timed(head_block, train ? "backward" : "forward", [&]() -> Status {
      for (int m = 0; m < M; ++m) {
        SPW_ASSIGN_OR_RETURN(void* x, load(C(L, m), stage_a, n));
        SPW_RETURN_IF_ERROR(be.rmsnorm_forward(xn, rstd1, x, wnorm, n, h, mc.rms_norm_eps));
        float* lg = logits ? logits + static_cast<size_t>(m) * n * V : nullptr;
        SPW_RETURN_IF_ERROR(be.lm_head_loss(&result.loss_sum, train ? dxn : nullptr, dlm, xn, wlm, labels(m), n, h, V,
                                            scale, lg, cfg.lm_head_chunk));
        if (!train) continue;
        void* d = target(dy[m], stage_b);
        SPW_RETURN_IF_ERROR(be.rmsnorm_backward(d, ghead->ptr + layout.head_norm_offset(), dxn, x, wnorm, rstd1, n, h, false));
        SPW_RETURN_IF_ERROR(store(dy[m], d, n));
      }
      return {};
    }));
    if (mc.tie_word_embeddings) SPW_RETURN_IF_ERROR(release(0));
    SPW_RETURN_IF_ERROR(release(head_block));
    if (!train) return result;
    SPW_RETURN_IF_ERROR(finish_grad(*ghead, head_block));

    // Backward, layer L-1 down to 0: reload, recompute from the checkpoint, backpropagate.
    for (int l = L - 1; l >= 0; --l) {
      const size_t b = 1 + l;
      SPW_ASSIGN_OR_RETURN(char* w, acquire(b, false));
      if (b > 1) SPW_RETURN_IF_ERROR(prefetch(b - 1, false));  // the embedding's backward needs no weights
      SPW_ASSIGN_OR_RETURN(GradBuf* gb, begin_grad(next_grad, b));
      next_grad = (next_grad + 1) % 2;
      SPW_RETURN_IF_ERROR(timed(b, "backward", [&]() -> Status {
      for (int m = 0; m < M; ++m) {
        SPW_ASSIGN_OR_RETURN(void* x, load(C(l, m), stage_a, n));
        SPW_ASSIGN_OR_RETURN(void* d, load(dy[m], stage_b, n));
        // dx overwrites dy in place: dxn2 is free scratch by the end of layer_backward, so the
        // result goes through it.
        SPW_RETURN_IF_ERROR(layer_backward(w, gb->ptr, x, d, o, mb, T));
        void* dst = target(dy[m], stage_b);
        SPW_RETURN_IF_ERROR(be.copy_d2d(dst, o, static_cast<size_t>(n) * h * act, 0));
        SPW_RETURN_IF_ERROR(store(dy[m], dst, n));
      }
      return {};
      }));
      SPW_RETURN_IF_ERROR(release(b));
      SPW_RETURN_IF_ERROR(finish_grad(*gb, b));
    }

    // Embedding: scatter-add the gradient reaching the token embeddings (into the LM head's
    // gradient when they are tied).
    GradBuf* ge = gembed;
    if (!ge) {
      SPW_ASSIGN_OR_RETURN(ge, begin_grad(next_grad, 0));
    }
    SPW_RETURN_IF_ERROR(timed(0, "backward", [&]() -> Status {
      for (int m = 0; m < M; ++m) {
        SPW_ASSIGN_OR_RETURN(void* d, load(dy[m], stage_b, n));
        SPW_RETURN_IF_ERROR(be.embedding_backward(ge->ptr, ids(m), d, n, h));
      }
      return {};
    }));
    SPW_RETURN_IF_ERROR(finish_grad(*ge, 0));
    for (GradBuf& g : grads) SPW_RETURN_IF_ERROR(be.synchronize_event(g.done));
    return result;
  }
};

StreamingEngine::StreamingEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamingEngine::~StreamingEngine() = default;

Result<std::unique_ptr<StreamingEngine>> StreamingEngine::create(compute::Backend& backend, ModelState& state,
                                                                 const StreamingConfig& config, TierCounters* counters) {
  auto impl = std::make_unique<Impl>(backend, state, config, counters);
  Impl* raw = impl.get();
  std::unique_ptr<StreamingEngine> engine(new StreamingEngine(std::move(impl)));
  raw->owner = engine.get();
  SPW_RETURN_IF_ERROR(raw->setup());
  return engine;
}

Result<StepResult> StreamingEngine::forward_backward(const StepBatch& batch) { return impl_->run(batch, true, nullptr); }

Result<StepResult> StreamingEngine::forward(const StepBatch& batch, float* logits) {
  return impl_->run(batch, false, logits);
}

void StreamingEngine::invalidate_weights() { ++impl_->version; }

}  // namespace spillway
