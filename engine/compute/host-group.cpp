// HostGroup over POSIX TCP: the spec from flags or a launcher's environment, rank 0's rendezvous
// server (one thread, non-blocking sockets under poll), and each process's blocking client end.
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
#include "compute/host-group.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

extern char** environ;

namespace spillway::compute {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// The spec
// ---------------------------------------------------------------------------------------------

std::optional<long long> parse_integer(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  long long v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

struct HostPort {
  std::string host;  // a name, an IPv4 address or an IPv6 one (without its brackets)
  int port = 0;
};

// "host:port" or "[v6]:port"; `what` names where the address came from, for the message.
Result<HostPort> parse_host_port(const std::string& address, const std::string& what) {
  const std::string said = what + " is '" + address + "'";
  const std::string example =
      ": write host:port, e.g. node01:29500, 10.0.0.1:29500 or [fd00::1]:29500";
  HostPort hp;
  std::string port;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':')
      return invalid_argument(said + example);
    hp.host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return invalid_argument(said + ", with no port" + example);
    if (address.find(':') != colon)
      return invalid_argument(said + ": put an IPv6 address in brackets, e.g. [fd00::1]:29500");
    hp.host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (hp.host.empty()) return invalid_argument(said + ", with no host" + example);
  const auto p = parse_integer(port);
  if (!p || *p < 1 || *p > 65535)
    return invalid_argument(said + ": the port must be a number in 1 .. 65535" + example);
  hp.port = static_cast<int>(*p);
  return hp;
}

// A variable's value; an empty one counts as unset (`SPILLWAY_RANK= worker ...`).
const std::string* find(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// A launcher's pair of variables. Nearest launcher first: torchrun and mpirun run inside Slurm
// allocations, whose SLURM_PROCID their processes inherit but which is not their rank.
struct Launcher {
  const char* rank;
  const char* size;
  const char* name;  // for `source`; null: the variable's own name says it
};
constexpr Launcher kLaunchers[] = {
    {"SPILLWAY_RANK", "SPILLWAY_PROCESSES", nullptr},
    {"RANK", "WORLD_SIZE", "torchrun"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
    {"PMI_RANK", "PMI_SIZE", "MPICH"},
    {"SLURM_PROCID", "SLURM_NTASKS", "Slurm"},
};

const char kAddressHelp[] =
    "set SPILLWAY_RENDEZVOUS=host:port (process 0's machine and a free port, the same on every "
    "machine), MASTER_ADDR and MASTER_PORT, or --rendezvous";

// The rendezvous address: the flag, else SPILLWAY_RENDEZVOUS, else MASTER_ADDR:MASTER_PORT.
Result<std::string> rendezvous_address(const std::string& flag,
                                       const std::map<std::string, std::string>& env,
                                       const std::string& count_said) {
  std::string address, what;
  const std::string* spillway = find(env, "SPILLWAY_RENDEZVOUS");
  const std::string* addr = find(env, "MASTER_ADDR");
  const std::string* port = find(env, "MASTER_PORT");
  if (!flag.empty()) {
    address = flag;
    what = "--rendezvous";
  } else if (spillway) {
    address = *spillway;
    what = "SPILLWAY_RENDEZVOUS";
  } else if (addr || port) {
    if (!addr)
      return invalid_argument("MASTER_PORT is set but MASTER_ADDR is not: set both, or " +
                              std::string(kAddressHelp));
    if (!port)
      return invalid_argument("MASTER_ADDR is set but MASTER_PORT is not: set both, or " +
                              std::string(kAddressHelp));
    // MASTER_ADDR may be a bare IPv6 address.
    const bool v6 = addr->find(':') != std::string::npos && addr->front() != '[';
    address = (v6 ? "[" + *addr + "]" : *addr) + ":" + *port;
    what = "MASTER_ADDR:MASTER_PORT";
  } else {
    std::string hint;
    if (count_said.rfind("SLURM_NTASKS", 0) == 0) {
      // A batch script's own environment says SLURM_PROCID=0 and --ntasks, without srun.
      hint =
          ". Under Slurm, start one worker per machine with srun; to run one process in a "
          "batch script, set SPILLWAY_PROCESSES=1";
    }
    return invalid_argument(count_said + " but no rendezvous address is given: " + kAddressHelp +
                            hint);
  }
  SPW_RETURN_IF_ERROR(parse_host_port(address, what).status());
  return address;
}

// ---------------------------------------------------------------------------------------------
// Sockets
// ---------------------------------------------------------------------------------------------

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

void put_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void put_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
uint64_t get_u64(const char* p) {
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
// The header's limit on one process's payload in a round.
constexpr uint64_t kMaxPayload = uint64_t{1} << 32;
// An error message is short; a longer one is a corrupt stream.
constexpr uint64_t kMaxErrorBytes = 1 << 16;

// How long the server keeps a failed group's connections open, at most, so that its error reaches
// every process: a socket closed with unread input resets the connection, dropping what it had
// not sent yet, so each is closed once the peer's kernel has acknowledged everything.
constexpr double kLingerS = 2;
// How often the server looks for those acknowledgements (no poll() event says so).
constexpr auto kAckPoll = std::chrono::milliseconds(5);
// How long a connection may take to say hello before the server drops it (a stray client).
constexpr double kHelloTimeoutS = 10;
// How much longer than its timeout a client waits for a silent server before it gives up alone:
// the server names the missing processes at the timeout itself; this is for a machine gone.
constexpr double kServerGraceS = 10;

uint64_t to_ms(double seconds) {
  if (!(seconds > 0)) return 0;
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::min(seconds, 1e12) * 1000));
}

// A deadline `seconds` from now; none for <= 0.
std::optional<Clock::time_point> deadline_after(double seconds) {
  if (!(seconds > 0)) return std::nullopt;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::min(seconds, 1e9)));
}

// poll()'s timeout until `deadline`: -1 for none, rounded up so that a wake is never early.
int poll_ms(std::optional<Clock::time_point> deadline) {
  if (!deadline) return -1;
  const auto left = *deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<long long>(ms, 60'000));
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// "process 2" or "processes 1, 3".
std::string processes_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "process " : "processes ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string peer_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown address";
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&a)->sin_addr, buf, sizeof buf);
  } else if (a.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr, buf, sizeof buf);
  }
  std::string s = buf;
  if (s.rfind("::ffff:", 0) == 0 && s.find('.') != std::string::npos) s = s.substr(7);
  return s.empty() ? "an unknown address" : s;
}

void set_no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// ---------------------------------------------------------------------------------------------
// The rendezvous server (rank 0's thread)
// ---------------------------------------------------------------------------------------------

// What the server sends: byte ranges over buffers it owns (a round's payloads are not copied).
struct Frame {
  std::vector<std::string> storage;
  std::vector<std::string_view> parts;  // into storage; built after storage stops moving
};

std::shared_ptr<const Frame> error_frame(const Status& status) {
  auto f = std::make_shared<Frame>();
  std::string s(kFrameHeadBytes, '\0');
  put_u32(s.data(), kError);
  put_u32(s.data() + 4, static_cast<uint32_t>(status.code()));
  put_u64(s.data() + 8, status.message().size());
  s += status.message();
  f->storage.push_back(std::move(s));
  f->parts.push_back(f->storage[0]);
  return f;
}

std::shared_ptr<const Frame> joined_frame() {
  auto f = std::make_shared<Frame>();
  std::string s(kFrameHeadBytes, '\0');
  put_u32(s.data(), kJoined);
  f->storage.push_back(std::move(s));
  f->parts.push_back(f->storage[0]);
  return f;
}

// One process's connection, as the server sees it.
struct Conn {
  Fd fd;
  std::string peer;
  Clock::time_point accepted;
  int rank = -1;         // once its hello was accepted
  bool greeted = false;  // said the magic: a Spillway process, owed an error frame on failure
  double join_timeout_s = 0;
  std::optional<Clock::time_point> join_deadline;

  enum class In { kHello, kHead, kPayload, kComplete } in = In::kHello;
  char head[kHelloBytes] = {};
  size_t head_got = 0;
  std::string payload;
  size_t payload_got = 0;
  double round_timeout_s = 0;
  Clock::time_point waiting_since;  // when its payload was complete

  std::deque<std::shared_ptr<const Frame>> out;
  size_t part = 0, offset = 0;

  bool leaving = false;  // being closed: its last frames go out, then it is shut
  bool write_shut = false;
  std::optional<Clock::time_point> leave_deadline;
  bool dropped = false;
};

class Server {
 public:
  // Listens on `port` on every interface (IPv6 and IPv4 where the machine has IPv6) and serves a
  // group of `processes` on a thread of its own.
  static Result<std::unique_ptr<Server>> start(int port, int processes, std::string rendezvous,
                                               std::string source) {
    auto s =
        std::unique_ptr<Server>(new Server(processes, std::move(rendezvous), std::move(source)));
    SPW_RETURN_IF_ERROR(s->listen(port));
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0)
      return errno_status("process group: pipe", errno);
    s->wake_read_.reset(pipe_fds[0]);
    s->wake_write_.reset(pipe_fds[1]);
    s->thread_ = std::thread([p = s.get()] { p->run(); });
    return s;
  }

  // Ends the group (every process still connected gets `why`) and joins the thread, which gives
  // the others at most kLingerS to read it.
  void stop(const Status& why) {
    {
      std::lock_guard<std::mutex> lock(stop_mutex_);
      if (!stop_reason_) stop_reason_ = why;
    }
    stopping_.store(true);
    const char b = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_write_.get(), &b, 1);
    if (thread_.joinable()) thread_.join();
  }

  ~Server() { stop(io_error("process 0 left the group (connection closed)")); }

  // Why the group ended, once it has.
  std::optional<Status> failure() {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    return failure_;
  }

 private:
  Server(int processes, std::string rendezvous, std::string source)
      : processes_(processes),
        rendezvous_(std::move(rendezvous)),
        source_(std::move(source)),
        by_rank_(processes, nullptr) {}

  Status listen(int port) {
    const std::string what = "process 0 cannot serve the process group on port " +
                             std::to_string(port) + " (rendezvous " + rendezvous_ + ")";
    int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const bool v6 = fd >= 0;
    if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno_status(what + ": socket", errno);
    listen_.reset(fd);
    const int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 too
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0) {
      const int err = errno;
      if (err == EADDRINUSE)
        return io_error(what + ": " + std::strerror(err) +
                        ": another program (or run) holds it; pick another port, the same on "
                        "every machine");
      return errno_status(what + ": bind", err);
    }
    if (::listen(fd, SOMAXCONN) != 0) return errno_status(what + ": listen", errno);
    return Status();
  }

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      const auto now = Clock::now();
      if (stopping_.load() && !closing_) {
        std::optional<Status> why;
        {
          std::lock_guard<std::mutex> lock(stop_mutex_);
          why = stop_reason_;
        }
        fail(*why);
      }
      check_deadlines(now);
      sweep();
      if (closing_ && (conns_.empty() || now >= linger_deadline_)) break;

      fds.clear();
      fds.push_back({wake_read_.get(), POLLIN, 0});
      fds.push_back({listen_.valid() ? listen_.get() : -1, POLLIN, 0});
      for (const auto& c : conns_) {
        short events = POLLIN;
        if (!c->out.empty()) events |= POLLOUT;
        fds.push_back({c->fd.get(), events, 0});
      }
      const int rc = ::poll(fds.data(), fds.size(), poll_ms(next_deadline()));
      if (rc < 0 && errno != EINTR) break;  // cannot happen with valid arguments
      if (rc <= 0) continue;
      if (fds[0].revents) {
        char buf[64];
        while (::read(wake_read_.get(), buf, sizeof buf) > 0) {
        }
      }
      if (fds[1].revents & POLLIN) accept_all();
      // conns_ only grows at its end during this loop, so fds[2 + i] is still conns_[i].
      const size_t polled = fds.size() - 2;
      for (size_t i = 0; i < polled; ++i) {
        Conn& c = *conns_[i];
        const short re = fds[2 + i].revents;
        if (c.dropped || !re) continue;
        if (re & POLLOUT) flush(c);
        if (!c.dropped && (re & (POLLIN | POLLHUP | POLLERR))) read_from(c);
      }
      sweep();
      if (!closing_ && formed_) deliver_round_if_complete();
    }
    conns_.clear();
    listen_.reset();
  }

  std::optional<Clock::time_point> next_deadline() const {
    std::optional<Clock::time_point> d;
    auto take = [&d](std::optional<Clock::time_point> t) {
      if (t && (!d || *t < *d)) d = t;
    };
    if (closing_) take(linger_deadline_);
    for (const auto& c : conns_) {
      if (c->rank < 0 && !c->leaving)
        take(c->accepted + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(kHelloTimeoutS)));
      if (!formed_) take(c->join_deadline);
      if (c->in == Conn::In::kComplete && c->round_timeout_s > 0)
        take(c->waiting_since + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(c->round_timeout_s)));
      take(c->leave_deadline);
      if (c->write_shut) take(Clock::now() + kAckPoll);
    }
    return d;
  }

  void check_deadlines(Clock::time_point now) {
    for (auto& c : conns_) {
      if (c->dropped) continue;
      if (c->leave_deadline && now >= *c->leave_deadline) {
        drop(*c);
        continue;
      }
      if (c->write_shut && delivered(*c)) {
        drop(*c);
        continue;
      }
      if (c->rank < 0 && !c->leaving &&
          now - c->accepted >= std::chrono::duration<double>(kHelloTimeoutS)) {
        drop(*c);  // a stray that never said hello
        continue;
      }
      if (closing_) continue;
      if (!formed_ && c->join_deadline && now >= *c->join_deadline) {
        std::vector<int> missing;
        for (int r = 0; r < processes_; ++r)
          if (!by_rank_[r]) missing.push_back(r);
        fail(io_error("the process group did not form within " + seconds_text(c->join_timeout_s) +
                      " s: " + processes_text(missing) + " did not join (rendezvous " +
                      rendezvous_ + ", ranks from " + source_ +
                      "); start one worker per machine, each with its own rank and this address"));
        return;
      }
      if (c->in == Conn::In::kComplete && c->round_timeout_s > 0 &&
          now - c->waiting_since >= std::chrono::duration<double>(c->round_timeout_s)) {
        std::vector<int> silent;
        for (int r = 0; r < processes_; ++r)
          if (by_rank_[r] && by_rank_[r]->in != Conn::In::kComplete) silent.push_back(r);
        fail(io_error(processes_text(silent) + " did not send within " +
                      seconds_text(c->round_timeout_s) + " s (round " + std::to_string(round_ + 1) +
                      " of the process group at " + rendezvous_ + ")"));
        return;
      }
    }
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN, or out of descriptors: the rest wait in the backlog
      }
      set_no_delay(fd);
      auto c = std::make_unique<Conn>();
      c->fd.reset(fd);
      c->peer = peer_address(fd);
      c->accepted = Clock::now();
      if (closing_) continue;  // closed by c's destructor
      conns_.push_back(std::move(c));
    }
  }

  // Reads what `c` sent, advancing its state; EOF or an error ends it (and the group, for one of
  // its processes).
  void read_from(Conn& c) {
    for (;;) {
      if (c.dropped) return;
      char sink[65536];
      char* dst;
      size_t want;
      // Once the group has failed only a hello is still read: a process whose hello was on its
      // way is owed the failure too.
      const bool discard =
          (closing_ && c.in != Conn::In::kHello) || c.leaving || c.in == Conn::In::kComplete;
      if (discard) {
        dst = sink;
        want = sizeof sink;
      } else if (c.in == Conn::In::kHello) {
        dst = c.head + c.head_got;
        want = kHelloBytes - c.head_got;
      } else if (c.in == Conn::In::kHead) {
        dst = c.head + c.head_got;
        want = kRoundHeadBytes - c.head_got;
      } else {
        dst = c.payload.data() + c.payload_got;
        want = c.payload.size() - c.payload_got;
      }
      const ssize_t n = ::recv(c.fd.get(), dst, want, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        left(c, std::strerror(errno));
        return;
      }
      if (n == 0) {
        left(c, "connection closed");
        return;
      }
      if (discard) {
        if (!closing_ && !c.leaving) {
          fail(internal_error("process " + std::to_string(c.rank) +
                              " sent its next payload before the round ended (a bug)"));
        }
        continue;
      }
      if (c.in == Conn::In::kHello || c.in == Conn::In::kHead) {
        c.head_got += static_cast<size_t>(n);
        if (c.in == Conn::In::kHello && c.head_got == kHelloBytes) hello(c);
        if (c.in == Conn::In::kHead && c.head_got == kRoundHeadBytes) round_head(c);
      } else {
        c.payload_got += static_cast<size_t>(n);
        if (c.payload_got == c.payload.size()) complete(c);
      }
    }
  }

  void hello(Conn& c) {
    c.head_got = 0;
    if (std::memcmp(c.head, kMagic, sizeof kMagic) != 0) {
      drop(c);  // not one of ours: nothing to tell it
      return;
    }
    c.greeted = true;
    if (closing_) {
      c.leaving = true;
      send(c, failure_frame_);
      return;
    }
    const uint32_t version = get_u32(c.head + 8);
    const int rank = static_cast<int>(get_u32(c.head + 12));
    const int processes = static_cast<int>(get_u32(c.head + 16));
    const uint64_t join_ms = get_u64(c.head + 20);
    const uint64_t join_left_ms = get_u64(c.head + 28);
    const std::string who = "process " + std::to_string(rank) + " (at " + c.peer + ")";
    if (formed_) {  // a running group goes on: only this one is turned away
      reject(c, invalid_argument(who + " came after the group of " + std::to_string(processes_) +
                                 " processes at " + rendezvous_ +
                                 " had formed: it is a duplicate, or belongs to another run"));
      return;
    }
    if (version != kVersion) {
      fail(invalid_argument(who + " speaks version " + std::to_string(version) +
                            " of the process group's protocol and process 0 version " +
                            std::to_string(kVersion) + ": run the same Spillway on every machine"));
      return;
    }
    if (processes != processes_) {
      fail(invalid_argument(who + " was started for " + std::to_string(processes) +
                            " processes and process 0 for " + std::to_string(processes_) +
                            " (from " + source_ + "): give every machine the same count"));
      return;
    }
    if (rank < 0 || rank >= processes_) {
      fail(invalid_argument(who + " has a rank outside 0 .. " + std::to_string(processes_ - 1)));
      return;
    }
    if (Conn* other = by_rank_[rank]) {
      fail(invalid_argument("two processes claim rank " + std::to_string(rank) + " (at " +
                            other->peer + " and at " + c.peer +
                            "): give each machine its own rank (ranks from " + source_ + ")"));
      return;
    }
    c.rank = rank;
    c.in = Conn::In::kHead;
    c.join_timeout_s = static_cast<double>(join_ms) / 1000;
    if (join_ms > 0) c.join_deadline = deadline_after(static_cast<double>(join_left_ms) / 1000);
    by_rank_[rank] = &c;
    if (++joined_ == processes_) {
      formed_ = true;
      const auto f = joined_frame();
      // A send that fails ends the group (fail() tells the others and may drop them).
      for (Conn* m : by_rank_) {
        if (closing_) break;
        if (m) send(*m, f);
      }
    }
  }

  void round_head(Conn& c) {
    c.head_got = 0;
    const uint64_t bytes = get_u64(c.head);
    c.round_timeout_s = static_cast<double>(get_u64(c.head + 8)) / 1000;
    if (!formed_) {
      fail(internal_error("process " + std::to_string(c.rank) +
                          " sent a payload before the group formed (a bug)"));
      return;
    }
    if (bytes > kMaxPayload) {
      fail(invalid_argument("process " + std::to_string(c.rank) + " sent a payload of " +
                            std::to_string(bytes) + " bytes; a round carries at most 4 GiB each"));
      return;
    }
    try {
      c.payload.resize(bytes);
    } catch (const std::bad_alloc&) {
      fail(out_of_memory("process 0 could not hold process " + std::to_string(c.rank) +
                         "'s payload of " + std::to_string(bytes) + " bytes"));
      return;
    }
    c.payload_got = 0;
    c.in = Conn::In::kPayload;
    if (bytes == 0) complete(c);
  }

  void complete(Conn& c) {
    c.in = Conn::In::kComplete;
    c.waiting_since = Clock::now();
  }

  void deliver_round_if_complete() {
    for (Conn* c : by_rank_)
      if (c->in != Conn::In::kComplete) return;
    auto f = std::make_shared<Frame>();
    std::string head(kFrameHeadBytes + 8 * processes_, '\0');
    uint64_t body = 0;
    for (int r = 0; r < processes_; ++r) {
      put_u64(head.data() + kFrameHeadBytes + 8 * r, by_rank_[r]->payload.size());
      body += 8 + by_rank_[r]->payload.size();
    }
    put_u32(head.data(), kRound);
    put_u64(head.data() + 8, body);
    f->storage.reserve(processes_ + 1);
    f->storage.push_back(std::move(head));
    for (Conn* c : by_rank_) {
      f->storage.push_back(std::move(c->payload));
      c->payload = std::string();
      c->payload_got = 0;
      c->in = Conn::In::kHead;
    }
    const std::string_view h = f->storage[0];
    f->parts.push_back(h.substr(0, kFrameHeadBytes));
    for (int r = 0; r < processes_; ++r) {
      f->parts.push_back(h.substr(kFrameHeadBytes + 8 * r, 8));
      if (!f->storage[r + 1].empty()) f->parts.push_back(f->storage[r + 1]);
    }
    ++round_;
    std::shared_ptr<const Frame> frame = std::move(f);
    for (Conn* c : by_rank_) {
      if (closing_) break;  // a send failed: the group has ended
      if (c) send(*c, frame);
    }
  }

  void send(Conn& c, std::shared_ptr<const Frame> f) {
    c.out.push_back(std::move(f));
    flush(c);
  }

  // Writes what `c` is owed until the socket is full.
  void flush(Conn& c) {
    while (!c.dropped && !c.out.empty()) {
      const Frame& f = *c.out.front();
      iovec iov[64];
      int n_iov = 0;
      for (size_t p = c.part; p < f.parts.size() && n_iov < 64; ++p) {
        const size_t skip = p == c.part ? c.offset : 0;
        iov[n_iov].iov_base = const_cast<char*>(f.parts[p].data() + skip);
        iov[n_iov].iov_len = f.parts[p].size() - skip;
        ++n_iov;
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n_iov;
      const ssize_t n = n_iov ? ::sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL) : 0;
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        left(c, std::strerror(errno));
        return;
      }
      size_t sent = static_cast<size_t>(n);
      while (c.part < f.parts.size() && sent >= f.parts[c.part].size() - c.offset) {
        sent -= f.parts[c.part].size() - c.offset;
        ++c.part;
        c.offset = 0;
      }
      c.offset += sent;
      if (c.part == f.parts.size()) {
        c.out.pop_front();
        c.part = 0;
        c.offset = 0;
      }
    }
    if (!c.dropped && c.out.empty() && c.leaving && !c.write_shut) {
      ::shutdown(c.fd.get(), SHUT_WR);  // it reads the error, then EOF, and closes its end
      c.write_shut = true;
    }
  }

  // `c`'s connection ended; for one of the group's processes, so does the group.
  void left(Conn& c, const std::string& why) {
    const int rank = c.rank;
    const bool was_leaving = c.leaving;
    drop(c);
    if (rank >= 0 && !was_leaving && !closing_)
      fail(io_error("process " + std::to_string(rank) + " left the group (" + why + ")"));
  }

  // Turns one connection away with `why`, leaving the group as it is.
  void reject(Conn& c, const Status& why) {
    send(c, error_frame(why));
    c.leaving = true;
    c.leave_deadline = deadline_after(kLingerS);
    flush(c);
  }

  // Ends the group: every process of it still connected gets `why`, then its connection closes.
  void fail(const Status& why) {
    if (closing_) return;
    closing_ = true;
    {
      std::lock_guard<std::mutex> lock(stop_mutex_);
      failure_ = why;
    }
    linger_deadline_ = *deadline_after(kLingerS);
    listen_.reset();
    failure_frame_ = error_frame(why);
    for (auto& c : conns_) {
      if (c->dropped || !c->greeted) continue;  // the others get it with their hello, if any
      c->leaving = true;
      send(*c, failure_frame_);
    }
  }

  // Whether the peer's kernel has acknowledged every byte sent to `c`, its end included.
  static bool delivered(const Conn& c) {
    int unacknowledged = 0;
    return ::ioctl(c.fd.get(), SIOCOUTQ, &unacknowledged) == 0 && unacknowledged == 0;
  }

  void drop(Conn& c) {
    if (c.dropped) return;
    if (c.rank >= 0 && by_rank_[c.rank] == &c) by_rank_[c.rank] = nullptr;
    c.dropped = true;
    c.fd.reset();
  }

  void sweep() {
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                [](const std::unique_ptr<Conn>& c) { return c->dropped; }),
                 conns_.end());
  }

  const int processes_;
  const std::string rendezvous_;
  const std::string source_;
  Fd listen_, wake_read_, wake_write_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mutex stop_mutex_;
  std::optional<Status> stop_reason_;
  std::optional<Status> failure_;  // under stop_mutex_

  // The server thread's own.
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> by_rank_;
  int joined_ = 0;
  bool formed_ = false;
  bool closing_ = false;
  Clock::time_point linger_deadline_;
  std::shared_ptr<const Frame> failure_frame_;
  uint64_t round_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// The spec (public)
// ---------------------------------------------------------------------------------------------

Result<ProcessGroupSpec> process_group_spec(int flag_rank, int flag_processes,
                                            const std::string& flag_rendezvous,
                                            const std::map<std::string, std::string>& env) {
  ProcessGroupSpec spec;
  std::string rank_name, count_name;  // how the messages name the two values
  if (flag_rank != -1 || flag_processes != -1) {
    spec.source = "--rank/--processes";
    rank_name = "--rank";
    count_name = "--processes";
    if (flag_processes == -1) {
      return invalid_argument("--rank " + std::to_string(flag_rank) +
                              " needs --processes, the number of processes (machines) of the run");
    }
    if (flag_processes < 1)
      return invalid_argument("--processes is " + std::to_string(flag_processes) +
                              ": a run has at least one process");
    if (flag_rank == -1 && flag_processes > 1) {
      return invalid_argument("--processes " + std::to_string(flag_processes) +
                              " needs --rank, this process's rank (0 .. " +
                              std::to_string(flag_processes - 1) + ")");
    }
    spec.rank = flag_rank == -1 ? 0 : flag_rank;
    spec.processes = flag_processes;
  } else {
    const Launcher* launcher = nullptr;
    for (const Launcher& l : kLaunchers) {
      if (find(env, l.rank) || find(env, l.size)) {
        launcher = &l;
        break;
      }
    }
    if (!launcher) {
      spec.source = "one process (no --rank, SPILLWAY_RANK or launcher)";
      return spec;
    }
    rank_name = launcher->rank;
    count_name = launcher->size;
    spec.source = launcher->name ? std::string(launcher->name) + " (" + launcher->rank + ")"
                                 : std::string(launcher->rank);
    const std::string* rank = find(env, launcher->rank);
    const std::string* size = find(env, launcher->size);
    if (!size) {
      return invalid_argument(std::string(launcher->rank) + " is set but " + launcher->size +
                              " is not: set it to the number of processes (machines) of the run");
    }
    const auto count = parse_integer(*size);
    if (!count)
      return invalid_argument(count_name + " is '" + *size + "', not a number of processes");
    if (*count < 1 || *count > (1 << 20))
      return invalid_argument(count_name + " is " + *size + ": a run has 1 or more processes");
    spec.processes = static_cast<int>(*count);
    if (!rank) {
      if (spec.processes > 1) {
        return invalid_argument(count_name + " is set but " + rank_name +
                                " is not: set it to this process's rank (0 .. " +
                                std::to_string(spec.processes - 1) + ")");
      }
      spec.rank = 0;
    } else {
      const auto r = parse_integer(*rank);
      if (!r) return invalid_argument(rank_name + " is '" + *rank + "', not a rank");
      if (*r < 0 || *r >= spec.processes) {
        return invalid_argument(rank_name + " is " + *rank + " but " + count_name + " is " + *size +
                                ": a rank is 0 .. " + std::to_string(spec.processes - 1));
      }
      spec.rank = static_cast<int>(*r);
    }
  }
  if (spec.rank < 0 || spec.rank >= spec.processes) {
    return invalid_argument(rank_name + " is " + std::to_string(spec.rank) + " but " + count_name +
                            " is " + std::to_string(spec.processes) + ": a rank is 0 .. " +
                            std::to_string(spec.processes - 1));
  }
  if (spec.multi()) {
    SPW_ASSIGN_OR_RETURN(spec.rendezvous,
                         rendezvous_address(flag_rendezvous, env,
                                            count_name + " is " + std::to_string(spec.processes)));
  }
  return spec;
}

std::map<std::string, std::string> environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

// ---------------------------------------------------------------------------------------------
// HostGroup: this process's end
// ---------------------------------------------------------------------------------------------

struct HostGroup::Impl {
  // This process's connection first: rank 0's server waits for it to close.
  ~Impl() {
    if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
    fd.reset();
    server.reset();
  }

  ProcessGroupSpec spec;
  Fd fd;                           // the connection to the server; none in a group of one
  std::unique_ptr<Server> server;  // rank 0's
  std::atomic<bool> aborted{false};
  bool joined = false;
  Status broken;  // the first failure; every later round returns it (the rounds' thread's own)

  Status aborted_status() const {
    return io_error("the process group was aborted on process " + std::to_string(spec.rank));
  }
  std::string server_name() const { return "process 0's rendezvous server at " + spec.rendezvous; }

  // Reads exactly `n` bytes. A limit (> 0) ends a wait during which nothing arrived.
  Status read(char* p, size_t n, double idle_limit_s) {
    auto deadline = deadline_after(idle_limit_s);
    while (n > 0) {
      const ssize_t got = ::recv(fd.get(), p, n, 0);
      if (got > 0) {
        p += got;
        n -= static_cast<size_t>(got);
        deadline = deadline_after(idle_limit_s);
        continue;
      }
      if (got == 0) return closed("connection closed");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return closed(std::strerror(errno));
      pollfd pfd{fd.get(), POLLIN, 0};
      const int rc = ::poll(&pfd, 1, poll_ms(deadline));
      if (rc < 0 && errno != EINTR) return errno_status("process group: poll", errno);
      if (rc == 0 && deadline && Clock::now() >= *deadline) return silent(idle_limit_s);
    }
    return Status();
  }

  Status closed(const std::string& why) const {
    if (aborted.load()) return aborted_status();
    if (!joined)
      return io_error(server_name() + " closed the connection before the group formed (" + why +
                      ")");
    return io_error("process 0 left the group (" + why + ")");
  }
  Status silent(double limit_s) const {
    return io_error("no answer from " + server_name() + " for " +
                    seconds_text(limit_s - kServerGraceS) + " s (and " +
                    seconds_text(kServerGraceS) +
                    " s more): its machine is unreachable or stopped");
  }

  // Reads one frame's header: its type, its error code and its body's length. An error frame
  // becomes its status.
  Status read_frame(uint32_t* type, uint64_t* length, double idle_limit_s) {
    char head[kFrameHeadBytes];
    SPW_RETURN_IF_ERROR(read(head, sizeof head, idle_limit_s));
    *type = get_u32(head);
    const uint32_t code = get_u32(head + 4);
    *length = get_u64(head + 8);
    if (*type == kError) {
      if (*length > kMaxErrorBytes) return io_error("corrupt message from " + server_name());
      std::string message(*length, '\0');
      SPW_RETURN_IF_ERROR(read(message.data(), message.size(), idle_limit_s));
      const bool known = code > static_cast<uint32_t>(ErrorCode::kOk) &&
                         code <= static_cast<uint32_t>(ErrorCode::kInternal);
      return Status(known ? static_cast<ErrorCode>(code) : ErrorCode::kIo, message);
    }
    if (*type != kJoined && *type != kRound)
      return io_error("corrupt message from " + server_name() + " (frame type " +
                      std::to_string(*type) + ")");
    return Status();
  }

  Result<std::vector<std::string>> round(std::string_view mine, double timeout_s) {
    if (mine.size() > kMaxPayload)
      return invalid_argument("a payload of " + std::to_string(mine.size()) +
                              " bytes: a round carries at most 4 GiB per process");
    const double idle = timeout_s > 0 ? timeout_s + kServerGraceS : 0;
    char head[kRoundHeadBytes];
    put_u64(head, mine.size());
    put_u64(head + 8, to_ms(timeout_s));
    iovec iov[2] = {{head, sizeof head}, {const_cast<char*>(mine.data()), mine.size()}};
    size_t sent = 0;
    const size_t total = sizeof head + mine.size();
    auto deadline = deadline_after(idle);
    // Send, watching for an early answer: before every process has sent, only an error can come.
    bool answered = false;
    while (sent < total && !answered) {
      pollfd pfd{fd.get(), POLLIN | POLLOUT, 0};
      const int rc = ::poll(&pfd, 1, poll_ms(deadline));
      if (rc < 0) {
        if (errno == EINTR) continue;
        return errno_status("process group: poll", errno);
      }
      if (rc == 0) {
        if (deadline && Clock::now() >= *deadline) return silent(idle);
        continue;
      }
      if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) break;
      size_t skip = sent;
      iovec left[2];
      int n_left = 0;
      for (const iovec& v : iov) {
        if (skip >= v.iov_len) {
          skip -= v.iov_len;
          continue;
        }
        left[n_left++] = {static_cast<char*>(v.iov_base) + skip, v.iov_len - skip};
        skip = 0;
      }
      msghdr msg{};
      msg.msg_iov = left;
      msg.msg_iovlen = n_left;
      const ssize_t n = ::sendmsg(fd.get(), &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        answered = true;  // the server closed: its error may be waiting to be read
        break;
      }
      sent += static_cast<size_t>(n);
      deadline = deadline_after(idle);
    }
    uint32_t type = 0;
    uint64_t length = 0;
    SPW_RETURN_IF_ERROR(read_frame(&type, &length, idle));
    if (type != kRound || sent < total)
      return io_error("unexpected message from " + server_name() + " (a bug)");
    std::vector<std::string> all(spec.processes);
    uint64_t consumed = 0;
    for (std::string& payload : all) {
      char len[8];
      SPW_RETURN_IF_ERROR(read(len, sizeof len, idle));
      const uint64_t bytes = get_u64(len);
      consumed += 8;
      if (bytes > length - consumed || bytes > kMaxPayload)
        return io_error("corrupt round from " + server_name());
      payload.resize(bytes);
      SPW_RETURN_IF_ERROR(read(payload.data(), payload.size(), idle));
      consumed += bytes;
    }
    if (consumed != length) return io_error("corrupt round from " + server_name());
    return all;
  }
};

HostGroup::HostGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// The server (rank 0's) sees this process's connection close and tells the others.
HostGroup::~HostGroup() = default;

int HostGroup::process() const {
  return impl_->spec.rank;
}
int HostGroup::processes() const {
  return impl_->spec.processes;
}

Result<std::unique_ptr<HostGroup>> HostGroup::join(const ProcessGroupSpec& spec, double timeout_s) {
  if (spec.processes < 1 || spec.rank < 0 || spec.rank >= spec.processes) {
    return invalid_argument("process group: rank " + std::to_string(spec.rank) + " of " +
                            std::to_string(spec.processes) + " processes (from " + spec.source +
                            "): a rank is 0 .. processes - 1");
  }
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  if (!spec.multi()) return std::unique_ptr<HostGroup>(new HostGroup(std::move(impl)));

  SPW_ASSIGN_OR_RETURN(const HostPort hp,
                       parse_host_port(spec.rendezvous, "the rendezvous address"));
  const auto deadline = deadline_after(timeout_s);
  auto remaining_s = [&deadline]() -> double {
    if (!deadline) return 0;
    return std::max(0.001, std::chrono::duration<double>(*deadline - Clock::now()).count());
  };
  auto expired = [&deadline]() { return deadline && Clock::now() >= *deadline; };
  auto pause = [&deadline]() {
    auto d = std::chrono::milliseconds(200);
    if (deadline)
      d = std::min(d, std::chrono::ceil<std::chrono::milliseconds>(
                          std::max(*deadline - Clock::now(), Clock::duration::zero())));
    std::this_thread::sleep_for(d);
  };

  if (spec.rank == 0) {
    SPW_ASSIGN_OR_RETURN(impl->server,
                         Server::start(hp.port, spec.processes, spec.rendezvous, spec.source));
  }
  // From here on a failure of rank 0 stops its server (Impl's destructor), which tells the others.

  // Resolve; a resolver that is not answering yet is retried as a refused connection is.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(hp.port);
  for (;;) {
    const int rc = ::getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &found);
    if (rc == 0) break;
    if (rc != EAI_AGAIN || expired()) {
      return invalid_argument("process group: cannot resolve '" + hp.host + "' (rendezvous " +
                              spec.rendezvous + "): " + ::gai_strerror(rc) +
                              ": give the name or address of process 0's machine");
    }
    pause();
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, ::freeaddrinfo);

  // Connect, retrying until the deadline: the machines of a job start seconds apart.
  int last_error = 0;
  while (!impl->fd.valid()) {
    for (const addrinfo* a = addresses.get(); a && !impl->fd.valid(); a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd.valid()) {
        last_error = errno;
        continue;
      }
      int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        // A black-holed address takes the kernel minutes to give up on: try again sooner.
        pollfd pfd{fd.get(), POLLOUT, 0};
        const auto attempt = std::min(deadline.value_or(Clock::time_point::max()),
                                      Clock::now() + std::chrono::seconds(5));
        int prc;
        do {
          prc = ::poll(&pfd, 1, poll_ms(attempt));
        } while (prc < 0 && errno == EINTR);
        int err = ETIMEDOUT;
        socklen_t len = sizeof err;
        if (prc > 0) ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc != 0) {
        last_error = errno;
        continue;
      }
      set_no_delay(fd.get());
      impl->fd = std::move(fd);
    }
    if (impl->fd.valid()) break;
    // Rank 0's own server refuses connections only once the group has failed (its listening
    // socket closed): say why rather than wait.
    if (impl->server) {
      if (auto why = impl->server->failure()) return *why;
    }
    if (expired() && spec.rank == 0) {
      return io_error("process 0 serves the group on port " + std::to_string(hp.port) +
                      " but could not reach it at " + spec.rendezvous + " within " +
                      seconds_text(timeout_s) + " s (" + std::strerror(last_error) +
                      "): the rendezvous address must name process 0's machine");
    }
    if (expired()) {
      return io_error("process " + std::to_string(spec.rank) + " could not reach " +
                      impl->server_name() + " within " + seconds_text(timeout_s) + " s (" +
                      std::strerror(last_error) +
                      "): is process 0 running, on that machine, with this address? (ranks from " +
                      spec.source + ")");
    }
    pause();
  }

  // Hello, then wait for the others (the server enforces our timeout and names who is missing).
  char hello[kHelloBytes];
  std::memcpy(hello, kMagic, sizeof kMagic);
  put_u32(hello + 8, kVersion);
  put_u32(hello + 12, static_cast<uint32_t>(spec.rank));
  put_u32(hello + 16, static_cast<uint32_t>(spec.processes));
  put_u64(hello + 20, to_ms(timeout_s));
  put_u64(hello + 28, to_ms(deadline ? remaining_s() : 0));
  for (size_t sent = 0; sent < sizeof hello;) {
    const ssize_t n = ::send(impl->fd.get(), hello + sent, sizeof hello - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return errno_status("process group: sending to " + impl->server_name(), errno);
    pollfd pfd{impl->fd.get(), POLLOUT, 0};
    ::poll(&pfd, 1, 1000);
  }
  uint32_t type = 0;
  uint64_t length = 0;
  const double idle = deadline ? remaining_s() + kServerGraceS : 0;
  if (Status s = impl->read_frame(&type, &length, idle); !s.ok()) {
    // Rank 0's own server knows why better than a closed connection says.
    if (impl->server) {
      if (auto why = impl->server->failure()) return *why;
    }
    return s;
  }
  if (type != kJoined || length != 0)
    return io_error("unexpected message from " + impl->server_name() + " (a bug)");
  impl->joined = true;
  return std::unique_ptr<HostGroup>(new HostGroup(std::move(impl)));
}

Result<std::vector<std::string>> HostGroup::all_gather(std::string_view mine, double timeout_s) {
  Impl& g = *impl_;
  if (g.aborted.load()) return g.aborted_status();
  if (!g.broken.ok()) return g.broken;
  if (!g.spec.multi()) return std::vector<std::string>{std::string(mine)};
  auto all = g.round(mine, timeout_s);
  if (all.ok()) return all;
  g.broken = g.aborted.load() ? g.aborted_status() : all.status();
  // Out of step with the others now: leave, so that they learn it at once.
  ::shutdown(g.fd.get(), SHUT_RDWR);
  return g.broken;
}

void HostGroup::abort() {
  // shutdown() wakes a thread in poll() on the socket; the server sees this process leave.
  if (!impl_->aborted.exchange(true) && impl_->fd.valid()) ::shutdown(impl_->fd.get(), SHUT_RDWR);
}

}  // namespace spillway::compute
