// Elementwise helpers on host tensors: the residual add and dtype conversion. Pure functions;
// parallel with ThreadPool::global() for long vectors.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "core/status.h"

namespace spillway::compute::cpu {

// y[i] += x[i] for i < count.
Status add_inplace(float* y, const float* x, size_t count);

// kInvalidArgument unless (dst_type, src_type) is F32 → BF16, BF16 → F32 or a type to itself,
// and the two ranges of `count` elements are disjoint or the same range of the same type.
Status check_convert(const void* dst, DType dst_type, const void* src, DType src_type,
                     size_t count);

// dst[i] = (dst_type) src[i] for i < count: F32 → BF16 rounds to nearest even (core/dtype.h,
// torch's .to(torch.bfloat16)), BF16 → F32 is exact, a type to itself copies (nothing to do in
// place). kInvalidArgument as check_convert.
Status convert(void* dst, DType dst_type, const void* src, DType src_type, size_t count);

}  // namespace spillway::compute::cpu
