#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu/adamw.h"
#include "compute/cpu/reduce.h"
#include "core/thread-pool.h"

namespace spillway {
namespace {

constexpr size_t kTile = compute::cpu::kAdamWTile;
using compute::cpu::adamw_tiles;

}  // namespace

compute::AdamWCoeffs adamw_coeffs(const AdamWConfig& c, int64_t step, bool decay) {
  const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(step));
  compute::AdamWCoeffs k;
  k.decay_mul = decay ? static_cast<float>(1.0 - c.lr * c.weight_decay) : 1.0f;
  k.one_minus_b1 = static_cast<float>(1.0 - c.beta1);
  k.b2 = static_cast<float>(c.beta2);
  k.one_minus_b2 = static_cast<float>(1.0 - c.beta2);
  k.step_size = static_cast<float>(c.lr / bc1);
  k.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  k.eps = static_cast<float>(c.eps);
  return k;
}

void adamw_update_range(float* param, float* m, float* v, const float* grad, size_t count,
                        const AdamWConfig& c, int64_t step, float grad_scale, bool decay,
                        ThreadPool* pool) {
  const compute::AdamWCoeffs k = adamw_coeffs(c, step, decay);
  const size_t tiles = count / kTile;
  (pool ? *pool : ThreadPool::global())
      .parallel_for(
          tiles,
          [&](size_t b, size_t e) {
            adamw_tiles(param + b * kTile, m + b * kTile, v + b * kTile, grad + b * kTile, e - b,
                        grad_scale, k);
          },
          /*min_chunk=*/256);
  for (size_t i = tiles * kTile; i < count; ++i)
    compute::adamw_element(param[i], m[i], v[i], grad[i], grad_scale, k);
}

void adamw_update_block(const BlockLayout& block, float* param, float* m, float* v,
                        const float* grad, const AdamWConfig& c, int64_t step, float grad_scale,
                        ThreadPool* pool) {
  // One parallel_for over the whole tiles of all views, numbered view after view, rather than one
  // per view: a layer costs one wake-up and one barrier instead of one per view (9 in Llama; on 2
  // threads a 3M-parameter layer took 1.4 ms that way, 1.0 ms this way). The bits are the same,
  // since no element's arithmetic depends on where a chunk starts; the views' tails run after.
  const std::vector<ParamView>& views = block.params;
  std::vector<size_t> first_tile(views.size() + 1, 0);
  for (size_t i = 0; i < views.size(); ++i) {
    first_tile[i + 1] = first_tile[i] + views[i].numel / kTile;
  }
  const compute::AdamWCoeffs with_decay = adamw_coeffs(c, step, true),
                             without = adamw_coeffs(c, step, false);
  const auto run = [&](size_t b, size_t e) {
    size_t i = std::upper_bound(first_tile.begin(), first_tile.end(), b) - first_tile.begin() - 1;
    for (; b < e; ++i) {
      const size_t end = std::min(e, first_tile[i + 1]);
      const size_t at = views[i].offset + (b - first_tile[i]) * kTile;
      adamw_tiles(param + at, m + at, v + at, grad + at, end - b, grad_scale,
                  views[i].decay ? with_decay : without);
      b = end;
    }
  };
  (pool ? *pool : ThreadPool::global()).parallel_for(first_tile.back(), run, /*min_chunk=*/256);
  for (const ParamView& p : views) {
    const compute::AdamWCoeffs& k = p.decay ? with_decay : without;
    for (size_t i = p.offset + p.numel / kTile * kTile; i < p.offset + p.numel; ++i)
      compute::adamw_element(param[i], m[i], v[i], grad[i], grad_scale, k);
  }
}

double sum_of_squares(const float* x, size_t count) {
  return compute::cpu::sum_squares(x, count);
}

float clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (total_norm + 1e-6)));
}

}  // namespace spillway
