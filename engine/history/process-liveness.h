// Process identity and liveness: how the run store tells a running worker from one that was
// SIGKILLed, crashed, or lost with a reboot.
//
// A pid alone is not an identity (pids are reused), so a worker records its pid together with its
// start time in clock ticks since boot (/proc/<pid>/stat field 22, proc(5)), the boot id
// (/proc/sys/kernel/random/boot_id) and the host name. A recorded process is gone when the boot id
// changed, when no process has that pid, when the process with that pid started at another time
// (reuse), or when it is a zombie (killed but not yet reaped by its parent). A process on another
// host (a database on a shared home directory) cannot be judged: kUnknown.
//
// Thread-safety: all functions are reentrant. Ownership: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace spillway {

struct ProcessIdentity {
  std::int64_t pid = 0;
  std::optional<std::uint64_t> start_ticks;  // absent where /proc is not available
  std::string boot_id;                       // "" where not available
  std::string host;
};

enum class Liveness { kAlive, kGone, kUnknown };

// The calling process.
ProcessIdentity current_process_identity();
// Field 22 of /proc/<pid>/stat; absent when there is no such process or /proc is unavailable.
std::optional<std::uint64_t> process_start_ticks(std::int64_t pid);
// Field 3 of /proc/<pid>/stat ('R', 'S', 'Z', ...); absent as above.
std::optional<char> process_state(std::int64_t pid);
std::string current_boot_id();
std::string current_host_name();

Liveness check_process(const ProcessIdentity& recorded);

}  // namespace spillway
