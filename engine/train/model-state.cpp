#include "train/model-state.h"

#include <cmath>
#include <random>

#include "core/thread-pool.h"

namespace spillway {

Result<std::unique_ptr<ModelState>> ModelState::create(const ParameterLayout& layout,
                                                       bool with_optimizer,
                                                       size_t device_grad_blocks,
                                                       size_t moment_blocks,
                                                       std::vector<bool> held) {
  if (!held.empty() && held.size() != layout.num_blocks())
    return invalid_argument("model state: `held` names " + std::to_string(held.size()) +
                            " blocks of " + std::to_string(layout.num_blocks()));
  std::unique_ptr<ModelState> s(new ModelState(layout));
  s->blocks_.resize(layout.num_blocks());
  s->held_ = std::move(held);
  for (size_t b = 0; b < layout.num_blocks(); ++b) {
    if (!s->holds(b)) continue;
    const size_t bytes = layout.blocks()[b].numel * sizeof(float);
    Block& k = s->blocks_[b];
    SPW_ASSIGN_OR_RETURN(k.master, AlignedBuffer::allocate(bytes, 4096));
    if (b >= device_grad_blocks) {
      SPW_ASSIGN_OR_RETURN(k.grad, AlignedBuffer::allocate(bytes, 4096));
    }
    if (with_optimizer && b < moment_blocks) {
      SPW_ASSIGN_OR_RETURN(k.m, AlignedBuffer::allocate(bytes, 4096));
      SPW_ASSIGN_OR_RETURN(k.v, AlignedBuffer::allocate(bytes, 4096));
    }
  }
  return s;
}

bool ModelState::has_optimizer() const {
  for (size_t b = num_blocks(); b-- > 0;) {
    if (holds(b)) return !blocks_[b].m.empty();
  }
  return false;
}

Status ModelState::load_weights(const TensorStore& store) {
  SPW_RETURN_IF_ERROR(layout_.check(store));
  for (size_t b = 0; b < num_blocks(); ++b) {
    if (holds(b)) SPW_RETURN_IF_ERROR(layout_.load_block(store, b, master(b)));
  }
  return {};
}

void ModelState::init_random(uint64_t seed, float std) {
  // One generator per block, seeded by (seed, block): the blocks draw in parallel (a 7B model in
  // seconds instead of minutes on one thread) and the numbers do not depend on the thread count.
  ThreadPool::global().parallel_for(num_blocks(), [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end; ++b) {
      if (!holds(b)) continue;
      std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                        static_cast<uint32_t>(b)};
      std::mt19937_64 rng(seq);
      auto normal = [&]() {
        // Box-Muller on 53-bit uniforms: the same numbers on every platform, unlike
        // std::normal_distribution.
        const double u1 = ((rng() >> 11) + 1.0) * 0x1.0p-53;
        const double u2 = (rng() >> 11) * 0x1.0p-53;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      };
      float* w = master(b);
      std::fill(w, w + layout_.blocks()[b].numel, 0.0f);
      // A norm scales by (offset + w): w = 1 − offset is the identity (Gemma's w = 0, as
      // transformers initialises its (1 + w) norms).
      const float norm_init = 1.0f - layout_.config().norm_weight_offset;
      for (const ParamView& p : layout_.blocks()[b].params) {
        const bool is_norm = p.shape.size() == 1 && p.name.find("norm") != std::string::npos;
        const bool is_bias = p.name.ends_with(".bias");
        for (size_t i = 0; i < p.numel; ++i) {
          w[p.offset + i] = is_norm   ? norm_init
                            : is_bias ? 0.0f
                                      : static_cast<float>(normal() * std);
        }
      }
    }
  });
}

std::vector<TensorToWrite> ModelState::master_tensors() const {
  std::vector<TensorToWrite> tensors;
  for (size_t b = 0; b < num_blocks(); ++b) {
    if (!holds(b)) continue;
    for (const ParamView& p : layout_.blocks()[b].params)
      tensors.push_back({p.name, DType::kF32, p.shape, master(b) + p.offset});
  }
  return tensors;
}

Status ModelState::save_weights(const std::string& dir, uint64_t max_shard_bytes,
                                FileDigests* digests) const {
  return write_safetensors_sharded(dir, master_tensors(), max_shard_bytes, digests);
}

uint64_t ModelState::master_bytes() const {
  uint64_t n = 0;
  for (const auto& k : blocks_) n += k.master.size();
  return n;
}

uint64_t ModelState::gradient_bytes() const {
  uint64_t n = 0;
  for (const auto& k : blocks_) n += k.grad.size();
  return n;
}

uint64_t ModelState::optimizer_bytes() const {
  uint64_t n = 0;
  for (const auto& k : blocks_) n += k.m.size() + k.v.size();
  return n;
}

}  // namespace spillway
