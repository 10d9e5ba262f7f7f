// The gradient of the key projection's bias (Qwen2's k_proj.bias), in double precision.
//
// Softmax is invariant to adding one number to every score of a query row, so without RoPE the
// gradient of a key bias would vanish exactly; with RoPE what is left comes from the position
// dependence of the rotation:
//   db = Σ_i Σ_j dS_ij · R_jᵀ q_i / sqrt(d)      (dS as in cpu/attention.h, q after RoPE,
//                                                  R_j the rotation at key position j)
// In the low-frequency pairs R_j is nearly the identity and the terms cancel to ~1e-6 of their
// size. Summing float32 dk rows over the tokens, as linear_backward does for the other biases,
// leaves rounding noise of ~1e-10 there, and AdamW, which divides each element by its own RMS,
// turns noise near zero into steps of up to ±lr. So this recomputes each query row's scores and dP
// (float32: they only perturb the inputs), normalises the softmax and forms dS in double with
// D_i = Σ_j P_ij·dP_ij of that same P, so that Σ_j dS_ij = 0 holds to double rounding, and folds
// the rotation into the row sum, in double: with A_f = Σ_j dS_ij·cos a_jf and B_f = Σ_j dS_ij·sin
// a_jf (a_jf the angle of pair f at position j, cpu/rope.h),
//   (Σ_j dS_ij R_jᵀ q_i)[f]       = q_i[f]·A_f + q_i[f + d/2]·B_f
//   (Σ_j dS_ij R_jᵀ q_i)[f + d/2] = q_i[f + d/2]·A_f − q_i[f]·B_f
// About as long as attention_backward (bench-compute); only models with a key bias pay for it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/cpu/rope.h"
#include "core/status.h"

namespace spillway::compute::cpu {

// kInvalidArgument (naming `what`) for negative batch or seq, non-positive or odd head sizes, or
// hq not a multiple of hkv.
Status check_attention_key_bias_shape(const char* what, int batch, int seq, int hq, int hkv,
                                      int head_dim);

// Bytes of scratch attention_key_bias_backward needs for these shapes (0 when empty).
size_t attention_key_bias_scratch_bytes(int batch, int seq, int hq, int hkv, int head_dim);

// db[hkv, d] += ∂loss/∂b_k (fp32 out, accumulated in double) from dout [b, t, hq, d], q [b, t, hq,
// d] and k [b, t, hkv, d] after RoPE, v [b, t, hkv, d], and the RoPE table that rotated q and k.
// Deterministic for any thread count (fixed blocks of query rows, summed in a fixed order).
// scratch: attention_key_bias_scratch_bytes, 64-byte aligned (partial sums, per-thread rows).
// kInvalidArgument for a bad shape (above) or a table of another head size or shorter than seq;
// kUnsupported for a table that rotates part of the head only. The table's attention_factor
// scales cos and sin, which makes R_j s·R_j, as in the forward.
// positions: [b, t] for packed rows (compute/backend.h, Positions): query i sees keys
// i − positions[i] .. i, and key j was rotated by positions[j]; null for one example per row.
Status attention_key_bias_backward(float* db, const float* dout, const float* q, const float* k,
                                   const float* v, int batch, int seq, int hq, int hkv,
                                   int head_dim, const RopeTable& table, void* scratch,
                                   const int32_t* positions = nullptr);

}  // namespace spillway::compute::cpu
