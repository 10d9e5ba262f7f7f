// The CUDA ops' scratch, in plain C++: how much of the workspace each CUDA op takes and the tile
// constants that decide it, shared by the kernels (engine/compute/cuda, which include this header)
// and by backend_facts (backend-facts.h), which must answer without the CUDA module.
//
// Each formula belongs to one launcher (named beside it) and changes with it: a launcher checks
// that the scratch it is given is at least what its formula here says. Thread-safety: pure
// functions. Nothing is owned.
#pragma once

#include <cstddef>

#include "compute/backend-facts.h"

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
// the sequences of one call in the workspace, O(seq²) per head: it runs a micro-batch in chunks of
// sequences whose workspace fits kCudnnAttentionBackwardBytes, one sequence at a time up to
// kCudnnAttentionSequenceBytes (llama2-7b at 8192: 4.3 GB, for twice the flash kernel's speed),
// and not at all beyond (the module's own kernel then runs it: 16K tokens would take 17 GB).
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
// Sequences per cuDNN attention backward call for a micro-batch of `batch`: the largest divisor of
// batch whose workspace (with kCudnnAttentionSlackBytes) fits kCudnnAttentionBackwardBytes, or 1
// up to kCudnnAttentionSequenceBytes; 0 beyond, or when cuDNN does not cover the heads.
int cudnn_attention_backward_chunk(int batch, int seq, int hq, int hkv, int head_dim);
// Floats of attention_backward's scratch: delta[b, hq, t] for the module's kernel, and with
// `cudnn` the workspace of cuDNN's backward over cudnn_attention_backward_chunk sequences where
// larger.
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
