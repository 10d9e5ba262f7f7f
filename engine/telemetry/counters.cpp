#include "telemetry/counters.h"

namespace spillway {

const char* category_name(Category c) {
  switch (c) {
    case Category::kWeights:
      return "weights";
    case Category::kGradients:
      return "gradients";
    case Category::kMaster:
      return "master";
    case Category::kOptimizer:
      return "optimizer";
    case Category::kCheckpoints:
      return "checkpoints";
    case Category::kWorkspace:
      return "workspace";
    case Category::kActivations:
      return "activations";
  }
  return "unknown";
}

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kHbm:
      return "hbm";
    case Tier::kDram:
      return "dram";
    case Tier::kSsd:
      return "ssd";
  }
  return "unknown";
}

const char* link_name(Link l) {
  switch (l) {
    case Link::kH2D:
      return "h2d";
    case Link::kD2H:
      return "d2h";
    case Link::kSsdRead:
      return "ssd_read";
    case Link::kSsdWrite:
      return "ssd_write";
  }
  return "unknown";
}

std::optional<Category> category_from_name(std::string_view name) {
  for (Category c : kAllCategories) {
    if (name == category_name(c)) return c;
  }
  return std::nullopt;
}

std::optional<Tier> tier_from_name(std::string_view name) {
  for (Tier t : kAllTiers) {
    if (name == tier_name(t)) return t;
  }
  return std::nullopt;
}

std::optional<Link> link_from_name(std::string_view name) {
  for (Link l : kAllLinks) {
    if (name == link_name(l)) return l;
  }
  return std::nullopt;
}

std::int64_t CounterSnapshot::tier_total(Tier t) const {
  std::int64_t sum = 0;
  for (std::int64_t v : held_bytes[static_cast<std::size_t>(t)]) sum += v;
  return sum;
}

std::array<std::uint64_t, kLinkCount> CounterSnapshot::moved_since(
    const CounterSnapshot& earlier) const {
  std::array<std::uint64_t, kLinkCount> out{};
  for (std::size_t i = 0; i < kLinkCount; ++i) {
    out[i] = moved_bytes[i] >= earlier.moved_bytes[i] ? moved_bytes[i] - earlier.moved_bytes[i] : 0;
  }
  return out;
}

CounterSnapshot TierCounters::snapshot() const {
  CounterSnapshot s;
  for (std::size_t t = 0; t < kTierCount; ++t) {
    for (std::size_t c = 0; c < kCategoryCount; ++c) {
      s.held_bytes[t][c] = held_[t][c].load(std::memory_order_relaxed);
    }
    s.capacity_bytes[t] = capacity_[t].load(std::memory_order_relaxed);
  }
  for (std::size_t l = 0; l < kLinkCount; ++l)
    s.moved_bytes[l] = moved_[l].load(std::memory_order_relaxed);
  return s;
}

void TierCounters::reset() {
  for (auto& row : held_) {
    for (auto& v : row) v.store(0, std::memory_order_relaxed);
  }
  for (auto& v : moved_) v.store(0, std::memory_order_relaxed);
  for (auto& v : capacity_) v.store(0, std::memory_order_relaxed);
}

}  // namespace spillway
