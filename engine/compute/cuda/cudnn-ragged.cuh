// The device side of packed rows on cuDNN (cudnn-attention.h): the ragged index cuDNN reads, built
// from the positions on the GPU (the host never waits for them), and the statistics moved between
// cuDNN's per-sequence layout and attention_forward's lse.
//
// The index, in chunks of `chunk` sequences (cuda-workspace.h: cudnn_ragged_chunk_index_ints):
// chunk c holds four int32 arrays of P = ints/4 entries each, at index + c·4P:
//   lengths[chunk]      tokens of each sequence (0 past the last example);
//   q_offsets[chunk+1]  each sequence's first element in q/out/dout/dq: first token · hq · d;
//   kv_offsets[chunk+1] the same in k/v/dk/dv: first token · hkv · d;
//   first[chunk]        each sequence's first token in the flat [batch·seq] array.
// Sequences past the call's examples are empty, at the end of the tokens. cuda-workspace.h's
// cudnn_ragged_slot and cudnn_ragged_fill place and fill the entries, for the host's reference
// (cudnn_ragged_index_host) as for the kernel.
#pragma once

#include <cstdint>

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// The examples of `positions` [batch, seq] (a token with position 0, or a row's first, starts one)
// as `entries` sequences of at most `max_length` tokens in chunks of `chunk`, written to `index`.
// A call whose positions break those bounds sets violation[0] to its number of examples or
// violation[1] to its longest (device-visible memory, may be null): the caller's bounds were wrong,
// and the sequences past them are left out.
Status ragged_index(const int32_t* positions, int batch, int seq, int hq, int hkv, int head_dim,
                    int entries, int chunk, int max_length, int32_t* index, int* violation,
                    cudaStream_t stream);

// stats [chunk, hq, length] (cuDNN's, fp32) of the chunk whose index starts at `chunk_index`
// scattered into lse [batch, hq, seq] at each sequence's tokens.
Status ragged_stats_scatter(float* lse, const float* stats, const int32_t* chunk_index, int chunk,
                            int hq, int length, int seq, cudaStream_t stream);
// The reverse: lse gathered into stats, zero past each sequence's end.
Status ragged_stats_gather(float* stats, const float* lse, const int32_t* chunk_index, int chunk,
                           int hq, int length, int seq, cudaStream_t stream);

}  // namespace spillway::cuda
