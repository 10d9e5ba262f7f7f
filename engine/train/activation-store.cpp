#include "train/activation-store.h"

#include <string>

namespace spillway {

namespace {

uint64_t aligned(uint64_t bytes) {
  return compute::align_to_device(bytes);
}

// Two per micro-batch (a backward reads a checkpoint and updates a gradient; a forward reads one
// checkpoint and writes the next), times two so that the next micro-batch's copies overlap this
// one's compute.
constexpr size_t kStages = 4;

}  // namespace

uint64_t ActivationStore::staging_bytes(size_t buffer_bytes) {
  return kStages * aligned(buffer_bytes);
}

Result<std::unique_ptr<ActivationStore>> ActivationStore::create(
    compute::Device& backend, DeviceArena& arena, HostPool& pool, int layers, int micro_batches,
    size_t buffer_bytes, bool keep_on_device, int device_layers, Streams streams,
    LinkTraffic& traffic) {
  std::unique_ptr<ActivationStore> s(new ActivationStore(backend, streams, traffic));
  s->micro_batches_ = micro_batches;
  s->buffer_bytes_ = aligned(buffer_bytes);
  const size_t count = (static_cast<size_t>(layers) + 2) * micro_batches;
  s->gradients_ = (static_cast<size_t>(layers) + 1) * micro_batches;
  s->buffers_.resize(count);

  const bool every_layer = device_layers < 0 || device_layers > layers;
  const bool all_fit =
      keep_on_device && every_layer && arena.largest_free_bytes() >= count * s->buffer_bytes_;
  if (!all_fit) {
    s->stages_.resize(kStages);
    for (size_t i = 0; i < kStages; ++i) {
      Stage& st = s->stages_[i];
      // [tokens, hidden] act_dtype: a host buffer's stand-in on the device
      SPW_ASSIGN_OR_RETURN(st.ptr, arena.reserve("activations.stage" + std::to_string(i),
                                                 s->buffer_bytes_, Category::kWorkspace));
      SPW_ASSIGN_OR_RETURN(st.ready, backend.create_event());
      SPW_ASSIGN_OR_RETURN(st.written, backend.create_event());
      SPW_ASSIGN_OR_RETURN(st.free, backend.create_event());
    }
  }
  auto place = [&](size_t i, const std::string& name, bool device) -> Status {
    Buffer& b = s->buffers_[i];
    if (device && arena.largest_free_bytes() >= s->buffer_bytes_) {
      // [tokens, hidden] act_dtype
      SPW_ASSIGN_OR_RETURN(b.device, arena.reserve(name, s->buffer_bytes_, Category::kCheckpoints));
      s->device_bytes_ += s->buffer_bytes_;
      return {};
    }
    // [tokens, hidden] act_dtype, pinned
    SPW_ASSIGN_OR_RETURN(HostRegion r,
                         pool.allocate(s->buffer_bytes_, Category::kCheckpoints, name));
    b.host = r.data();
    s->host_regions_.push_back(std::move(r));
    SPW_ASSIGN_OR_RETURN(b.stored, backend.create_event());
    s->host_bytes_ += s->buffer_bytes_;
    return {};
  };
  for (int m = 0; m < micro_batches; ++m) {
    SPW_RETURN_IF_ERROR(
        place(s->gradient(m), "activations.gradient.m" + std::to_string(m), keep_on_device));
  }
  for (int l = 0; l <= layers; ++l) {
    const bool device = keep_on_device && (every_layer || l < device_layers);
    for (int m = 0; m < micro_batches; ++m) {
      SPW_RETURN_IF_ERROR(
          place(s->checkpoint(l, m),
                "activations.checkpoint.l" + std::to_string(l) + ".m" + std::to_string(m), device));
    }
  }
  return s;
}

Result<ActivationStore::View> ActivationStore::open(size_t buffer, Access access, size_t bytes) {
  Buffer& b = buffers_[buffer];
  View v{b.device, buffer, -1, access, bytes};
  if (b.device) return v;
  v.stage = static_cast<int>(next_stage_);
  next_stage_ = (next_stage_ + 1) % stages_.size();
  Stage& st = stages_[v.stage];
  v.ptr = st.ptr;
  if (access == Access::kWrite) {
    SPW_RETURN_IF_ERROR(be_.stream_wait_event(streams_.compute, st.free));
    return v;
  }
  SPW_RETURN_IF_ERROR(be_.stream_wait_event(streams_.h2d, st.free));
  SPW_RETURN_IF_ERROR(be_.stream_wait_event(streams_.h2d, b.stored));
  SPW_RETURN_IF_ERROR(be_.copy_h2d(st.ptr, b.host, bytes, streams_.h2d));
  SPW_RETURN_IF_ERROR(be_.record_event(st.ready, streams_.h2d));
  SPW_RETURN_IF_ERROR(be_.stream_wait_event(streams_.compute, st.ready));
  traffic_.moved(Link::kH2D, bytes);
  return v;
}

Status ActivationStore::close(const View& v) {
  if (v.stage < 0) return {};
  Stage& st = stages_[v.stage];
  if (v.access == Access::kRead) return be_.record_event(st.free, streams_.compute);
  Buffer& b = buffers_[v.buffer];
  SPW_RETURN_IF_ERROR(be_.record_event(st.written, streams_.compute));
  SPW_RETURN_IF_ERROR(be_.stream_wait_event(streams_.d2h, st.written));
  SPW_RETURN_IF_ERROR(be_.copy_d2h(b.host, st.ptr, v.bytes, streams_.d2h));
  SPW_RETURN_IF_ERROR(be_.record_event(b.stored, streams_.d2h));
  SPW_RETURN_IF_ERROR(be_.record_event(st.free, streams_.d2h));
  traffic_.moved(Link::kD2H, v.bytes);
  return {};
}

}  // namespace spillway
