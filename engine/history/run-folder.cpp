#include "history/run-folder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <utility>

#include "history/run-store.h"

namespace spillway {
namespace fs = std::filesystem;

namespace {

fs::path folder_key(const std::string& path) {
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  if (ec) abs = path;
  fs::path canon = fs::weakly_canonical(abs, ec);
  fs::path key = (ec ? abs : canon).lexically_normal();
  // "a/b/" and "a/b" are one folder.
  if (!key.has_filename() && key.has_parent_path() && key != key.root_path())
    key = key.parent_path();
  return key;
}

}  // namespace

std::string run_folder(const std::string& runs_dir, const std::string& run_id) {
  return (fs::path(runs_dir) / run_id).string();
}

Result<std::string> default_run_folder(const std::string& run_id) {
  SPW_ASSIGN_OR_RETURN(std::string runs, RunStore::default_runs_dir());
  return run_folder(runs, run_id);
}

std::string run_folder_of_checkpoint(const std::string& checkpoint_dir) {
  if (checkpoint_dir.empty()) return {};
  std::error_code ec;
  fs::path p = fs::absolute(checkpoint_dir, ec).lexically_normal();
  if (ec) return {};
  if (!p.has_filename()) p = p.parent_path();  // "step-000003/"
  const fs::path parent = p.parent_path();
  if (parent.filename() != kRunCheckpointsDir || !p.filename().string().starts_with("step-"))
    return {};
  return parent.parent_path().string();
}

bool same_folder(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  return folder_key(a) == folder_key(b);
}

std::string run_checkpoints_dir(const std::string& run_dir) {
  return (fs::path(run_dir) / kRunCheckpointsDir).string();
}

Result<std::string> set_aside_checkpoints_after(const std::string& run_dir, long long step) {
  std::vector<std::string> later;
  for (const std::string& dir : list_run_checkpoints(run_dir)) {
    const std::string digits = fs::path(dir).filename().string().substr(5);  // "step-NNNNNN"
    long long n = 0;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (err != std::errc() || end != digits.data() + digits.size()) continue;  // not the trainer's
    if (n > step) later.push_back(dir);
  }
  if (later.empty()) return std::string();
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  fs::path aside = fs::path(run_checkpoints_dir(run_dir)) / (std::string("replaced-") + stamp);
  std::error_code ec;
  for (int i = 2; fs::exists(aside, ec); ++i)  // two resumes in one second
    aside = fs::path(run_checkpoints_dir(run_dir)) /
            ("replaced-" + std::string(stamp) + "-" + std::to_string(i));
  fs::create_directories(aside, ec);
  if (ec) return io_error("cannot make " + aside.string() + ": " + ec.message());
  for (const std::string& dir : later) {
    fs::rename(dir, aside / fs::path(dir).filename(), ec);
    if (ec) return io_error("cannot move " + dir + " into " + aside.string() + ": " + ec.message());
  }
  return aside.string();
}

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory(ec) && n.starts_with("step-") && n.find(".tmp") == std::string::npos)
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int remove_unfinished_checkpoints(const std::string& checkpoints_dir, bool lock_held) {
  int removed = 0;
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string n = e.path().filename().string();
    const size_t at = n.find(".tmp-");
    if (!n.starts_with("step-") || at == std::string::npos || !e.is_directory(ec) ||
        e.is_symlink(ec))
      continue;
    const long pid = std::strtol(n.c_str() + at + 5, nullptr, 10);
    if (lock_held || pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))
      doomed.push_back(e.path());
  }
  for (const fs::path& p : doomed) {
    std::error_code rm;
    fs::remove_all(p, rm);
    removed += rm ? 0 : 1;
  }
  return removed;
}

int remove_unfinished_checkpoints_if_idle(const std::string& run_dir) {
  auto lock = RunFolderLock::acquire(run_dir);
  if (!lock.ok()) return 0;
  return remove_unfinished_checkpoints(run_checkpoints_dir(run_dir), /*lock_held=*/true);
}

Result<RunFolderLock> RunFolderLock::acquire(const std::string& run_dir) {
  const int fd = ::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open the run folder " + run_dir, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      return invalid_argument("the run folder " + run_dir + " is in use by another worker");
    return errno_status("cannot lock the run folder " + run_dir, err);
  }
  return RunFolderLock(fd);
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

RunFolderLock::RunFolderLock(RunFolderLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

RunFolderLock& RunFolderLock::operator=(RunFolderLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

}  // namespace spillway
