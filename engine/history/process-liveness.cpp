#include "history/process-liveness.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string_view>
#include <vector>

#include "core/file-util.h"

namespace spillway {
namespace {

// The fields of /proc/<pid>/stat after "(comm)", starting with field 3 (state). comm may contain
// spaces and parentheses, so split after the last ')'.
std::optional<std::vector<std::string>> stat_fields(std::int64_t pid) {
  if (pid <= 0) return std::nullopt;
  auto text = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!text.ok()) return std::nullopt;
  size_t close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string> out;
  std::string_view rest(*text);
  rest.remove_prefix(close + 1);
  size_t i = 0;
  while (i < rest.size()) {
    while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\n')) ++i;
    size_t j = i;
    while (j < rest.size() && rest[j] != ' ' && rest[j] != '\n') ++j;
    if (j > i) out.emplace_back(rest.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::optional<std::uint64_t> process_start_ticks(std::int64_t pid) {
  auto f = stat_fields(pid);
  // Field 22 is index 19 counting from field 3.
  if (!f || f->size() < 20) return std::nullopt;
  const std::string& s = (*f)[19];
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<char> process_state(std::int64_t pid) {
  auto f = stat_fields(pid);
  if (!f || f->empty() || (*f)[0].empty()) return std::nullopt;
  return (*f)[0][0];
}

std::string current_boot_id() {
  auto text = read_file("/proc/sys/kernel/random/boot_id");
  return text.ok() ? trim(*text) : std::string();
}

std::string current_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

ProcessIdentity current_process_identity() {
  ProcessIdentity id;
  id.pid = ::getpid();
  id.start_ticks = process_start_ticks(id.pid);
  id.boot_id = current_boot_id();
  id.host = current_host_name();
  return id;
}

Liveness check_process(const ProcessIdentity& recorded) {
  if (recorded.pid <= 0) return Liveness::kUnknown;
  if (!recorded.host.empty() && recorded.host != current_host_name()) return Liveness::kUnknown;
  std::string boot = current_boot_id();
  if (!recorded.boot_id.empty() && !boot.empty() && recorded.boot_id != boot)
    return Liveness::kGone;

  if (::kill(static_cast<pid_t>(recorded.pid), 0) != 0 && errno == ESRCH) return Liveness::kGone;
  // EPERM: a process with that pid exists but belongs to someone else — judge it by /proc below.
  auto state = process_state(recorded.pid);
  if (!state) {
    // No /proc entry: either no /proc at all (then kill() said it exists) or it just exited.
    return ::kill(static_cast<pid_t>(recorded.pid), 0) != 0 && errno == ESRCH ? Liveness::kGone
                                                                              : Liveness::kAlive;
  }
  if (*state == 'Z' || *state == 'X' || *state == 'x') return Liveness::kGone;
  if (recorded.start_ticks) {
    auto now_start = process_start_ticks(recorded.pid);
    if (now_start && *now_start != *recorded.start_ticks) return Liveness::kGone;  // pid reused
  }
  return Liveness::kAlive;
}

}  // namespace spillway
