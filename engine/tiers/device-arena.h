// DeviceArena: the HBM tier. One fixed device allocation, made once through the backend's
// device_alloc, carved into named slots: K weight slots of a layer block's size, gradient buffers,
// activation workspace, checkpoints that fit.
//
// The streaming trainer's GPU footprint is fixed by design (docs/architecture.md, "The step"), so
// it is reserved up front: a job that does not fit fails at reserve() with a message naming the
// slot and the capacity, before any step runs, and nothing in the hot loop calls cudaMalloc. Each
// live slot's bytes are counted in TierCounters (Tier::kHbm) under its category.
//
// Thread-safety: every method is safe from any thread (one mutex). Ownership: the arena owns the
// allocation and frees it through the callback on destruction; slot pointers are borrowed views
// valid until release(name) or the arena's destruction. Not copyable or movable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "telemetry/counters.h"
#include "tiers/range-allocator.h"

namespace spillway {

// The backend's device memory calls. `alloc(bytes)` returns memory aligned to at least 256 bytes
// or an error; `free(ptr)` returns it.
struct DeviceAllocator {
  std::function<Result<void*>(size_t bytes)> alloc;
  std::function<void(void* ptr)> free;
  std::string name;  // "cudaMalloc", "host memory (CPU backend)"

  // Host memory standing in for HBM: the CPU backend's capacity-limited "device".
  static DeviceAllocator host_memory();
};

struct DeviceSlot {
  std::string name;
  Category category;
  uint64_t offset;  // bytes from the arena base
  uint64_t bytes;   // reserved (rounded up to the alignment)
};

class DeviceArena {
 public:
  // Makes the one allocation of `capacity_bytes`. kOutOfMemory (with the allocator's reason) when
  // the device refuses. `alignment`: slot offsets and sizes, power of two (256 suits cuBLAS and
  // vectorised kernels). `counters` may be null; it must outlive the arena.
  static Result<std::unique_ptr<DeviceArena>> create(size_t capacity_bytes,
                                                     DeviceAllocator allocator,
                                                     TierCounters* counters = nullptr,
                                                     size_t alignment = 256);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A slot of `bytes` named `name` (unique while live) for `category`: the device pointer.
  // kOutOfMemory names the slot, its size, the free bytes, the largest free run, the capacity and
  // what the arena holds by category; kInvalidArgument when `name` is already reserved.
  Result<void*> reserve(const std::string& name, size_t bytes, Category category);
  // Gives a slot back. kNotFound when no slot has that name.
  Status release(const std::string& name);
  // The slot's pointer, or nullptr when no slot has that name.
  void* find(const std::string& name) const;

  std::vector<DeviceSlot> slots() const;  // sorted by offset
  void* base() const { return base_; }
  size_t capacity_bytes() const { return capacity_; }
  size_t used_bytes() const;
  size_t used_bytes(Category c) const;
  size_t free_bytes() const;
  size_t largest_free_bytes() const;

 private:
  DeviceArena(void* base, size_t capacity, size_t alignment, DeviceAllocator allocator,
              TierCounters* counters);
  std::string usage_locked() const;

  void* base_;
  size_t capacity_;
  DeviceAllocator allocator_;
  TierCounters* counters_;
  mutable std::mutex mutex_;
  RangeAllocator ranges_;
  std::map<std::string, DeviceSlot> slots_;
};

}  // namespace spillway
