#include "tiers/range-allocator.h"

#include <algorithm>

#include "tiers/byte-size.h"

namespace spillway {

RangeAllocator::RangeAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity / alignment * alignment), alignment_(alignment) {
  if (capacity_ > 0) free_[0] = capacity_;
}

uint64_t RangeAllocator::rounded(uint64_t bytes) const {
  return round_up(std::max<uint64_t>(bytes, 1), alignment_);
}

std::optional<uint64_t> RangeAllocator::allocate(uint64_t bytes) {
  const uint64_t need = rounded(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t offset = it->first, left = it->second - need;
    free_.erase(it);
    if (left > 0) free_[offset + need] = left;
    live_[offset] = need;
    used_ += need;
    return offset;
  }
  return std::nullopt;
}

bool RangeAllocator::release(uint64_t offset) {
  auto live = live_.find(offset);
  if (live == live_.end()) return false;
  uint64_t start = offset, size = live->second;
  live_.erase(live);
  used_ -= size;
  // Merge with the free neighbour after, then the one before.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += size;
      return true;
    }
  }
  free_[start] = size;
  return true;
}

uint64_t RangeAllocator::size_of(uint64_t offset) const {
  auto it = live_.find(offset);
  return it == live_.end() ? 0 : it->second;
}

uint64_t RangeAllocator::largest_free() const {
  uint64_t best = 0;
  for (const auto& [off, size] : free_) best = std::max(best, size);
  return best;
}

}  // namespace spillway
