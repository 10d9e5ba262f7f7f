// The CUDA ops' scratch, in plain C++: how much of the workspace each CUDA op takes and the tile
// constants that decide it, shared by the kernels (engine/compute/cuda, which include this header)
// and by backend_facts (backend-facts.h), which must answer without the CUDA module.
//
// Each formula belongs to one launcher (named beside it) and changes with it: a launcher checks
// that the scratch it is given is at least what its formula here says. Thread-safety: pure
// functions. Nothing is owned.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/backend-facts.h"

// Functions the kernels and the host both run (nvcc compiles them for the device too).
#if defined(__CUDACC__)
#define SPW_HOST_DEVICE __host__ __device__
#else
#define SPW_HOST_DEVICE
#endif

namespace spillway::cuda {

// cuBLASLt's workspace, passed to every GEMM plan (gemm.cuh: Gemm::kWorkspaceBytes).
inline constexpr size_t kGemmWorkspaceBytes = 32u << 20;
// rmsnorm_backward (rmsnorm.cu): at most this many row blocks, each writing d partial sums of dw.
inline constexpr int kRmsnormMaxRowBlocks = 1024;
// bias_backward (gemm.cu): rows of dy one block sums into a partial of db.
inline constexpr int kBiasBackwardRows = 256;
// sum_squares (reduce.cu): partial sums, about one wave of 256-thread blocks on an H100.
inline constexpr size_t kSumSquaresMaxPartials = 1024;
// attention_key_bias_backward (attention-key-bias.cu): rows of a tile (attention-tile.cuh's
// kGenRows).
inline constexpr int kKeyBiasTileRows = 32;

// cuDNN's deterministic attention backward (cuda/cudnn-attention.h) keeps the scores' gradient of
// the sequences and heads of one call in the workspace, O(seq²) per head
// (cudnn_attention_backward_bytes, linear in the heads): it runs a micro-batch in chunks of
// several whole sequences that fit kCudnnAttentionBackwardBytes; else one sequence at a time, whole
// or in the largest chunks of query heads (whole GQA groups) that fit kCudnnAttentionSequenceBytes;
// and not at all beyond (the module's kernel then runs it). llama2-7b (32 heads of 128): at 2048
// four sequences a call (1.07 GB); at 8192 one whole sequence (4.3 GB); at 16384 chunks of 8 heads
// and at 32768 of 2 (4.3 GB); at 65536 none (8.6 GB a head). Larger calls run faster:
// attention-bench on an H200 measured forward + backward at 505 TFLOPS for one whole sequence of
// 8192 and 419 for it in chunks of 8 heads (1.07 GB a call; 429 at 16384 in chunks of 2 and at
// 32768 of 1).
inline constexpr size_t kCudnnAttentionBackwardBytes = size_t{3} << 29;  // 1.5 GiB
inline constexpr size_t kCudnnAttentionSequenceBytes = size_t{5} << 30;  // 5 GiB
// What cuDNN's plans take beyond the estimate below, per call (256 B on cuDNN 9.19).
inline constexpr size_t kCudnnAttentionSlackBytes = size_t{1} << 20;

// Floats of rmsnorm_backward's dw partials for n rows of width d.
size_t rmsnorm_backward_scratch_floats(int n, int d);
// Bytes of one sequence's cuDNN attention backward (cuDNN 9.19's plans, within 256 B): the scores'
// gradient in bf16 over tiles of 64 queries × 128 keys, with GQA the per-query-head dK and dV in
// bf16 before their sum over the group, and the softmax sum rowsum(dO·O) in fp32.
size_t cudnn_attention_backward_bytes(int seq, int hq, int hkv, int head_dim);
// Whether cuDNN's fused attention may take heads of this shape: head_dim a multiple of 8 from 32
// to 256, hq a multiple of hkv.
bool cudnn_attention_covers(int hq, int hkv, int head_dim);
// Whether cuDNN's attention backward takes a sliding window of `window` tokens over rows of `seq`
// (0: no window): only one that spans the rows. cuDNN's backward computes the whole causal
// triangle, and runs at a third of the module's kernel, which skips the tiles outside the band
// (attention-bench, window 512 at 8192: 57 against 155 TFLOPS on an H200).
bool cudnn_attention_backward_takes_window(int window, int seq);
// How cuDNN's attention backward splits a micro-batch into calls: `sequences` whole sequences
// with all hq heads each, or (sequences 1, heads < hq) `heads` query heads of one sequence, with
// their heads / (hq / hkv) KV heads, so that each call's dK and dV are complete. Zero: cuDNN's
// backward does not run the shape.
struct CudnnBackwardChunk {
  int sequences = 0, heads = 0;
  bool covered() const { return sequences > 0 && heads > 0; }
};
// The chunk for a micro-batch of `batch` (the bounds above; each call's workspace counted with
// kCudnnAttentionSlackBytes): the largest divisor of batch above 1 whose sequences fit
// kCudnnAttentionBackwardBytes; else, one sequence at a time, all of hq or the largest divisor of
// hq that is a multiple of the group hq / hkv whose workspace fits kCudnnAttentionSequenceBytes.
// Chunks of heads need seq a multiple of 4 (a chunk's lse starts h0·seq floats in, which cuDNN
// takes 16-byte aligned): other lengths run one whole sequence a call up to that bound. Uncovered
// beyond, or when cuDNN does not cover the heads (cudnn_attention_covers).
CudnnBackwardChunk cudnn_attention_backward_chunk(int batch, int seq, int hq, int hkv,
                                                  int head_dim);
// The next smaller chunk after `chunk`, in the order the rule above takes them: fewer sequences (a
// divisor of batch), then one sequence in fewer heads (divisors of hq, multiples of the group, or
// hq alone where seq is not a multiple of 4); uncovered after the least. The backward tries them
// in turn where cuDNN's plan asks more than the estimate.
CudnnBackwardChunk cudnn_attention_backward_next_chunk(CudnnBackwardChunk chunk, int batch, int seq,
                                                       int hq, int hkv);
// Bytes of one call of `chunk` (cudnn_attention_backward_bytes of its sequences and heads).
size_t cudnn_attention_backward_chunk_bytes(CudnnBackwardChunk chunk, int seq, int hq, int hkv,
                                            int head_dim);

// Packed rows on cuDNN (cuda/cudnn-attention.h): each example is one of cuDNN's ragged sequences,
// and a plan holds a fixed number of them up to a fixed length, both buckets of the caller's bounds
// (compute::PackedBounds) so that plans are reused across steps. A call runs its sequences in
// chunks of a plan's size; the scratch holds the ragged index of every chunk (per chunk, aligned
// to 16 bytes: the sequences' lengths, their Q and K/V offsets in elements, their first tokens),
// then one chunk's statistics [chunk, hq, length] in fp32 (and the backward's softmax sum), then
// cuDNN's own workspace.
//
// Examples shorter than this on average stay on the module's kernel: cuDNN pads each sequence to
// its 64-query tiles, which costs more than it gains below about 16 tokens an example.
inline constexpr int kCudnnRaggedMinAverageLength = 16;
// At most this many cuDNN launches per call; beyond, the module's kernel runs it.
inline constexpr int kCudnnRaggedMaxChunks = 64;
// The largest sequence count of a ragged plan: the ragged offsets are int32 elements.
inline constexpr int kCudnnRaggedMaxExamples = 1 << 20;

// Sequences a ragged plan holds for `examples`: the next power of two (0 for examples <= 0).
int cudnn_ragged_examples_bucket(int examples);
// The longest sequence of a ragged plan for examples of up to `longest` tokens in rows of `seq`:
// 64·2^k or 96·2^k, the least at least `longest` (a third more at most), and at most `seq`.
int cudnn_ragged_length_bucket(int longest, int seq);
// Int32s of one chunk's ragged index for `chunk` sequences: four arrays (lengths, Q offsets, K/V
// offsets, first tokens) of chunk + 1 entries each, rounded up to 16 bytes.
int cudnn_ragged_chunk_index_ints(int chunk);
// Where slot i of array `array` (0 lengths, 1 Q offsets, 2 K/V offsets, 3 first tokens) of chunk
// c lies in the ragged index, in int32s from its start.
SPW_HOST_DEVICE inline int64_t cudnn_ragged_slot(int chunk, int c, int array, int i) {
  const int p = (chunk + 1 + 3) / 4 * 4;  // cudnn_ragged_chunk_index_ints(chunk) / 4
  return static_cast<int64_t>(c) * 4 * p + static_cast<int64_t>(array) * p + i;
}
// Fills sequence e of the ragged index: the example of tokens [first, next) of the flat [b·t]
// array (`real`), or an empty sequence at the end of the `tokens`; its length clamped to
// max_length; q_row and kv_row the elements of a token in q and in k/v. Returns the unclamped
// length. The Q and K/V offsets one past a chunk's last sequence are those of the next one's start.
SPW_HOST_DEVICE inline int64_t cudnn_ragged_fill(int32_t* index, int chunk, int entries, int e,
                                                 bool real, int64_t first, int64_t next,
                                                 int64_t tokens, int64_t q_row, int64_t kv_row,
                                                 int max_length) {
  const int c = e / chunk, i = e % chunk;
  if (!real) first = next = tokens;
  const int64_t length = next - first;
  index[cudnn_ragged_slot(chunk, c, 0, i)] =
      static_cast<int32_t>(length < max_length ? length : max_length);
  index[cudnn_ragged_slot(chunk, c, 1, i)] = static_cast<int32_t>(first * q_row);
  index[cudnn_ragged_slot(chunk, c, 2, i)] = static_cast<int32_t>(first * kv_row);
  index[cudnn_ragged_slot(chunk, c, 3, i)] = static_cast<int32_t>(first);
  if (i == chunk - 1 || e == entries - 1) {
    index[cudnn_ragged_slot(chunk, c, 1, i + 1)] = static_cast<int32_t>(next * q_row);
    index[cudnn_ragged_slot(chunk, c, 2, i + 1)] = static_cast<int32_t>(next * kv_row);
  }
  return length;
}
// The ragged index of `positions` [batch, seq] on the host, as cudnn-ragged.cuh's kernel writes it
// (cudnn_ragged_index_bytes / 4 int32s at `index`): for tests. Returns the number of examples.
int cudnn_ragged_index_host(const int32_t* positions, int batch, int seq, int hq, int hkv,
                            int head_dim, int entries, int chunk, int max_length, int32_t* index);
// Bytes of the ragged index of `entries` sequences in chunks of `chunk` (aligned to the device).
size_t cudnn_ragged_index_bytes(int entries, int chunk);
// Bytes of one chunk's statistics: [chunk, hq, length] fp32, aligned to the device.
size_t cudnn_ragged_stats_bytes(int chunk, int hq, int length);
// What the scratch holds beyond cuDNN's workspace for packed calls of these shapes: the index of
// as many examples as run on cuDNN (batch·seq / kCudnnRaggedMinAverageLength) in chunks of one,
// and one sequence's statistics. Where the unpacked backward runs whole sequences, cuDNN's
// workspace of one sequence of seq tokens is there too, and any packed call fits in chunks of one
// (it falls back where that takes more than kCudnnRaggedMaxChunks); where it runs chunks of heads,
// packed calls run on cuDNN while one example's workspace, all heads, fits what a chunk reserves
// (llama2-7b at 8192: examples up to 4096 tokens), and fall back beyond.
size_t cudnn_ragged_reserve_bytes(int batch, int seq, int hq);

// Floats of attention_backward's scratch: delta[b, hq, t] for the module's kernel, and with
// `cudnn` the workspace of one call of cuDNN's backward over cudnn_attention_backward_chunk with
// the ragged reserve of packed rows, where larger. A chunk of heads reserves only its own
// workspace (llama2-7b at 8192: 1.07 GB, not the whole sequence's 4.3 GB).
size_t attention_backward_scratch_floats(int batch, int seq, int hq, int hkv, int head_dim,
                                         bool cudnn);
// Doubles (counted as floats, two each) of attention_key_bias_backward's cos/sin table and
// partials.
size_t attention_key_bias_scratch_floats(int batch, int seq, int hq, int hkv, int head_dim);
// Floats of bias_backward's partial sums for dy[n, out].
size_t bias_backward_scratch_floats(int n, int out);
// Doubles of sum_squares' partial sums.
size_t sum_squares_scratch_doubles();
// Bytes of lm_head_loss's scratch for `rows` tokens: fp32 logits [rows, v], then bf16 dlogits,
// each region aligned to kDeviceAlignment.
size_t lm_head_scratch_bytes(size_t rows, size_t v);

// The CUDA backend's workspace for calls up to `shapes`: [cuBLASLt][the largest op scratch], each
// part aligned to kDeviceAlignment (cuda-backend.h's layout).
size_t workspace_bytes(const compute::OpShapes& shapes);

}  // namespace spillway::cuda
