// DataCursor: where a training run is in its data stream, so that a resumed run sees exactly
// the sequences, in exactly the order, that the interrupted run would have seen next.
//
// The order of epoch e is a Fisher-Yates shuffle of [0, n) driven by std::mt19937_64 seeded
// from (seed, e), with our own bounded-integer draw (rejection sampling), because std::shuffle
// and std::uniform_int_distribution are implementation-defined: the same seed must give the same
// order on every standard library. The cursor is (epoch, index): the next sequence is
// order(epoch)[index]. It also records the seed, the dataset size and whether shuffling is on,
// so that resuming against a different dataset is refused rather than silently misaligned.
//
// Plain values and pure functions: thread-safe, owned by the caller.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spillway {

struct DataCursor {
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t dataset_size = 0;  // sequences in the (training) dataset
  int64_t epoch = 0;         // 0-based
  int64_t index = 0;         // next position in the epoch's order, 0 <= index < dataset_size

  // Sequences consumed since the start: epoch * dataset_size + index.
  int64_t consumed() const { return epoch * dataset_size + index; }
  // Fractional epochs done, for the GUI and events.
  double epoch_progress() const;

  // {"seed": "<decimal string>", "shuffle": bool, "dataset_size", "epoch", "index"}. The seed is
  // a string because JSON readers in other languages lose integers above 2^53.
  nlohmann::json to_json() const;
  std::string to_json_string() const;
  // kInvalidArgument naming the missing or malformed field; index outside [0, dataset_size).
  static Result<DataCursor> from_json(const nlohmann::json& j);
  static Result<DataCursor> from_json_string(std::string_view text);

  bool operator==(const DataCursor&) const = default;
};

// Uniform integer in [0, n) from `rng` by rejection (no modulo bias); n >= 1. The same on every
// platform, unlike std::uniform_int_distribution.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n);

// The seed of epoch `epoch`'s generator: splitmix64 of seed and epoch, so that nearby seeds and
// epochs give unrelated orders.
uint64_t epoch_seed(uint64_t seed, int64_t epoch);

// The order of epoch `epoch`: a permutation of [0, n) (the identity when !shuffle). Fisher-Yates
// as in Knuth TAOCP vol. 2, 3.4.2 algorithm P, from the last element down.
std::vector<uint32_t> epoch_order(size_t n, uint64_t seed, int64_t epoch, bool shuffle = true);

}  // namespace spillway
