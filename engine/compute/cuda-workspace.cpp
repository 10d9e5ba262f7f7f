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

size_t attention_backward_scratch_floats(int batch, int seq, int hq, int /*hkv*/,
                                         int /*head_dim*/) {
  return static_cast<size_t>(batch) * hq * seq;  // delta[b, hq, t]
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
                                                        sh.head_dim) *
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
