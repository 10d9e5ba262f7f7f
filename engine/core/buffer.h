// AlignedBuffer: an owned, aligned, zero-initialised host allocation (RAII, move-only).
//
// The unit behind host tensors, staging buffers for O_DIRECT I/O (4096-byte alignment) and SIMD
// loops (64-byte alignment). The CUDA backend's pinned and device buffers follow the same shape
// (engine/compute/cuda). Not thread-safe by itself; the owner decides who writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "core/status.h"

namespace spillway {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  // Allocates `bytes` (rounded up to `alignment`), zero-filled. kOutOfMemory when the host refuses.
  static Result<AlignedBuffer> allocate(size_t bytes, size_t alignment = 64);

  void* data() { return data_; }
  const void* data() const { return data_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace spillway
