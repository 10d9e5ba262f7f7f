// Rotary position embedding (RoPE) on float32 host tensors, Hugging Face "rotate-half" layout.
//
// For pair i in [0, d/2) of a head of size d at position p, with angle a = p · inv_freq[i]:
//   x'[i] = x[i]·cos a − x[i + d/2]·sin a,   x'[i + d/2] = x[i + d/2]·cos a + x[i]·sin a
// (transformers' apply_rotary_pos_emb). inv_freq[i] = theta^(−2i/d), optionally rescaled by
// Llama-3 rope scaling (transformers' _compute_llama3_parameters). The table follows the float32
// arithmetic of transformers' LlamaRotaryEmbedding (float32 inv_freq, float32 p·inv_freq) and
// takes cos/sin of that angle exactly, so long positions round the way the reference does.
// Pure functions; a RopeTable is immutable after construction and safe to share between threads.
#pragma once

#include <vector>

#include "compute/backend.h"
#include "core/status.h"

namespace spillway::compute::cpu {

// inv_freq[head_dim / 2] as transformers computes it (float32), with Llama-3 scaling applied when
// scaling.factor != 0. kInvalidArgument for an odd or non-positive head_dim, theta <= 0, or
// scaling with factor < 0, low_freq_factor >= high_freq_factor or a non-positive original length.
Result<std::vector<float>> rope_inv_freq(int head_dim, float theta, const RopeScaling& scaling);

// cos/sin of every (position, pair) for positions [0, seq).
struct RopeTable {
  int seq = 0, head_dim = 0;
  float theta = 0.0f;
  RopeScaling scaling;
  std::vector<float> cos, sin;  // [seq, head_dim / 2]

  bool matches(int s, int d, float t, const RopeScaling& r) const {
    return s <= seq && d == head_dim && t == theta && r == scaling;
  }
};

Result<RopeTable> make_rope_table(int seq, int head_dim, float theta, const RopeScaling& scaling);

// In place on x[batch, seq, heads, head_dim]; table.seq >= seq. `inverse` rotates by −a, which is
// the transpose of the forward rotation and so its backward.
Status rope_apply(float* x, int batch, int seq, int heads, const RopeTable& table, bool inverse);

}  // namespace spillway::compute::cpu
