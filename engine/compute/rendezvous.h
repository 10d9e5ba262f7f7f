// The rendezvous of a HostGroup (host-group.h): the wire format its processes speak over TCP, and
// the server that rank 0 runs on a thread of its own. Private to host-group.cpp.
//
// Wire format, every integer little-endian:
//   client → server, once:      hello = "SPWYGRP\0", version u32, rank u32, processes u32,
//                               join timeout in ms u64 (0: none), the part of it left in ms u64
//   client → server, per round: payload length u64, round timeout in ms u64 (0: none), payload
//   server → client:            frame = type u32, error code u32, body length u64, body
//     kJoined (every process joined, empty body), kRound (per rank in rank order: length u64 and
//     payload), kError (the message; the server closes the connection after it).
// The server enforces both timeouts, since only it knows who is missing; a client gives up on its
// own only when the server has been silent for its timeout plus kServerGraceS (a machine gone).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/status.h"

namespace spillway::compute::rendezvous {

using Clock = std::chrono::steady_clock;

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

inline void put_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
inline void put_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
inline uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
inline uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

constexpr char kMagic[8] = {'S', 'P', 'W', 'Y', 'G', 'R', 'P', '\0'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHelloBytes = 8 + 4 + 4 + 4 + 8 + 8;
constexpr size_t kRoundHeadBytes = 8 + 8;
constexpr size_t kFrameHeadBytes = 4 + 4 + 8;
enum FrameType : uint32_t { kJoined = 1, kRound = 2, kError = 3 };
// host-group.h's limit on one process's payload in a round.
constexpr uint64_t kMaxPayload = uint64_t{1} << 32;
// An error message is short; a longer one is a corrupt stream.
constexpr uint64_t kMaxErrorBytes = 1 << 16;

// How much longer than its timeout a client waits for a silent server before it gives up alone:
// the server names the missing processes at the timeout itself; this is for a machine gone.
constexpr double kServerGraceS = 10;

// Milliseconds on the wire for a timeout in seconds; 0 for none (<= 0).
uint64_t to_ms(double seconds);
// A deadline `seconds` from now; none for <= 0.
std::optional<Clock::time_point> deadline_after(double seconds);
// poll()'s timeout until `deadline`: -1 for none, rounded up so that a wake is never early.
int poll_ms(std::optional<Clock::time_point> deadline);
// "0.5", "600": seconds as messages write them.
std::string seconds_text(double s);
void set_no_delay(int fd);

// Rank 0's server: listens on `port` on every interface (IPv6 and IPv4 where the machine has
// IPv6) and serves a group of `processes` on a thread of its own until the group ends: a process
// leaves, disagrees, or times out (the server tells every process why, then closes), or the
// server is destroyed. `rendezvous` and `source` are for messages. kIo when the port is taken.
// Thread-safety: failure() may be called from any thread. The destructor ends the group (for
// those still connected: "process 0 left the group") and joins the thread, which waits for the
// others' machines to acknowledge the error, at most 2 s.
class Server {
 public:
  static Result<std::unique_ptr<Server>> start(int port, int processes, std::string rendezvous,
                                               std::string source);
  virtual ~Server() = default;
  // Why the group ended, once it has.
  virtual std::optional<Status> failure() = 0;
};

}  // namespace spillway::compute::rendezvous
