// The rendezvous server (rendezvous.h): one thread, non-blocking sockets under poll(), a state
// machine per connection. A round's payloads are read into one buffer each and sent from those
// buffers to every process.
#include "compute/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace spillway::compute::rendezvous {

uint64_t to_ms(double seconds) {
  if (!(seconds > 0)) return 0;
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::min(seconds, 1e12) * 1000));
}

std::optional<Clock::time_point> deadline_after(double seconds) {
  if (!(seconds > 0)) return std::nullopt;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::min(seconds, 1e9)));
}

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

void set_no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

namespace {

// How long the server keeps a failed group's connections open, at most, so that its error reaches
// every process: a socket closed with unread input resets the connection, dropping what it had
// not sent yet, so each is closed once the peer's kernel has acknowledged everything.
constexpr double kLingerS = 2;
// How often the server looks for those acknowledgements (no poll() event says so).
constexpr auto kAckPoll = std::chrono::milliseconds(5);
// How long a connection may take to say hello before the server drops it (a stray client).
constexpr double kHelloTimeoutS = 10;

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

// The server: its thread runs run(), the only code that touches the connections; stop() and
// failure() are what other threads call.
class ServerThread final : public Server {
 public:
  ServerThread(int processes, std::string rendezvous, std::string source)
      : processes_(processes),
        rendezvous_(std::move(rendezvous)),
        source_(std::move(source)),
        by_rank_(processes, nullptr) {}

  Status open(int port) {
    SPW_RETURN_IF_ERROR(listen(port));
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0)
      return errno_status("process group: pipe", errno);
    wake_read_.reset(pipe_fds[0]);
    wake_write_.reset(pipe_fds[1]);
    thread_ = std::thread([this] { run(); });
    return Status();
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

  ~ServerThread() override { stop(io_error("process 0 left the group (connection closed)")); }

  std::optional<Status> failure() override {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    return failure_;
  }

 private:
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

Result<std::unique_ptr<Server>> Server::start(int port, int processes, std::string rendezvous,
                                              std::string source) {
  auto s = std::make_unique<ServerThread>(processes, std::move(rendezvous), std::move(source));
  SPW_RETURN_IF_ERROR(s->open(port));
  return std::unique_ptr<Server>(std::move(s));
}

}  // namespace spillway::compute::rendezvous
