#include "tiers/device-arena.h"

#include <algorithm>
#include <cstdlib>

#include "core/log.h"
#include "tiers/byte-size.h"

namespace spillway {

DeviceAllocator DeviceAllocator::host_memory() {
  DeviceAllocator a;
  a.name = "host memory (CPU backend)";
  a.alloc = [](size_t bytes) -> Result<void*> {
    void* p = std::aligned_alloc(4096, round_up(std::max<size_t>(bytes, 1), 4096));
    if (!p) return out_of_memory("aligned_alloc refused " + format_bytes(bytes));
    return p;
  };
  a.free = [](void* p) { std::free(p); };
  return a;
}

Result<std::unique_ptr<DeviceArena>> DeviceArena::create(size_t capacity_bytes,
                                                         DeviceAllocator allocator,
                                                         TierCounters* counters, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return invalid_argument("device arena: alignment " + std::to_string(alignment) +
                            " is not a power of two");
  }
  if (capacity_bytes < alignment) {
    return invalid_argument("device arena: capacity " + format_bytes(capacity_bytes) +
                            " is below one alignment unit");
  }
  Result<void*> mem = allocator.alloc(capacity_bytes);
  if (!mem.ok()) {
    return Status(mem.status().code(), "device arena: " + allocator.name + " could not provide " +
                                           format_bytes(capacity_bytes) + " (" +
                                           mem.status().message() +
                                           "); lower the device memory budget");
  }
  if (counters) counters->set_capacity(Tier::kHbm, capacity_bytes);
  return std::unique_ptr<DeviceArena>(
      new DeviceArena(*mem, capacity_bytes, alignment, std::move(allocator), counters));
}

DeviceArena::DeviceArena(void* base, size_t capacity, size_t alignment, DeviceAllocator allocator,
                         TierCounters* counters)
    : base_(base),
      capacity_(capacity),
      allocator_(std::move(allocator)),
      counters_(counters),
      ranges_(capacity, alignment) {}

DeviceArena::~DeviceArena() {
  if (counters_) {
    for (const auto& [name, s] : slots_)
      counters_->sub(Tier::kHbm, s.category, static_cast<int64_t>(s.bytes));
  }
  allocator_.free(base_);
}

std::string DeviceArena::usage_locked() const {
  uint64_t by_cat[kCategoryCount] = {};
  size_t n_cat[kCategoryCount] = {};
  for (const auto& [name, s] : slots_) {
    by_cat[static_cast<size_t>(s.category)] += s.bytes;
    ++n_cat[static_cast<size_t>(s.category)];
  }
  std::string held;
  for (Category c : kAllCategories) {
    const size_t i = static_cast<size_t>(c);
    if (n_cat[i] == 0) continue;
    held += (held.empty() ? "" : ", ") + std::string(category_name(c)) + " " +
            format_bytes(by_cat[i]) + " in " + std::to_string(n_cat[i]) + " slot(s)";
  }
  return format_bytes(ranges_.free()) + " free of " + format_bytes(capacity_) +
         " capacity (largest free run " + format_bytes(ranges_.largest_free()) +
         "); held: " + (held.empty() ? "nothing" : held);
}

Result<void*> DeviceArena::reserve(const std::string& name, size_t bytes, Category category) {
  std::lock_guard lock(mutex_);
  if (slots_.count(name)) {
    return invalid_argument("device arena: slot '" + name + "' is already reserved");
  }
  std::optional<uint64_t> offset = ranges_.allocate(bytes);
  if (!offset) {
    return out_of_memory(
        "device arena: cannot reserve slot '" + name + "' (" + category_name(category) + ", " +
        format_bytes(ranges_.rounded(bytes)) + "): " + usage_locked() +
        "; use fewer weight slots, a shorter sequence or micro-batch, or a larger device budget");
  }
  DeviceSlot s{name, category, *offset, ranges_.size_of(*offset)};
  slots_.emplace(name, s);
  if (counters_) counters_->add(Tier::kHbm, category, static_cast<int64_t>(s.bytes));
  return static_cast<void*>(static_cast<char*>(base_) + *offset);
}

Status DeviceArena::release(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = slots_.find(name);
  if (it == slots_.end()) return not_found("device arena: no slot named '" + name + "' to release");
  ranges_.release(it->second.offset);
  if (counters_)
    counters_->sub(Tier::kHbm, it->second.category, static_cast<int64_t>(it->second.bytes));
  slots_.erase(it);
  return Status();
}

void* DeviceArena::find(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = slots_.find(name);
  return it == slots_.end() ? nullptr : static_cast<char*>(base_) + it->second.offset;
}

std::vector<DeviceSlot> DeviceArena::slots() const {
  std::lock_guard lock(mutex_);
  std::vector<DeviceSlot> out;
  for (const auto& [name, s] : slots_) out.push_back(s);
  std::sort(out.begin(), out.end(),
            [](const DeviceSlot& a, const DeviceSlot& b) { return a.offset < b.offset; });
  return out;
}

size_t DeviceArena::used_bytes() const {
  std::lock_guard lock(mutex_);
  return ranges_.used();
}
size_t DeviceArena::used_bytes(Category c) const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [name, s] : slots_) n += s.category == c ? s.bytes : 0;
  return n;
}
size_t DeviceArena::free_bytes() const {
  std::lock_guard lock(mutex_);
  return ranges_.free();
}
size_t DeviceArena::largest_free_bytes() const {
  std::lock_guard lock(mutex_);
  return ranges_.largest_free();
}

}  // namespace spillway
