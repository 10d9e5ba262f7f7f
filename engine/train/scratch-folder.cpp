#include "train/scratch-folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace spillway {
namespace fs = std::filesystem;

namespace {

// Opens `path` and takes its lock without waiting. Returns the descriptor, -1 when another process
// holds the lock (or the file cannot be opened), or -2 when the file vanished while we locked it
// (a remover won the race; the caller may retry with a fresh file).
int try_lock(const std::string& path, bool create) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_nlink == 0) {
    ::close(fd);
    return -2;
  }
  return fd;
}

}  // namespace

int remove_orphaned_scratch(const std::string& parent, const std::string& prefix) {
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string file = e.path().filename().string();
    if (!file.starts_with(prefix) || !file.ends_with(".lock")) continue;
    const int fd = try_lock(e.path().string(), /*create=*/false);
    if (fd < 0) continue;  // alive (or already being removed)
    std::error_code ignore;
    fs::remove_all(e.path().parent_path() / file.substr(0, file.size() - 5), ignore);
    ::unlink(e.path().c_str());  // while still locked: a late locker sees nlink 0 and retries
    ::close(fd);
    ++removed;
  }
  return removed;
}

Result<std::unique_ptr<ScratchFolder>> ScratchFolder::create(const std::string& parent,
                                                             const std::string& name,
                                                             const std::string& orphan_prefix) {
  if (name.empty() || name.find('/') != std::string::npos)
    return invalid_argument("scratch folder name '" + name + "' must be a plain file name");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return io_error("cannot create " + parent + ": " + ec.message());
  const std::string path = (fs::path(parent) / name).string();
  const std::string lock = path + ".lock";
  int fd = -2;
  for (int attempt = 0; attempt < 3 && fd == -2; ++attempt) fd = try_lock(lock, /*create=*/true);
  if (fd < 0)
    return io_error("cannot lock " + lock + ": " +
                    (errno ? std::strerror(errno) : "held by another process"));
  if (!orphan_prefix.empty())
    remove_orphaned_scratch(parent, orphan_prefix);  // skips ours: we hold it
  fs::create_directories(path, ec);
  if (ec) {
    ::unlink(lock.c_str());
    ::close(fd);
    return io_error("cannot create " + path + ": " + ec.message());
  }
  return std::unique_ptr<ScratchFolder>(new ScratchFolder(path, fd));
}

ScratchFolder::~ScratchFolder() {
  std::error_code ignore;
  fs::remove_all(path_, ignore);
  ::unlink((path_ + ".lock").c_str());
  ::close(lock_fd_);
}

}  // namespace spillway
