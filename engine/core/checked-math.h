// Products of sizes a user controls (sequence length, batch, layers, hidden size, vocabulary):
// byte and element counts that cannot wrap. A job of 65,536 sequences of 2^20 tokens wrapped the
// plan's checkpoint bytes to a small number and was planned as fitting (issue 15). Header only,
// plain functions, thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace spillway {

// What a count that does not fit reads as: more than any machine holds, yet small enough that a
// few such counts add up without wrapping (4 x 2^62 = 2^64).
inline constexpr uint64_t kSaturatedCount = uint64_t{1} << 62;

// *out = a * b and true when the product fits in 64 bits; false (and *out unspecified) otherwise.
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// The product of `factors`, or kSaturatedCount when it is larger (or would wrap).
inline uint64_t mul_saturated(std::initializer_list<uint64_t> factors) {
  uint64_t p = 1;
  for (uint64_t f : factors) {
    if (!checked_mul(p, f, &p) || p > kSaturatedCount) return kSaturatedCount;
  }
  return p;
}

}  // namespace spillway
