#include "train/weight-slots.h"

#include <algorithm>
#include <string>

#include "train/hbm-state.h"

namespace spillway {

using compute::StreamId;

namespace {

uint64_t aligned(uint64_t bytes) {
  return compute::align_to_device(bytes);
}

// fp32 elements staged per copy when the master is converted on the device: 32 MiB, long enough
// that a copy runs at link speed, small next to a 7B layer's ~0.8 GB of fp32.
constexpr size_t kStagingNumel = size_t{8} << 20;

size_t staging_numel(const ParameterLayout& layout, DType act) {
  return act == DType::kF32 ? 0 : std::min(layout.max_block_numel(), kStagingNumel);
}

}  // namespace

uint64_t WeightSlots::slot_bytes(const ParameterLayout& layout, int slots, DType act) {
  return static_cast<uint64_t>(slots) * aligned(layout.max_block_numel() * dtype_size(act));
}

uint64_t WeightSlots::staging_bytes(const ParameterLayout& layout, DType act) {
  return aligned(staging_numel(layout, act) * sizeof(float));
}

WeightSlots::WeightSlots(compute::Device& backend, const ModelState& state, StreamId h2d,
                         StreamId compute, SpanRecorder& timeline, LinkTraffic& traffic)
    : be_(backend),
      state_(state),
      act_(backend.act_dtype()),
      h2d_(h2d),
      compute_(compute),
      timeline_(timeline),
      traffic_(traffic) {}

Result<std::unique_ptr<WeightSlots>> WeightSlots::create(
    compute::Device& backend, DeviceArena& arena, const ModelState& state, int slots, StreamId h2d,
    StreamId compute, SpanRecorder& timeline, LinkTraffic& traffic) {
  std::unique_ptr<WeightSlots> w(new WeightSlots(backend, state, h2d, compute, timeline, traffic));
  const ParameterLayout& layout = state.layout();
  w->slots_.resize(slots);
  for (int i = 0; i < slots; ++i) {
    Slot& s = w->slots_[i];
    // [max block numel] act_dtype: one block's compute copy
    SPW_ASSIGN_OR_RETURN(
        void* p, arena.reserve("weights.slot" + std::to_string(i),
                               layout.max_block_numel() * dtype_size(w->act_), Category::kWeights));
    s.ptr = static_cast<char*>(p);
    SPW_ASSIGN_OR_RETURN(s.ready, backend.create_event());
    SPW_ASSIGN_OR_RETURN(s.free, backend.create_event());
  }
  w->staging_numel_ = staging_numel(layout, w->act_);
  if (w->staging_numel_ > 0) {
    // [staging numel] fp32: a chunk of a block's master on its way to act_dtype
    SPW_ASSIGN_OR_RETURN(
        void* p,
        arena.reserve("weights.staging", w->staging_numel_ * sizeof(float), Category::kWeights));
    w->staging_ = static_cast<float*>(p);
  }
  return w;
}

int WeightSlots::find(size_t b) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].block == static_cast<long>(b) && slots_[i].version == version_)
      return static_cast<int>(i);
  }
  return -1;
}

void WeightSlots::set_sharing(compute::Communicator* comm, const std::vector<BlockOwner>* owners,
                              int gpus, StreamId collective) {
  comm_ = comm;
  owners_ = owners;
  gpus_ = gpus;
  collective_ = collective;
}

Status WeightSlots::upload(Slot& s, size_t b) {
  if (!comm_) return upload_here(s, b);
  const int root = (*owners_)[b].rank(gpus_);
  if (comm_->rank() == root) {
    SPW_RETURN_IF_ERROR(upload_here(s, b));
    SPW_RETURN_IF_ERROR(be_.stream_wait_event(collective_, s.ready));
  } else {
    SPW_RETURN_IF_ERROR(be_.stream_wait_event(collective_, s.free));
  }
  const size_t bytes = state_.layout().blocks()[b].numel * dtype_size(act_);
  SPW_RETURN_IF_ERROR(timed(timeline_, b, SpanPhase::kReduce, collective_,
                            [&] { return comm_->broadcast(s.ptr, bytes, root, collective_); }));
  return be_.record_event(s.ready, collective_);
}

Status WeightSlots::upload_here(Slot& s, size_t b) {
  const size_t count = state_.layout().blocks()[b].numel;
  const float* master = state_.master(b);
  SPW_RETURN_IF_ERROR(
      be_.stream_wait_event(h2d_, s.free));  // compute is done with the slot's last block
  if (device_state_ && device_state_->holds(b)) {
    // From the device master, once its update is done: a conversion at HBM speed, no link.
    SPW_RETURN_IF_ERROR(be_.stream_wait_event(h2d_, device_state_->updated()));
    SPW_RETURN_IF_ERROR(
        be_.convert(s.ptr, act_, device_state_->master(b), DType::kF32, count, h2d_));
    return be_.record_event(s.ready, h2d_);
  }
  SPW_RETURN_IF_ERROR(timed(timeline_, b, SpanPhase::kH2D, h2d_, [&]() -> Status {
    if (!staging_) return be_.copy_h2d(s.ptr, master, count * sizeof(float), h2d_);
    const size_t act_bytes = dtype_size(act_);
    for (size_t off = 0; off < count; off += staging_numel_) {
      const size_t n = std::min(staging_numel_, count - off);
      SPW_RETURN_IF_ERROR(be_.copy_h2d(staging_, master + off, n * sizeof(float), h2d_));
      SPW_RETURN_IF_ERROR(
          be_.convert(s.ptr + off * act_bytes, act_, staging_, DType::kF32, n, h2d_));
    }
    return {};
  }));
  SPW_RETURN_IF_ERROR(be_.record_event(s.ready, h2d_));
  traffic_.moved(Link::kH2D, count * sizeof(float));
  return {};
}

Result<int> WeightSlots::ensure(size_t b, bool forward, bool may_fail) {
  const int resident = find(b);
  if (resident >= 0) return resident;
  int victim = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].pinned) continue;
    if (victim < 0 || slots_[i].last_use < slots_[victim].last_use) victim = static_cast<int>(i);
  }
  if (victim < 0) {
    if (may_fail) return -1;
    return internal_error("streaming: every weight slot is pinned");
  }
  // Not for a block another machine holds: its owner's broadcast waits for its update there.
  if (forward && gate_ && !(device_state_ && device_state_->holds(b)) && state_.holds(b)) gate_(b);
  Slot& s = slots_[victim];
  SPW_RETURN_IF_ERROR(upload(s, b));
  s.block = static_cast<long>(b);
  s.version = version_;
  s.last_use = ++tick_;
  return victim;
}

Result<const char*> WeightSlots::acquire(size_t b, bool forward) {
  SPW_ASSIGN_OR_RETURN(const int i, ensure(b, forward, false));
  Slot& s = slots_[i];
  s.pinned = true;
  s.last_use = ++tick_;
  SPW_RETURN_IF_ERROR(be_.stream_wait_event(compute_, s.ready));
  return static_cast<const char*>(s.ptr);
}

Status WeightSlots::release(size_t b) {
  const int i = find(b);
  if (i < 0) return {};
  slots_[i].pinned = false;
  return be_.record_event(slots_[i].free, compute_);
}

void WeightSlots::invalidate() {
  ++version_;
  for (Slot& s : slots_) s.pinned = false;
}

Status WeightSlots::prefetch(size_t b, bool forward) {
  if (b >= state_.layout().num_blocks()) return {};
  auto r = ensure(b, forward, true);
  return r.ok() ? Status() : r.status();
}

}  // namespace spillway
