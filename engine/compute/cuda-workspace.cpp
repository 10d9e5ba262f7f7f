// The CUDA ops' scratch formulas (cuda-workspace.h), moved out of the launchers' .cu files so that
// the planner knows them without the CUDA module.
#include "compute/cuda-workspace.h"

#include <algorithm>
#include <cstdint>

namespace spillway::cuda {

namespace {

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

}  // namespace

size_t rmsnorm_backward_scratch_floats(int n, int d) {
  if (n <= 0 || d <= 0) return 0;
  // rmsnorm.cu's backward_rows_per_block(n): rows per block so that blocks ≤ kRmsnormMaxRowBlocks.
  const size_t rows_per_block = ceil_div(n, std::min(n, kRmsnormMaxRowBlocks));
  return ceil_div(n, rows_per_block) * d;
}

size_t cudnn_attention_backward_bytes(int seq, int hq, int hkv, int head_dim) {
  constexpr size_t kBf16Bytes = 2;
  const size_t ds =
      static_cast<size_t>(hq) * ceil_div(seq, 64) * 64 * ceil_div(seq, 128) * 128 * kBf16Bytes;
  const size_t group = hq != hkv ? 2 * static_cast<size_t>(hq) * seq * head_dim * kBf16Bytes : 0;
  return ds + group + compute::align_to_device(static_cast<size_t>(hq) * seq * sizeof(float));
}

bool cudnn_attention_covers(int hq, int hkv, int head_dim) {
  return hq > 0 && hkv > 0 && hq % hkv == 0 && head_dim % 8 == 0 && head_dim >= 32 &&
         head_dim <= 256;
}

int cudnn_attention_backward_chunk(int batch, int seq, int hq, int hkv, int head_dim) {
  if (batch <= 0 || seq <= 0 || !cudnn_attention_covers(hq, hkv, head_dim)) return 0;
  const size_t one = cudnn_attention_backward_bytes(seq, hq, hkv, head_dim);
  if (one + kCudnnAttentionSlackBytes > kCudnnAttentionSequenceBytes) return 0;
  const size_t fit =
      std::max<size_t>(1, (kCudnnAttentionBackwardBytes - kCudnnAttentionSlackBytes) / one);
  for (int c = static_cast<int>(std::min<size_t>(fit, batch)); c > 0; --c) {
    if (batch % c == 0) return c;
  }
  return 0;
}

size_t attention_backward_scratch_floats(int batch, int seq, int hq, int hkv, int head_dim,
                                         bool cudnn) {
  const size_t delta = static_cast<size_t>(batch) * hq * seq;  // delta[b, hq, t]
  const size_t chunk = cudnn ? cudnn_attention_backward_chunk(batch, seq, hq, hkv, head_dim) : 0;
  const size_t fused = chunk > 0 ? chunk * cudnn_attention_backward_bytes(seq, hq, hkv, head_dim) +
                                       kCudnnAttentionSlackBytes
                                 : 0;
  return std::max(delta, ceil_div(fused, sizeof(float)));
}

size_t attention_key_bias_scratch_floats(int batch, int seq, int hq, int /*hkv*/, int head_dim) {
  const size_t table = static_cast<size_t>(seq) * head_dim;  // cos, sin: [t, d/2] each, as doubles
  const size_t partial =
      static_cast<size_t>(batch) * hq * ceil_div(seq, kKeyBiasTileRows) * head_dim;
  return 2 * (table + partial);
}

size_t bias_backward_scratch_floats(int n, int out) {
  if (n <= 0 || out <= 0) return 0;
  return ceil_div(n, kBiasBackwardRows) * out;
}

size_t sum_squares_scratch_doubles() {
  return kSumSquaresMaxPartials;
}

size_t lm_head_scratch_bytes(size_t rows, size_t v) {
  constexpr size_t kBf16Bytes = 2;
  return compute::align_to_device(rows * v * sizeof(float)) +
         compute::align_to_device(rows * v * kBf16Bytes);
}

size_t workspace_bytes(const compute::OpShapes& sh) {
  // The largest scratch any one op takes at these shapes; ops run one after another on the compute
  // stream, so they share the area.
  size_t op = 0;
  if (sh.tokens > 0 && sh.hidden > 0) {
    op = std::max(op, rmsnorm_backward_scratch_floats(sh.tokens, sh.hidden) * sizeof(float));
  }
  if (sh.qk_norm && sh.tokens > 0 && sh.head_dim > 0) {  // the per-head q and k norms
    for (int heads : {sh.heads, sh.kv_heads}) {
      op = std::max(
          op, rmsnorm_backward_scratch_floats(sh.tokens * heads, sh.head_dim) * sizeof(float));
    }
  }
  if (sh.batch > 0 && sh.seq > 0 && sh.heads > 0 && sh.kv_heads > 0 && sh.head_dim > 0) {
    op = std::max(op, attention_backward_scratch_floats(sh.batch, sh.seq, sh.heads, sh.kv_heads,
                                                        sh.head_dim, sh.fused_attention) *
                          sizeof(float));
    op = std::max(op, attention_key_bias_scratch_floats(sh.batch, sh.seq, sh.heads, sh.kv_heads,
                                                        sh.head_dim) *
                          sizeof(float));
  }
  if (sh.tokens > 0) {
    // A linear's bias gradient; the projections' widths (q/k/v carry biases in Qwen2, the others
    // bound any width a caller may use).
    for (int out :
         {sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim, sh.hidden, sh.intermediate}) {
      if (out > 0) op = std::max(op, bias_backward_scratch_floats(sh.tokens, out) * sizeof(float));
    }
  }
  // sum_squares' partials: a constant, needed whatever the shapes.
  op = std::max(op, sum_squares_scratch_doubles() * sizeof(double));
  if (sh.vocab > 0 && sh.lm_head_chunk > 0) {
    const int rows = sh.tokens > 0 ? std::min(sh.lm_head_chunk, sh.tokens) : sh.lm_head_chunk;
    op = std::max(op, lm_head_scratch_bytes(rows, sh.vocab));
  }
  return compute::align_to_device(kGemmWorkspaceBytes) + compute::align_to_device(op);
}

}  // namespace spillway::cuda
