// TierCounters: the engine's own byte accounting, by memory tier, data category and link.
//
// Every tier (device arena, pinned host pool, SSD store) reports here how many bytes of each
// category it currently holds (add/sub/set), and every copy reports the bytes it moved over a link
// (add_moved). The telemetry sampler reads snapshot() about 10 times a second and turns the deltas
// of the cumulative link counters into GB/s.
//
// Thread-safety: every method is safe from any thread at any time; counters are relaxed atomics, so
// a snapshot is a set of individually exact values taken at slightly different instants (fine for
// telemetry, not for invariants). Ownership: the counters are plain memory owned by whoever creates
// them (usually the trainer, shared by reference with the tiers and the sampler); they must outlive
// every user. Not copyable or movable (atomics are handed out by reference).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace spillway {

// What the bytes are. Names are the JSON keys used in events ("weights" -> "weights_bytes").
// kActivations: the layers' activations kept from the forward for the backward
// (StreamingConfig::saved_activation_layers); kCheckpoints: the layers' inputs.
enum class Category {
  kWeights,
  kGradients,
  kMaster,
  kOptimizer,
  kCheckpoints,
  kWorkspace,
  kActivations
};
inline constexpr std::size_t kCategoryCount = 7;

// Where the bytes live.
enum class Tier { kHbm, kDram, kSsd };
inline constexpr std::size_t kTierCount = 3;

// Which way they moved: host->device, device->host, SSD->host, host->SSD.
enum class Link { kH2D, kD2H, kSsdRead, kSsdWrite };
inline constexpr std::size_t kLinkCount = 4;

// "weights", "gradients", "master", "optimizer", "checkpoints", "workspace", "activations".
const char* category_name(Category c);
// "hbm", "dram", "ssd".
const char* tier_name(Tier t);
// "h2d", "d2h", "ssd_read", "ssd_write".
const char* link_name(Link l);
// Inverse of the *_name functions; std::nullopt for an unknown name.
std::optional<Category> category_from_name(std::string_view name);
std::optional<Tier> tier_from_name(std::string_view name);
std::optional<Link> link_from_name(std::string_view name);

inline constexpr std::array<Category, kCategoryCount> kAllCategories = {
    Category::kWeights,     Category::kGradients, Category::kMaster,     Category::kOptimizer,
    Category::kCheckpoints, Category::kWorkspace, Category::kActivations};
inline constexpr std::array<Tier, kTierCount> kAllTiers = {Tier::kHbm, Tier::kDram, Tier::kSsd};
inline constexpr std::array<Link, kLinkCount> kAllLinks = {Link::kH2D, Link::kD2H, Link::kSsdRead,
                                                           Link::kSsdWrite};

// A plain copy of TierCounters at one moment. Held bytes are signed so that an unbalanced sub()
// (a bug in a tier) shows up as a negative figure instead of wrapping to 2^64.
struct CounterSnapshot {
  std::array<std::array<std::int64_t, kCategoryCount>, kTierCount>
      held_bytes{};  // [tier][category]
  std::array<std::uint64_t, kLinkCount>
      moved_bytes{};  // [link], cumulative since construction/reset
  // Declared tier capacities (bytes), 0 = not declared (e.g. no GPU).
  std::array<std::uint64_t, kTierCount> capacity_bytes{};

  std::int64_t held(Tier t, Category c) const {
    return held_bytes[static_cast<std::size_t>(t)][static_cast<std::size_t>(c)];
  }
  // Sum over categories of one tier.
  std::int64_t tier_total(Tier t) const;
  std::uint64_t moved(Link l) const { return moved_bytes[static_cast<std::size_t>(l)]; }
  std::uint64_t capacity(Tier t) const { return capacity_bytes[static_cast<std::size_t>(t)]; }
  // Bytes moved per link between `earlier` and this snapshot (clamped at 0 if the counters were
  // reset).
  std::array<std::uint64_t, kLinkCount> moved_since(const CounterSnapshot& earlier) const;
};

class TierCounters {
 public:
  TierCounters() = default;
  TierCounters(const TierCounters&) = delete;
  TierCounters& operator=(const TierCounters&) = delete;

  // Bytes held in (tier, category): allocation adds, release subtracts, set overwrites.
  void add(Tier t, Category c, std::int64_t bytes) {
    cell(t, c).fetch_add(bytes, std::memory_order_relaxed);
  }
  void sub(Tier t, Category c, std::int64_t bytes) {
    cell(t, c).fetch_sub(bytes, std::memory_order_relaxed);
  }
  void set(Tier t, Category c, std::int64_t bytes) {
    cell(t, c).store(bytes, std::memory_order_relaxed);
  }
  std::int64_t held(Tier t, Category c) const { return cell(t, c).load(std::memory_order_relaxed); }

  // Cumulative bytes moved over a link; call once per completed copy/read/write.
  void add_moved(Link l, std::uint64_t bytes) {
    moved_[static_cast<std::size_t>(l)].fetch_add(bytes, std::memory_order_relaxed);
  }
  std::uint64_t moved(Link l) const {
    return moved_[static_cast<std::size_t>(l)].load(std::memory_order_relaxed);
  }

  // Capacity of a tier in bytes (device arena size, pinned pool size, SSD budget); 0 = unknown.
  void set_capacity(Tier t, std::uint64_t bytes) {
    capacity_[static_cast<std::size_t>(t)].store(bytes, std::memory_order_relaxed);
  }
  std::uint64_t capacity(Tier t) const {
    return capacity_[static_cast<std::size_t>(t)].load(std::memory_order_relaxed);
  }

  CounterSnapshot snapshot() const;
  // Zeroes every counter (tests, or a fresh run in the same process).
  void reset();

 private:
  std::atomic<std::int64_t>& cell(Tier t, Category c) {
    return held_[static_cast<std::size_t>(t)][static_cast<std::size_t>(c)];
  }
  const std::atomic<std::int64_t>& cell(Tier t, Category c) const {
    return held_[static_cast<std::size_t>(t)][static_cast<std::size_t>(c)];
  }

  std::array<std::array<std::atomic<std::int64_t>, kCategoryCount>, kTierCount> held_{};
  std::array<std::atomic<std::uint64_t>, kLinkCount> moved_{};
  std::array<std::atomic<std::uint64_t>, kTierCount> capacity_{};
};

}  // namespace spillway
