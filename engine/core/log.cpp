#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace spillway {
namespace {
std::mutex g_mutex;
LogLevel g_level = [] {
  const char* env = std::getenv("SPILLWAY_LOG");
  return env && std::strcmp(env, "debug") == 0 ? LogLevel::kDebug : LogLevel::kInfo;
}();
std::function<void(LogLevel, const std::string&)> g_sink;
}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

void set_log_level(LogLevel level) {
  std::lock_guard lock(g_mutex);
  g_level = level;
}

void set_log_sink(std::function<void(LogLevel, const std::string&)> sink) {
  std::lock_guard lock(g_mutex);
  g_sink = std::move(sink);
}

void log_message(LogLevel level, const std::string& message) {
  std::lock_guard lock(g_mutex);
  if (level < g_level) return;
  std::fprintf(stderr, "[%s] %s\n", log_level_name(level), message.c_str());
  if (g_sink) g_sink(level, message);
}

}  // namespace spillway
