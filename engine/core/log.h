// Minimal leveled logging to stderr, with an optional sink (the worker forwards lines into
// events.jsonl as `log` events). Thread-safe: lines are written whole under a mutex.
#pragma once

#include <functional>
#include <string>

namespace spillway {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

void log_message(LogLevel level, const std::string& message);
// Lines below `level` are dropped. Default kInfo; SPILLWAY_LOG=debug lowers it.
void set_log_level(LogLevel level);
// Every line that passes the level also goes to `sink` (empty: stderr only).
void set_log_sink(std::function<void(LogLevel, const std::string&)> sink);
const char* log_level_name(LogLevel level);

inline void log_debug(const std::string& m) {
  log_message(LogLevel::kDebug, m);
}
inline void log_info(const std::string& m) {
  log_message(LogLevel::kInfo, m);
}
inline void log_warn(const std::string& m) {
  log_message(LogLevel::kWarn, m);
}
inline void log_error(const std::string& m) {
  log_message(LogLevel::kError, m);
}

}  // namespace spillway
