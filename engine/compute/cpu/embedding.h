// Token embedding lookup and its gradient scatter on float32 host tensors (torch.nn.Embedding).
//
//   forward:  out[i, :] = table[ids[i], :] · scale
//   backward: dtable[ids[i], :] += dout[i, :] · scale   (repeated ids sum)
// scale is 1 but for Gemma's scaled word embedding (sqrt(hidden)); the products are rounded to
// float32 as torch's `embedding(ids) * scale` and its gradient are.
// The Backend interface does not pass the vocabulary size; `rows` is the number of table rows
// when the caller knows it (the CPU backend derives it from the table's device allocation) and
// bounds the ids, otherwise only negative ids are refused. Pure functions; parallel over rows
// (forward) and column blocks (backward, so repeated ids never race).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace spillway::compute::cpu {

inline constexpr size_t kUnknownRows = static_cast<size_t>(-1);

// kInvalidArgument (naming `what`) for n < 0 or d <= 0.
Status check_embedding_shape(const char* what, int n, int d);

// out [n, d]; ids [n]; table [rows, d]. kInvalidArgument for a bad shape or an id outside
// [0, rows).
Status embedding_forward(float* out, const int32_t* ids, const float* table, int n, int d,
                         size_t rows = kUnknownRows, float scale = 1.0f);
// dtable [rows, d] accumulates; dout [n, d].
Status embedding_backward(float* dtable, const int32_t* ids, const float* dout, int n, int d,
                          size_t rows = kUnknownRows, float scale = 1.0f);

}  // namespace spillway::compute::cpu
