// HostPool: the DRAM tier. Pinned host memory in a few large slabs, carved into aligned regions by
// category (weights, master, optimizer state, gradients, checkpoints, workspace).
//
// Pinning is expensive per call and the driver tracks each pinned range, so the pool pins (through
// the allocator callback: cudaHostAlloc for the CUDA backend, aligned_alloc for the CPU backend) a
// slab at a time and places regions inside slabs; a region larger than a slab gets a slab of its
// own. Regions are 4096-byte aligned so they can be the source or target of O_DIRECT SSD I/O
// without a bounce buffer. Every region's bytes are counted in TierCounters (Tier::kDram) under
// its category while it lives; the pool refuses with kOutOfMemory once its slabs would exceed
// `dram_cap_bytes`.
//
// Thread-safety: allocate(), region release and the queries are safe from any thread (one mutex).
// Ownership: the pool owns the slabs; a HostRegion is a move-only handle that returns its range
// on destruction and must not outlive the pool. Empty slabs stay pinned until trim(), the pool's
// destruction, or a request that the cap would refuse otherwise, so that a step that frees and
// re-allocates does not re-pin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "telemetry/counters.h"
#include "tiers/range-allocator.h"

namespace spillway {

// How the pool gets and returns slab memory. `alloc(bytes)` must return memory aligned to at least
// 4096 bytes, or an error (kOutOfMemory with the allocator's reason); `free(ptr, bytes)` returns
// it.
struct HostAllocator {
  std::function<Result<void*>(size_t bytes)> alloc;
  std::function<void(void* ptr, size_t bytes)> free;
  std::string name;  // shown in messages: "aligned_alloc", "cudaHostAlloc"

  // Plain (unpinned) page-aligned host memory: the CPU backend's default.
  static HostAllocator aligned();
};

struct HostPoolConfig {
  size_t slab_bytes = size_t{256} << 20;  // pinned per allocator call
  size_t dram_cap_bytes = 0;              // most bytes the slabs may total; 0 = no cap
  size_t alignment = 4096;                // every region's offset and size (power of two)
};

class HostPool;

// A region of pool memory: `size()` usable bytes at `data()`, `alignment`-aligned. Move-only;
// destruction (or reset()) gives the range back to the pool and uncounts it.
class HostRegion {
 public:
  HostRegion() = default;
  ~HostRegion() { reset(); }
  HostRegion(const HostRegion&) = delete;
  HostRegion& operator=(const HostRegion&) = delete;
  HostRegion(HostRegion&& o) noexcept { *this = std::move(o); }
  HostRegion& operator=(HostRegion&& o) noexcept;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }
  Category category() const { return category_; }
  bool empty() const { return pool_ == nullptr; }
  void reset();

 private:
  friend class HostPool;
  HostPool* pool_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t slab_ = 0;
  uint64_t offset_ = 0;
  Category category_ = Category::kWorkspace;
};

class HostPool {
 public:
  // `counters` may be null (no accounting); it must outlive the pool.
  explicit HostPool(HostPoolConfig config = {}, HostAllocator allocator = HostAllocator::aligned(),
                    TierCounters* counters = nullptr);
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // A region of at least `bytes` (the counted size is rounded up to the alignment) for `category`;
  // `what` names it in errors ("layer 3 master"). kOutOfMemory when the cap (or the allocator)
  // refuses, naming the request, the bytes the pool holds and uses, and the cap.
  Result<HostRegion> allocate(size_t bytes, Category category, std::string_view what = {});

  // Frees slabs that hold no region; returns the bytes given back to the allocator.
  size_t trim();

  size_t slab_bytes_total() const;  // bytes obtained from the allocator
  size_t used_bytes() const;        // bytes in live regions (rounded)
  size_t used_bytes(Category c) const;
  size_t slab_count() const;
  const HostPoolConfig& config() const { return config_; }

 private:
  friend class HostRegion;
  struct Slab {
    void* base = nullptr;
    size_t bytes = 0;
    RangeAllocator ranges;
  };
  void release(HostRegion& region);
  std::string usage_locked() const;
  size_t trim_locked();

  HostPoolConfig config_;
  HostAllocator allocator_;
  TierCounters* counters_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Slab>>
      slabs_;  // null entries are trimmed slabs (indices stay stable)
  size_t slab_total_ = 0, used_ = 0;
  size_t used_by_category_[kCategoryCount] = {};
};

}  // namespace spillway
