// Scratch: carves an op's temporary buffers out of the backend's workspace (internal to cpu/).
//
// Each op that needs scratch lays its buffers out with one function over a Scratch: over a null
// base the same calls only count the bytes (the op's *_scratch_bytes, which sizes the workspace),
// over the workspace they hand out the pointers. Sizing and use therefore cannot disagree. Every
// buffer starts on a 64-byte boundary (a cache line: per-thread buffers never share one).
// Per-thread buffers are indexed by part, one part per ThreadPool::global() thread (scratch_parts
// and split_parts below), so the workspace bound does not depend on how work is scheduled.
#pragma once

#include <algorithm>
#include <cstddef>

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

class Scratch {
 public:
  explicit Scratch(void* base = nullptr) : base_(static_cast<char*>(base)) {}

  // `count` elements of T, or null while counting.
  template <typename T>
  T* take(size_t count) {
    used_ = (used_ + kAlign - 1) / kAlign * kAlign;
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += count * sizeof(T);
    return p;
  }
  // scratch_parts() slots of `part_bytes` each, one per thread: slot p starts at base + p·stride.
  struct Parts {
    char* base;
    size_t stride;
    void* operator[](size_t p) const { return base + p * stride; }
  };
  Parts take_parts(size_t part_bytes);

  size_t bytes() const { return used_; }

 private:
  static constexpr size_t kAlign = 64;
  char* base_;
  size_t used_ = 0;
};

// Per-thread scratch slots an op lays out: the size of the global pool.
inline size_t scratch_parts() {
  return ThreadPool::global().size();
}

inline Scratch::Parts Scratch::take_parts(size_t part_bytes) {
  const size_t stride = (part_bytes + kAlign - 1) / kAlign * kAlign;
  return Parts{take<char>(stride * scratch_parts()), stride};
}

// ThreadPool::parallel_for's split of `items` into contiguous ranges of at least `min_chunk`
// items, made explicit: fn(part, begin, end) runs once per part, concurrently, and part indexes
// the op's per-thread scratch (< scratch_parts()).
template <typename Fn>
void split_parts(size_t items, size_t min_chunk, const Fn& fn) {
  if (items == 0) return;
  const size_t parts =
      std::min(scratch_parts(), std::max<size_t>(1, items / std::max<size_t>(1, min_chunk)));
  ThreadPool::global().parallel_for(
      parts,
      [&](size_t p0, size_t p1) {
        for (size_t p = p0; p < p1; ++p) fn(p, items * p / parts, items * (p + 1) / parts);
      },
      1);
}

}  // namespace spillway::compute::cpu
