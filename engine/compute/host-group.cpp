// HostGroup: the spec from flags or a launcher's environment, and each process's end of the group:
// a blocking client of the rendezvous server (rendezvous.h) that rank 0 also runs.
#include "compute/host-group.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "compute/rendezvous.h"

extern char** environ;

namespace spillway::compute {

// The wire format, its helpers and the server.
using namespace rendezvous;  // NOLINT(google-build-using-namespace): this file's other half

namespace {

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
  // Held by a round and by check(): one reader of the connection at a time. Guards `broken`.
  std::mutex io;
  Status broken;  // the first failure; every later round returns it

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
  std::lock_guard<std::mutex> lock(g.io);
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

Status HostGroup::check() {
  Impl& g = *impl_;
  std::unique_lock<std::mutex> lock(g.io, std::try_to_lock);
  if (!lock.owns_lock()) return Status();  // a round is in flight: it sees a failure itself
  if (g.aborted.load()) return g.aborted_status();
  if (!g.broken.ok()) return g.broken;
  if (!g.spec.multi()) return Status();
  pollfd pfd{g.fd.get(), POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, 0);
  } while (rc < 0 && errno == EINTR);
  if (rc <= 0) return Status();
  // Readable outside a round: the server's error frame, or the connection closed.
  uint32_t type = 0;
  uint64_t length = 0;
  Status why = g.read_frame(&type, &length, kServerGraceS);
  if (why.ok()) why = io_error("unexpected message from " + g.server_name() + " (a bug)");
  g.broken = why;
  ::shutdown(g.fd.get(), SHUT_RDWR);
  return g.broken;
}

void HostGroup::abort() {
  // shutdown() wakes a thread in poll() on the socket; the server sees this process leave.
  if (!impl_->aborted.exchange(true) && impl_->fd.valid()) ::shutdown(impl_->fd.get(), SHUT_RDWR);
}

}  // namespace spillway::compute
