#include "data/data-cursor.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/json-file.h"

namespace spillway {

double DataCursor::epoch_progress() const {
  return dataset_size > 0 ? static_cast<double>(epoch) +
                                static_cast<double>(index) / static_cast<double>(dataset_size)
                          : 0.0;
}

nlohmann::json DataCursor::to_json() const {
  return {{"seed", std::to_string(seed)},
          {"shuffle", shuffle},
          {"dataset_size", dataset_size},
          {"epoch", epoch},
          {"index", index}};
}

std::string DataCursor::to_json_string() const {
  return to_json().dump();
}

Result<DataCursor> DataCursor::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return invalid_argument("data cursor: expected a JSON object");
  DataCursor c;
  auto seed = j.find("seed");
  if (seed == j.end()) return invalid_argument("data cursor: missing 'seed'");
  if (seed->is_string()) {
    const std::string& s = seed->get_ref<const std::string&>();
    size_t used = 0;
    try {
      c.seed = std::stoull(s, &used, 10);
    } catch (const std::exception&) {
      used = 0;
    }
    if (s.empty() || used != s.size() || s[0] == '-')
      return invalid_argument("data cursor: 'seed' is not an unsigned integer: '" + s + "'");
  } else if (seed->is_number_unsigned() ||
             (seed->is_number_integer() && seed->get<int64_t>() >= 0)) {
    c.seed = seed->get<uint64_t>();
  } else {
    return invalid_argument(
        "data cursor: 'seed' must be an unsigned integer or its decimal string");
  }
  auto get_int = [&](const char* key, int64_t* out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) return invalid_argument(std::string("data cursor: missing '") + key + "'");
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      return invalid_argument(std::string("data cursor: '") + key +
                              "' must be a non-negative integer");
    *out = it->get<int64_t>();
    return Status();
  };
  SPW_RETURN_IF_ERROR(get_int("dataset_size", &c.dataset_size));
  SPW_RETURN_IF_ERROR(get_int("epoch", &c.epoch));
  SPW_RETURN_IF_ERROR(get_int("index", &c.index));
  if (auto it = j.find("shuffle"); it != j.end()) {
    if (!it->is_boolean()) return invalid_argument("data cursor: 'shuffle' must be true or false");
    c.shuffle = it->get<bool>();
  }
  if (c.index >= c.dataset_size && !(c.index == 0 && c.dataset_size == 0))
    return invalid_argument("data cursor: index " + std::to_string(c.index) +
                            " is outside the dataset of " + std::to_string(c.dataset_size));
  return c;
}

Result<DataCursor> DataCursor::from_json_string(std::string_view text) {
  SPW_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(text, "data cursor", ErrorCode::kCorrupt));
  return from_json(j);
}

uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  // Reject the lowest (2^64 mod n) values so that every residue is equally likely.
  const uint64_t threshold = (0 - n) % n;
  while (true) {
    uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

uint64_t epoch_seed(uint64_t seed, int64_t epoch) {
  // splitmix64 (Steele, Lea, Flood 2014) over seed and epoch.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(epoch) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<uint32_t> epoch_order(size_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  if (!shuffle || n < 2) return order;
  std::mt19937_64 rng(epoch_seed(seed, epoch));
  for (size_t i = n - 1; i > 0; --i) {
    size_t j = static_cast<size_t>(uniform_below(rng, i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace spillway
