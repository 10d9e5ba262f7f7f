// Reading one field of an event or a plan that may come from a damaged or older file: a field that
// is missing or of another type reads as absent (nullopt) or as the caller's default, never throws,
// and a number out of the target type's range is clamped (a damaged events.jsonl holds NaN
// or 7.8e95, whose conversion to an integer is undefined). Internal to engine/events.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace spillway::events_detail {

using nlohmann::json;

inline const json* field(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  const auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

inline std::optional<double> number(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

// An integer field: exact for JSON integers; a float is truncated toward zero; both clamped to T.
template <typename T>
std::optional<T> integer(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v || !v->is_number()) return std::nullopt;
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    return u > static_cast<uint64_t>(hi) ? hi : static_cast<T>(u);
  }
  if (v->is_number_integer()) {
    const int64_t x = v->get<int64_t>();
    if (x < 0 && std::numeric_limits<T>::is_signed == false) return T{0};
    if (x > 0 && static_cast<uint64_t>(x) > static_cast<uint64_t>(hi)) return hi;
    if constexpr (std::numeric_limits<T>::is_signed) {
      if (x < static_cast<int64_t>(lo)) return lo;
    }
    return static_cast<T>(x);
  }
  const double d = v->get<double>();
  if (std::isnan(d)) return T{0};
  if (d <= static_cast<double>(lo)) return lo;
  if (d >= static_cast<double>(hi)) return hi;
  return static_cast<T>(d);
}

inline std::optional<bool> boolean(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

inline std::optional<std::string> text(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

inline const json& object(const json& o, const char* key) {
  static const json empty = json::object();
  const json* v = field(o, key);
  return v && v->is_object() ? *v : empty;
}

}  // namespace spillway::events_detail
