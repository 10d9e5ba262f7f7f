#include "train/hbm-state.h"

#include <string>

#include "core/buffer.h"
#include "tiers/device-arena.h"
#include "train/optimizer-state.h"

namespace spillway {

uint64_t HbmState::block_bytes(const ParameterLayout& layout, size_t b) {
  return 4 * compute::align_to_device(layout.blocks()[b].numel * sizeof(float));
}

uint64_t HbmState::bytes(const ParameterLayout& layout, size_t blocks) {
  uint64_t total = 0;
  for (size_t b = 0; b < std::min(blocks, layout.num_blocks()); ++b)
    total += block_bytes(layout, b);
  return total;
}

Result<std::unique_ptr<HbmState>> HbmState::create(compute::Device& device,
                                                   compute::Backend& backend, DeviceArena& arena,
                                                   ModelState& state, size_t blocks,
                                                   compute::StreamId stream) {
  std::unique_ptr<HbmState> h(new HbmState(device, backend, state, stream));
  const ParameterLayout& layout = state.layout();
  h->blocks_.resize(std::min(blocks, layout.num_blocks()));
  for (size_t b = 0; b < h->blocks_.size(); ++b) {
    const size_t bytes = layout.blocks()[b].numel * sizeof(float);
    const std::string name = "state." + layout.blocks()[b].name + ".";
    Block& k = h->blocks_[b];
    struct Part {
      float** ptr;
      const char* what;
      Category category;
    };
    for (const Part& p :
         {Part{&k.master, "master", Category::kMaster}, Part{&k.grad, "grad", Category::kGradients},
          Part{&k.m, "exp_avg", Category::kOptimizer},
          Part{&k.v, "exp_avg_sq", Category::kOptimizer}}) {
      // [numel(b)] fp32
      SPW_ASSIGN_OR_RETURN(void* ptr, arena.reserve(name + p.what, bytes, p.category));
      *p.ptr = static_cast<float*>(ptr);
    }
  }
  SPW_ASSIGN_OR_RETURN(h->updated_, device.create_event());
  return h;
}

Status HbmState::update(const AdamWConfig& config, int64_t step, float grad_scale) {
  const compute::AdamWCoeffs with_decay = adamw_coeffs(config, step, true),
                             without = adamw_coeffs(config, step, false);
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const Block& k = blocks_[b];
    // Each parameter view on its own, its padding untouched, as the CPU's adamw_update_block.
    for (const ParamView& p : state_.layout().blocks()[b].params) {
      const compute::Shape shape{static_cast<int64_t>(p.numel)};
      SPW_RETURN_IF_ERROR(
          be_.adamw(compute::f32(k.master + p.offset, shape), compute::f32(k.m + p.offset, shape),
                    compute::f32(k.v + p.offset, shape),
                    compute::f32(static_cast<const float*>(k.grad + p.offset), shape),
                    p.decay ? with_decay : without, grad_scale, stream_));
    }
  }
  return dev_.record_event(updated_, stream_);
}

namespace {

// The moments of block b on the host: ModelState's own buffers, or a buffer of this call's for a
// store that keeps them elsewhere (the SSD, for this block).
struct HostMoments {
  AlignedBuffer own;
  float *m = nullptr, *v = nullptr;
};

Result<HostMoments> host_moments(ModelState& state, OptimizerStateStore* store, size_t b) {
  HostMoments h;
  if (!store || state.exp_avg(b)) {
    h.m = state.exp_avg(b);
    h.v = state.exp_avg_sq(b);
    return h;
  }
  const size_t numel = state.layout().blocks()[b].numel;
  SPW_ASSIGN_OR_RETURN(h.own, AlignedBuffer::allocate(2 * numel * sizeof(float)));
  h.m = h.own.as<float>();
  h.v = h.m + numel;
  return h;
}

}  // namespace

Status HbmState::load_from_host(OptimizerStateStore* store) {
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const size_t bytes = state_.layout().blocks()[b].numel * sizeof(float);
    SPW_ASSIGN_OR_RETURN(HostMoments h, host_moments(state_, store, b));
    if (h.own.size() > 0) SPW_RETURN_IF_ERROR(store->read_block(b, nullptr, h.m, h.v));
    const Block& k = blocks_[b];
    SPW_RETURN_IF_ERROR(dev_.copy_h2d(k.master, state_.master(b), bytes, stream_));
    SPW_RETURN_IF_ERROR(dev_.copy_h2d(k.m, h.m, bytes, stream_));
    SPW_RETURN_IF_ERROR(dev_.copy_h2d(k.v, h.v, bytes, stream_));
    // Before `h` goes: the copies read it.
    SPW_RETURN_IF_ERROR(dev_.synchronize_stream(stream_));
  }
  return dev_.record_event(updated_, stream_);
}

Status HbmState::store_to_host(OptimizerStateStore* store) {
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const size_t bytes = state_.layout().blocks()[b].numel * sizeof(float);
    SPW_ASSIGN_OR_RETURN(HostMoments h, host_moments(state_, store, b));
    const Block& k = blocks_[b];
    // On the compute stream: after the last update.
    SPW_RETURN_IF_ERROR(dev_.copy_d2h(state_.master(b), k.master, bytes, stream_));
    SPW_RETURN_IF_ERROR(dev_.copy_d2h(h.m, k.m, bytes, stream_));
    SPW_RETURN_IF_ERROR(dev_.copy_d2h(h.v, k.v, bytes, stream_));
    SPW_RETURN_IF_ERROR(dev_.synchronize_stream(stream_));
    if (h.own.size() > 0) SPW_RETURN_IF_ERROR(store->write_block(b, nullptr, h.m, h.v));
  }
  return {};
}

}  // namespace spillway
