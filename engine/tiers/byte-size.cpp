#include "tiers/byte-size.h"

#include <cstdio>

namespace spillway {

std::string format_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 6) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10.0 ? "%.2f %s" : "%.1f %s", v, kUnits[unit]);
  return buf;
}

}  // namespace spillway
