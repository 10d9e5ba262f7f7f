// Tensor references: what the ops of compute::Backend take (backend.h). A reference carries a
// pointer to device memory, its element type and its shape (up to 4 dims, row-major, contiguous),
// so an op can check what it receives: a swapped argument or a wrong dtype becomes a
// kInvalidArgument naming the op and the argument instead of wrong numbers (ggml's asserts on
// src0->type and ne[], STYLE.md 14).
//
// ConstTensor is a read-only view, Tensor a writable one (it converts to ConstTensor). A
// default-constructed reference is absent (null data): what an op's optional argument takes
// (a linear without bias, lm_head_loss without logits). References do not own their memory and
// are cheap to copy; they are values, not thread-shared objects.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/dtype.h"

namespace spillway::compute {

inline constexpr int kMaxTensorRank = 4;

// Dims of a row-major tensor, outermost first: [tokens, hidden], [batch, seq, heads, head_dim].
struct Shape {
  int rank = 0;
  std::array<int64_t, kMaxTensorRank> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);  // at most kMaxTensorRank dims (more are dropped)
  // Dim i, or 0 past the rank.
  int64_t dim(int i) const { return i >= 0 && i < rank ? dims[i] : 0; }
  // Product of the dims; 0 for rank 0.
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  // "[2, 16, 4, 8]"
  std::string to_string() const;
};

// A reference to `Data` (void: writable, const void: read-only); Tensor and ConstTensor below.
template <class Data>
class TensorRef {
 public:
  TensorRef() = default;
  TensorRef(Data* data, DType dtype, Shape shape) : data_(data), dtype_(dtype), shape_(shape) {}

  Data* data() const { return data_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank; }
  int64_t dim(int i) const { return shape_.dim(i); }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  // Absent: no data (an optional argument not given).
  bool absent() const { return data_ == nullptr; }
  // The data as T (const T for a read-only reference).
  template <class T>
  auto* as() const {
    using Element = std::conditional_t<std::is_const_v<Data>, const T, T>;
    return static_cast<Element*>(data_);
  }
  // A writable reference reads as a read-only one (implicitly: a view reads as const). A
  // constructor of the read-only side rather than a conversion of the writable one, whose
  // instantiation for TensorRef<const void> would convert to itself (nvcc and clang warn).
  template <class D>
  requires(std::is_const_v<Data> && !std::is_const_v<D>) TensorRef(const TensorRef<D>& w)  // NOLINT
      : data_(w.data()), dtype_(w.dtype()), shape_(w.shape()) {}

 private:
  Data* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
};

using ConstTensor = TensorRef<const void>;
using Tensor = TensorRef<void>;

// Shorthands for the dtypes whose C++ type says it: f32(ptr, {n, d}), i32(ids, {n}).
inline Tensor f32(float* p, Shape s) {
  return Tensor(p, DType::kF32, s);
}
inline ConstTensor f32(const float* p, Shape s) {
  return ConstTensor(p, DType::kF32, s);
}
inline Tensor i32(int32_t* p, Shape s) {
  return Tensor(p, DType::kI32, s);
}
inline ConstTensor i32(const int32_t* p, Shape s) {
  return ConstTensor(p, DType::kI32, s);
}

}  // namespace spillway::compute
