// Residual add and dtype conversion.
#include "compute/cpu/elementwise.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

static constexpr size_t kMinChunk = 16384;  // elements per task: amortises the dispatch

Status add_inplace(float* y, const float* x, size_t count) {
  ThreadPool::global().parallel_for(
      count,
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) y[i] += x[i];
      },
      kMinChunk);
  return Status::ok_status();
}

Status check_convert(const void* dst, DType dst_type, const void* src, DType src_type,
                     size_t count) {
  if (dst_type != src_type && !(dst_type == DType::kBF16 && src_type == DType::kF32) &&
      !(dst_type == DType::kF32 && src_type == DType::kBF16)) {
    return invalid_argument(std::string("convert: ") + dtype_name(src_type) + " -> " +
                            dtype_name(dst_type) +
                            " is not supported (F32 <-> BF16 and a type to itself are)");
  }
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  const bool overlap = d < s + count * dtype_size(src_type) && s < d + count * dtype_size(dst_type);
  if (count > 0 && overlap && !(d == s && dst_type == src_type)) {
    return invalid_argument(std::string("convert: ") + dtype_name(src_type) + " -> " +
                            dtype_name(dst_type) + " of " + std::to_string(count) +
                            " elements between overlapping ranges");
  }
  return Status::ok_status();
}

Status convert(void* dst, DType dst_type, const void* src, DType src_type, size_t count) {
  SPW_RETURN_IF_ERROR(check_convert(dst, dst_type, src, src_type, count));
  if (count == 0 || (dst == src && dst_type == src_type)) return Status::ok_status();
  const size_t in = dtype_size(src_type), out = dtype_size(dst_type);
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  ThreadPool::global().parallel_for(
      count,
      [&](size_t i0, size_t i1) {
        if (dst_type == src_type) {
          std::memcpy(d + i0 * out, s + i0 * in, (i1 - i0) * in);
        } else if (dst_type == DType::kBF16) {
          convert_from_f32(reinterpret_cast<const float*>(s) + i0, DType::kBF16, d + i0 * out,
                           i1 - i0);
        } else {
          convert_to_f32(s + i0 * in, DType::kBF16, reinterpret_cast<float*>(d) + i0, i1 - i0);
        }
      },
      kMinChunk);
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
