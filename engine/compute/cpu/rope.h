// Rotary position embedding (RoPE) on float32 host tensors, Hugging Face "rotate-half" layout.
//
// For pair i in [0, r/2) of a head of size d at position p, r the rotary dim (d unless
// RopeScaling::rotary_dim says fewer), with angle a = p · inv_freq[i] and scale s
// (RopeScaling::attention_factor, 1 but for LongRoPE):
//   x'[i] = s·(x[i]·cos a − x[i + r/2]·sin a),   x'[i + r/2] = s·(x[i + r/2]·cos a + x[i]·sin a)
// and dims [r, d) unchanged (transformers' apply_rotary_pos_emb, its q_rot / q_pass split).
// inv_freq[i] = theta^(−2i/r), optionally rescaled by Llama-3 scaling (_compute_llama3_parameters)
// or divided by LongRoPE's ext_factors[i] (_compute_longrope_parameters). The table follows the
// float32 arithmetic of transformers' rotary embeddings (float32 inv_freq, float32 p·inv_freq,
// float32 cos·s) and takes cos/sin of that angle exactly, so long positions round the way the
// reference does.
// Pure functions; a RopeTable is immutable after construction and safe to share between threads.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/backend.h"
#include "core/status.h"

namespace spillway::compute::cpu {

// inv_freq[rotary_dim / 2] as transformers computes it (float32), with Llama-3 scaling applied when
// scaling.factor != 0 and LongRoPE's when scaling.ext_factors is given. kInvalidArgument for an
// odd or non-positive head_dim or rotary dim (or one above head_dim), theta <= 0, Llama-3 scaling
// with factor < 0, low_freq_factor >= high_freq_factor or a non-positive original length, both
// scalings at once, ext_factors of another length than rotary_dim / 2, or attention_factor <= 0.
// The rotary dim of `scaling` for heads of head_dim: scaling.rotary_dim, or head_dim when 0.
int rope_rotary_dim(int head_dim, const RopeScaling& scaling);
Result<std::vector<float>> rope_inv_freq(int head_dim, float theta, const RopeScaling& scaling);

// cos/sin of every (position, pair) for positions [0, seq), times scaling.attention_factor.
struct RopeTable {
  int seq = 0, head_dim = 0, rotary_dim = 0;
  float theta = 0.0f;
  RopeScaling scaling;
  std::vector<float> cos, sin;  // [seq, rotary_dim / 2]

  bool matches(int s, int d, float t, const RopeScaling& r) const {
    return s <= seq && d == head_dim && t == theta && r == scaling;
  }
};

Result<RopeTable> make_rope_table(int seq, int head_dim, float theta, const RopeScaling& scaling);

// In place on x[batch, seq, heads, head_dim]; table.seq >= seq. `inverse` rotates by −a, which is
// the transpose of the forward rotation and so its backward. positions: [batch, seq], each below
// seq (packed rows, compute/backend.h's Positions), or null for 0..seq-1 in every row.
Status rope_apply(float* x, int batch, int seq, int heads, const RopeTable& table, bool inverse,
                  const int32_t* positions = nullptr);

}  // namespace spillway::compute::cpu
