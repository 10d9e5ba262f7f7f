// Causal grouped-query attention on float32 host tensors (transformers' eager attention with a
// causal mask, optionally a sliding window; FlashAttention-2's backward math).
//
//   forward:  S = Q·Kᵀ · scale (keys s <= query t, and t − s < window when there is one;
//             scale 1/sqrt(d) unless given);  lse_t = log Σ_s exp(S_ts);
//             P = exp(S − lse);  O = P·V
//   backward: P is recomputed from lse; D_t = Σ_j dO_tj·O_tj;  dP = dO·Vᵀ;  dS = P∘(dP − D);
//             dQ = dS·K · scale;  dK = dSᵀ·Q · scale;  dV = Pᵀ·dO
// With a window W, a block of rows reads only the keys (or queries) some row of it sees, so a
// local layer costs O(T·W), not O(T²).
// Query head h reads kv head h / (hq / hkv); dK and dV sum over the query heads of a group.
// No materialised [T, T] matrices beyond one block of rows: register-tiled loops (cpu/vec-math.h,
// AVX2+FMA where present) over blocks of 4 query rows (forward, dQ) or 4 key rows (dK, dV),
// parallel with ThreadPool::global(); blocks are taken from both ends of the sequence alternately
// so that every chunk of the causal triangle costs about the same. dK/dV are owned per kv head,
// so GQA groups sum without atomics. Scratch (transposed copies of K for the forward, of K and V,
// then Q and dO, for the backward, and per-thread row buffers) comes from the caller, sized by the
// *_scratch_bytes functions. Pure functions over caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace spillway::compute::cpu {

// kInvalidArgument (naming `what`) for negative batch or seq, non-positive head sizes, or hq not
// a multiple of hkv.
Status check_attention_shape(const char* what, int batch, int seq, int hq, int hkv, int head_dim);

// Bytes of scratch attention_forward / attention_backward need for these shapes (0 when empty).
size_t attention_forward_scratch_bytes(int batch, int seq, int hq, int hkv, int head_dim);
size_t attention_backward_scratch_bytes(int batch, int seq, int hq, int hkv, int head_dim);

// q [b, t, hq, d], k/v [b, t, hkv, d] → out [b, t, hq, d], lse [b, hq, t] (skipped when null:
// inference needs no backward). scratch: attention_forward_scratch_bytes, 64-byte aligned.
// scale: the scores' scale, 0 for 1/sqrt(head_dim); window: the sliding window (query t sees key
// s when t − s < window), 0 for none; a negative one is kInvalidArgument. positions: [b, t] for
// packed rows (compute/backend.h, Positions: query t sees no key before t − positions[t]), or
// null.
Status attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         int batch, int seq, int hq, int hkv, int head_dim, void* scratch,
                         float scale = 0.0f, int window = 0, const int32_t* positions = nullptr);
// dq [b, t, hq, d], dk/dv [b, t, hkv, d] (overwrite) from dout, q, k, v, out and lse; scale,
// window and positions as the forward's. scratch: attention_backward_scratch_bytes, 64-byte
// aligned.
Status attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                          const float* k, const float* v, const float* out, const float* lse,
                          int batch, int seq, int hq, int hkv, int head_dim, void* scratch,
                          float scale = 0.0f, int window = 0, const int32_t* positions = nullptr);

}  // namespace spillway::compute::cpu
