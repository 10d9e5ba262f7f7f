// RoPE: table construction (float32 inv_freq, Llama-3 or LongRoPE scaling, partial rotation) and
// the in-place rotation.
#include "compute/cpu/rope.h"

#include <cmath>
#include <string>

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

int rope_rotary_dim(int head_dim, const RopeScaling& scaling) {
  return scaling.rotary_dim > 0 ? scaling.rotary_dim : head_dim;
}

Result<std::vector<float>> rope_inv_freq(int head_dim, float theta, const RopeScaling& scaling) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return invalid_argument("rope: head_dim must be positive and even, got " +
                            std::to_string(head_dim));
  }
  const int rot = rope_rotary_dim(head_dim, scaling);
  if (scaling.rotary_dim < 0 || rot % 2 != 0 || rot > head_dim) {
    return invalid_argument("rope: rotary_dim must be even and at most head_dim " +
                            std::to_string(head_dim) + ", got " +
                            std::to_string(scaling.rotary_dim));
  }
  if (!(theta > 0.0f)) return invalid_argument("rope: rope_theta must be positive");
  if (!(scaling.attention_factor > 0.0f))
    return invalid_argument("rope: attention_factor must be positive");
  const int half = rot / 2;
  if (!scaling.ext_factors.empty() &&
      (static_cast<int>(scaling.ext_factors.size()) != half || scaling.factor != 0.0f)) {
    return invalid_argument("rope: longrope needs rotary_dim / 2 = " + std::to_string(half) +
                            " factors and no llama3 scaling, got " +
                            std::to_string(scaling.ext_factors.size()));
  }
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32; LongRoPE:
    // 1.0 / (ext_factors * base ** (...)).
    float expo = static_cast<float>(2 * i) / static_cast<float>(rot);
    const float base = std::pow(theta, expo);
    inv[i] = 1.0f / (scaling.ext_factors.empty() ? base : scaling.ext_factors[i] * base);
  }
  if (scaling.factor == 0.0f) return inv;
  if (!(scaling.factor > 0.0f) || !(scaling.low_freq_factor < scaling.high_freq_factor) ||
      scaling.original_max_position_embeddings <= 0) {
    return invalid_argument(
        "rope: llama3 rope_scaling needs factor > 0, low_freq_factor < high_freq_factor and "
        "original_max_position_embeddings > 0");
  }
  // transformers' _compute_llama3_parameters, on float32 tensors as there.
  const float old_len = static_cast<float>(scaling.original_max_position_embeddings);
  const float low_wavelen = old_len / scaling.low_freq_factor;
  const float high_wavelen = old_len / scaling.high_freq_factor;
  for (int i = 0; i < half; ++i) {
    const float f = inv[i];
    const float wavelen = static_cast<float>(2.0 * M_PI) / f;
    if (wavelen > low_wavelen) {
      inv[i] = f / scaling.factor;  // long wavelengths: plain interpolation
    } else if (!(wavelen < high_wavelen)) {
      const float s = (old_len / wavelen - scaling.low_freq_factor) /
                      (scaling.high_freq_factor - scaling.low_freq_factor);
      inv[i] = (1.0f - s) * f / scaling.factor + s * f;
    }  // short wavelengths keep their frequency
  }
  return inv;
}

Result<RopeTable> make_rope_table(int seq, int head_dim, float theta, const RopeScaling& scaling) {
  if (seq < 0) return invalid_argument("rope: negative sequence length");
  SPW_ASSIGN_OR_RETURN(std::vector<float> inv, rope_inv_freq(head_dim, theta, scaling));
  RopeTable t;
  t.seq = seq;
  t.head_dim = head_dim;
  t.rotary_dim = rope_rotary_dim(head_dim, scaling);
  t.theta = theta;
  t.scaling = scaling;
  const int half = t.rotary_dim / 2;
  const float scale = scaling.attention_factor;  // cos() * attention_scaling, in float32
  t.cos.resize(static_cast<size_t>(seq) * half);
  t.sin.resize(static_cast<size_t>(seq) * half);
  for (int p = 0; p < seq; ++p) {
    for (int i = 0; i < half; ++i) {
      // float32 product as in the reference's inv_freq @ position_ids, then exact cos/sin.
      const float angle = static_cast<float>(p) * inv[i];
      t.cos[static_cast<size_t>(p) * half + i] =
          static_cast<float>(std::cos(double(angle))) * scale;
      t.sin[static_cast<size_t>(p) * half + i] =
          static_cast<float>(std::sin(double(angle))) * scale;
    }
  }
  return t;
}

Status rope_apply(float* x, int batch, int seq, int heads, const RopeTable& table, bool inverse,
                  const int32_t* positions) {
  if (batch < 0 || seq < 0 || heads < 0) return invalid_argument("rope: negative shape");
  if (seq > table.seq) return internal_error("rope: table shorter than the sequence");
  const size_t rows = static_cast<size_t>(batch) * seq;  // (b, t) pairs
  if (rows == 0 || heads == 0) return Status::ok_status();
  const int d = table.head_dim, half = table.rotary_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  ThreadPool::global().parallel_for(
      rows,
      [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; ++r) {
          const size_t pos =
              positions ? static_cast<size_t>(positions[r]) : r % static_cast<size_t>(seq);
          const float* c = &table.cos[pos * half];
          const float* s = &table.sin[pos * half];
          for (int h = 0; h < heads; ++h) {
            float* v = x + (r * heads + h) * static_cast<size_t>(d);
            for (int i = 0; i < half; ++i) {
              const float x1 = v[i], x2 = v[i + half], sn = sign * s[i];
              v[i] = x1 * c[i] - x2 * sn;
              v[i + half] = x2 * c[i] + x1 * sn;
            }
          }
        }
      },
      16);
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
