#include "core/fail-point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"

namespace spillway {
namespace {

struct Point {
  std::string name;
  bool kill = false;
  long long on_pass = 0;  // 0: every pass
  std::atomic<long long> passes{0};
};

// SPILLWAY_FAIL_POINTS parsed; a malformed entry is reported once and ignored.
const std::vector<std::unique_ptr<Point>>& points() {
  static const std::vector<std::unique_ptr<Point>> table = [] {
    std::vector<std::unique_ptr<Point>> out;
    const char* env = std::getenv("SPILLWAY_FAIL_POINTS");
    if (!env) return out;
    const std::string spec = env;
    size_t begin = 0;
    while (begin <= spec.size()) {
      size_t end = spec.find(';', begin);
      if (end == std::string::npos) end = spec.size();
      const std::string entry = spec.substr(begin, end - begin);
      begin = end + 1;
      if (entry.empty()) continue;
      const size_t eq = entry.find('=');
      auto p = std::make_unique<Point>();
      std::string action = eq == std::string::npos ? std::string() : entry.substr(eq + 1);
      if (const size_t at = action.find('@'); at != std::string::npos) {
        p->on_pass = std::atoll(action.c_str() + at + 1);
        action.resize(at);
      }
      if (eq == 0 || eq == std::string::npos || (action != "kill" && action != "fail") ||
          p->on_pass < 0) {
        log_warn("SPILLWAY_FAIL_POINTS: ignoring '" + entry +
                 "' (expected NAME=kill or NAME=fail, optionally @N)");
        continue;
      }
      p->name = entry.substr(0, eq);
      p->kill = action == "kill";
      out.push_back(std::move(p));
    }
    return out;
  }();
  return table;
}

}  // namespace

bool fail_point(std::string_view name) {
  static const bool any = !points().empty();
  if (!any) return false;
  for (const auto& p : points()) {
    if (p->name != name) continue;
    const long long pass = p->passes.fetch_add(1) + 1;
    if (p->on_pass != 0 && pass != p->on_pass) return false;
    if (p->kill) {
      ::raise(SIGKILL);
      for (;;) ::pause();  // SIGKILL cannot be caught; this is never reached
    }
    return true;
  }
  return false;
}

bool fail_points_armed(std::string_view prefix) {
  for (const auto& p : points())
    if (std::string_view(p->name).starts_with(prefix)) return true;
  return false;
}

}  // namespace spillway
