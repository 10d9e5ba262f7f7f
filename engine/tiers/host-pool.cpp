#include "tiers/host-pool.h"

#include <algorithm>
#include <cstdlib>

#include "core/log.h"
#include "tiers/byte-size.h"

namespace spillway {

HostAllocator HostAllocator::aligned() {
  HostAllocator a;
  a.name = "aligned_alloc";
  a.alloc = [](size_t bytes) -> Result<void*> {
    void* p = std::aligned_alloc(4096, round_up(bytes, 4096));
    if (!p) return out_of_memory("aligned_alloc refused " + format_bytes(bytes));
    return p;
  };
  a.free = [](void* p, size_t) { std::free(p); };
  return a;
}

HostRegion& HostRegion::operator=(HostRegion&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = std::exchange(o.pool_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    slab_ = o.slab_;
    offset_ = o.offset_;
    category_ = o.category_;
  }
  return *this;
}

void HostRegion::reset() {
  if (pool_) pool_->release(*this);
  pool_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

HostPool::HostPool(HostPoolConfig config, HostAllocator allocator, TierCounters* counters)
    : config_(config), allocator_(std::move(allocator)), counters_(counters) {
  if (config_.alignment == 0 || (config_.alignment & (config_.alignment - 1)) != 0)
    config_.alignment = 4096;
  config_.slab_bytes =
      round_up(std::max<size_t>(config_.slab_bytes, config_.alignment), config_.alignment);
  if (counters_ && config_.dram_cap_bytes > 0)
    counters_->set_capacity(Tier::kDram, config_.dram_cap_bytes);
}

HostPool::~HostPool() {
  if (used_ > 0) {
    log_warn("host pool destroyed with " + format_bytes(used_) +
             " still in regions (a region outlived its pool)");
  }
  for (auto& s : slabs_) {
    if (s) allocator_.free(s->base, s->bytes);
  }
}

std::string HostPool::usage_locked() const {
  size_t live_slabs = 0, largest = 0;
  for (const auto& s : slabs_) {
    if (!s) continue;
    ++live_slabs;
    largest = std::max<size_t>(largest, s->ranges.largest_free());
  }
  std::string m = "the pool holds " + format_bytes(slab_total_) + " in " +
                  std::to_string(live_slabs) + " slab(s), " + format_bytes(used_) +
                  " in use (largest free run " + format_bytes(largest) + ")";
  std::string by;
  for (Category c : kAllCategories) {
    size_t b = used_by_category_[static_cast<size_t>(c)];
    if (b == 0) continue;
    by += (by.empty() ? "" : ", ") + std::string(category_name(c)) + " " + format_bytes(b);
  }
  if (!by.empty()) m += " [" + by + "]";
  return m;
}

Result<HostRegion> HostPool::allocate(size_t bytes, Category category, std::string_view what) {
  std::lock_guard lock(mutex_);
  const size_t need = round_up(std::max<size_t>(bytes, 1), config_.alignment);
  const std::string label =
      std::string(category_name(category)) + (what.empty() ? "" : " '" + std::string(what) + "'");

  size_t slab_index = slabs_.size();
  std::optional<uint64_t> offset;
  for (size_t i = 0; i < slabs_.size() && !offset; ++i) {
    if (slabs_[i] && (offset = slabs_[i]->ranges.allocate(need))) slab_index = i;
  }
  if (!offset) {
    // A new slab: the standard size, or just enough when that is what the cap still allows, or the
    // request's own size when it is larger than a slab.
    size_t slab = std::max(config_.slab_bytes, need);
    const size_t cap = config_.dram_cap_bytes;
    if (cap > 0 && slab_total_ + need > cap)
      trim_locked();  // empty slabs too small for this request
    if (cap > 0 && slab_total_ + slab > cap) slab = need;
    if (cap > 0 && slab_total_ + slab > cap) {
      return out_of_memory("host pool: cannot allocate " + format_bytes(need) + " for " + label +
                           ": " + usage_locked() + ", and the DRAM cap (dram_cap_bytes) is " +
                           format_bytes(cap) + "; raise the cap, lower the batch size, or place " +
                           category_name(category) + " on the SSD tier");
    }
    Result<void*> mem = allocator_.alloc(slab);
    if (!mem.ok()) {
      return Status(mem.status().code(), "host pool: " + allocator_.name + " could not provide a " +
                                             format_bytes(slab) + " slab for " + label + " (" +
                                             mem.status().message() + "); " + usage_locked());
    }
    auto s = std::make_unique<Slab>();
    s->base = *mem;
    s->bytes = slab;
    s->ranges = RangeAllocator(slab, config_.alignment);
    offset = s->ranges.allocate(need);
    slab_total_ += slab;
    // Reuse a trimmed index so the vector does not grow without bound.
    auto hole = std::find(slabs_.begin(), slabs_.end(), nullptr);
    slab_index = static_cast<size_t>(hole - slabs_.begin());
    if (hole == slabs_.end()) {
      slabs_.push_back(std::move(s));
    } else {
      *hole = std::move(s);
    }
  }

  HostRegion r;
  r.pool_ = this;
  r.slab_ = slab_index;
  r.offset_ = *offset;
  r.data_ = static_cast<char*>(slabs_[slab_index]->base) + *offset;
  r.size_ = need;
  r.category_ = category;
  used_ += need;
  used_by_category_[static_cast<size_t>(category)] += need;
  if (counters_) counters_->add(Tier::kDram, category, static_cast<int64_t>(need));
  return r;
}

void HostPool::release(HostRegion& region) {
  std::lock_guard lock(mutex_);
  Slab* s = region.slab_ < slabs_.size() ? slabs_[region.slab_].get() : nullptr;
  if (!s || !s->ranges.release(region.offset_)) {
    log_error("host pool: release of a region the pool does not hold (double release?)");
    return;
  }
  used_ -= region.size_;
  used_by_category_[static_cast<size_t>(region.category_)] -= region.size_;
  if (counters_) counters_->sub(Tier::kDram, region.category_, static_cast<int64_t>(region.size_));
}

size_t HostPool::trim() {
  std::lock_guard lock(mutex_);
  return trim_locked();
}

size_t HostPool::trim_locked() {
  size_t freed = 0;
  for (auto& s : slabs_) {
    if (s && s->ranges.empty()) {
      allocator_.free(s->base, s->bytes);
      freed += s->bytes;
      s.reset();
    }
  }
  slab_total_ -= freed;
  return freed;
}

size_t HostPool::slab_bytes_total() const {
  std::lock_guard lock(mutex_);
  return slab_total_;
}
size_t HostPool::used_bytes() const {
  std::lock_guard lock(mutex_);
  return used_;
}
size_t HostPool::used_bytes(Category c) const {
  std::lock_guard lock(mutex_);
  return used_by_category_[static_cast<size_t>(c)];
}
size_t HostPool::slab_count() const {
  std::lock_guard lock(mutex_);
  return static_cast<size_t>(
      std::count_if(slabs_.begin(), slabs_.end(), [](const auto& s) { return s != nullptr; }));
}

}  // namespace spillway
