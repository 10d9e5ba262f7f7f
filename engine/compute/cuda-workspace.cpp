// The CUDA ops' scratch formulas (cuda-workspace.h), moved out of the launchers' .cu files so that
// the planner knows them without the CUDA module.
#include "compute/cuda-workspace.h"

#include <algorithm>
#include <cstdint>
#include <vector>

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

bool cudnn_attention_backward_takes_window(int window, int seq) {
  return window <= 0 || window >= seq;
}

CudnnBackwardChunk cudnn_attention_backward_chunk(int batch, int seq, int hq, int hkv,
                                                  int head_dim) {
  if (batch <= 0 || seq <= 0 || !cudnn_attention_covers(hq, hkv, head_dim)) return {};
  // The largest chunk of whole sequences within the chunk bound, else the largest part of one
  // sequence within the sequence bound.
  for (CudnnBackwardChunk c{batch, hq}; c.covered();
       c = cudnn_attention_backward_next_chunk(c, batch, seq, hq, hkv)) {
    const size_t bound =
        c.sequences > 1 ? kCudnnAttentionBackwardBytes : kCudnnAttentionSequenceBytes;
    if (cudnn_attention_backward_chunk_bytes(c, seq, hq, hkv, head_dim) +
            kCudnnAttentionSlackBytes <=
        bound)
      return c;
  }
  return {};
}

CudnnBackwardChunk cudnn_attention_backward_next_chunk(CudnnBackwardChunk chunk, int batch, int seq,
                                                       int hq, int hkv) {
  if (chunk.heads == hq) {
    for (int n = chunk.sequences - 1; n > 0; --n) {
      if (batch % n == 0) return {n, hq};
    }
  }
  // A chunk's lse starts h0·seq floats in, which cuDNN takes 16-byte aligned.
  const int unit = seq % 4 == 0 ? hq / hkv : hq;
  for (int heads = chunk.heads - unit; heads >= unit; heads -= unit) {
    if (hq % heads == 0) return {1, heads};
  }
  return {};
}

size_t cudnn_attention_backward_chunk_bytes(CudnnBackwardChunk chunk, int seq, int hq, int hkv,
                                            int head_dim) {
  if (!chunk.covered()) return 0;
  const int group = hq / hkv;
  return static_cast<size_t>(chunk.sequences) *
         cudnn_attention_backward_bytes(seq, chunk.heads, chunk.heads / group, head_dim);
}

int cudnn_ragged_examples_bucket(int examples) {
  if (examples <= 0) return 0;
  int b = 1;
  while (b < examples) b *= 2;
  return b;
}

int cudnn_ragged_length_bucket(int longest, int seq) {
  if (longest <= 0 || seq <= 0) return 0;
  int64_t b = 64;
  while (b < longest && b * 3 / 2 < longest) b *= 2;
  if (b < longest) b = b * 3 / 2;
  return static_cast<int>(std::min<int64_t>(b, seq));
}

int cudnn_ragged_chunk_index_ints(int chunk) {
  return 4 * static_cast<int>(ceil_div(static_cast<size_t>(chunk) + 1, 4) * 4);
}

int cudnn_ragged_index_host(const int32_t* positions, int batch, int seq, int hq, int hkv,
                            int head_dim, int entries, int chunk, int max_length, int32_t* index) {
  const int64_t tokens = static_cast<int64_t>(batch) * seq;
  std::vector<int64_t> firsts;
  for (int64_t i = 0; i < tokens; ++i) {
    if (i % seq == 0 || positions[i] == 0) firsts.push_back(i);
  }
  const int examples = static_cast<int>(firsts.size());
  for (int e = 0; e < entries; ++e) {
    const bool real = e < examples;
    const int64_t next = e + 1 < examples && e + 1 < entries ? firsts[e + 1] : tokens;
    cudnn_ragged_fill(index, chunk, entries, e, real, real ? firsts[e] : tokens, next, tokens,
                      static_cast<int64_t>(hq) * head_dim, static_cast<int64_t>(hkv) * head_dim,
                      max_length);
  }
  return examples;
}

size_t cudnn_ragged_index_bytes(int entries, int chunk) {
  if (entries <= 0 || chunk <= 0) return 0;
  const size_t chunks = ceil_div(entries, chunk);
  return compute::align_to_device(chunks * cudnn_ragged_chunk_index_ints(chunk) * sizeof(int32_t));
}

size_t cudnn_ragged_stats_bytes(int chunk, int hq, int length) {
  return compute::align_to_device(static_cast<size_t>(chunk) * hq * length * sizeof(float));
}

size_t cudnn_ragged_reserve_bytes(int batch, int seq, int hq) {
  if (batch <= 0 || seq <= 0 || hq <= 0) return 0;
  // More examples than this run on the module's kernel (kCudnnRaggedMinAverageLength).
  const size_t tokens = static_cast<size_t>(batch) * seq;
  const int most = static_cast<int>(
      std::clamp<size_t>(tokens / kCudnnRaggedMinAverageLength, 1, kCudnnRaggedMaxExamples));
  return cudnn_ragged_index_bytes(cudnn_ragged_examples_bucket(most), 1) +
         cudnn_ragged_stats_bytes(1, hq, seq);
}

size_t attention_backward_scratch_floats(int batch, int seq, int hq, int hkv, int head_dim,
                                         bool cudnn) {
  const size_t delta = static_cast<size_t>(batch) * hq * seq;  // delta[b, hq, t]
  const CudnnBackwardChunk chunk =
      cudnn ? cudnn_attention_backward_chunk(batch, seq, hq, hkv, head_dim) : CudnnBackwardChunk{};
  const size_t fused =
      chunk.covered() ? cudnn_attention_backward_chunk_bytes(chunk, seq, hq, hkv, head_dim) +
                            kCudnnAttentionSlackBytes + cudnn_ragged_reserve_bytes(batch, seq, hq)
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
