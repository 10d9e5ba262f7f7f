// RangeAllocator: first-fit placement of aligned byte ranges inside one fixed span [0, capacity).
//
// The bookkeeping behind the pinned host pool's slabs and the device arena: both own one big
// allocation and carve it into regions by offset, so neither ever asks the OS (or the CUDA driver)
// for memory per tensor. Free ranges are kept sorted by offset and merged with their neighbours on
// release, so carving and releasing a layer's worth of regions in any order leaves no fragments.
// Not thread-safe: the owning pool or arena holds its own lock. Plain value type (copyable).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace spillway {

class RangeAllocator {
 public:
  RangeAllocator() = default;
  // `alignment`: every returned offset and size is a multiple of it (power of two).
  RangeAllocator(uint64_t capacity, uint64_t alignment);

  // Offset of a free range of `bytes` rounded up to the alignment, or nullopt when no free range is
  // large enough. Zero bytes reserve one alignment unit so that every region has a distinct offset.
  std::optional<uint64_t> allocate(uint64_t bytes);
  // Returns the range that allocate() handed out at `offset`. False when `offset` is not a live
  // allocation (double free or foreign offset); nothing changes then.
  bool release(uint64_t offset);
  // Size (rounded) of the live allocation at `offset`, or 0 when none.
  uint64_t size_of(uint64_t offset) const;

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t free() const { return capacity_ - used_; }
  // The longest free run: the largest request that would succeed now.
  uint64_t largest_free() const;
  bool empty() const { return used_ == 0; }
  uint64_t rounded(uint64_t bytes) const;

 private:
  uint64_t capacity_ = 0, alignment_ = 1, used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, disjoint, never adjacent
  std::map<uint64_t, uint64_t> live_;  // offset -> size
};

}  // namespace spillway
