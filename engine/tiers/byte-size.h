// Byte sizes for people: "64.0 MiB", "1.00 PiB". Used in every tier's out-of-memory and no-space
// message, so that an error names sizes a person can compare at a glance. Pure functions,
// thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace spillway {

// Binary units (KiB = 1024 bytes). Values under 1 KiB print as "N B".
std::string format_bytes(uint64_t bytes);

// Rounds `n` up to a multiple of `align` (a power of two or any non-zero value).
inline uint64_t round_up(uint64_t n, uint64_t align) {
  return (n + align - 1) / align * align;
}

}  // namespace spillway
