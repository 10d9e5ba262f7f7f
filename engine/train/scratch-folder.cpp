#include "train/scratch-folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include "core/file-util.h"

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

// The SSD store's files (tiers/ssd-store.h: `<group>.blk` and its `<group>.crc`, and a
// write_file_atomic temporary of either), and the folder's marker.
bool is_scratch_file(const std::string& name) {
  // The marker's own temporary too: a kill while an earlier build wrote it left one.
  static const std::regex ours(R"((.+\.(blk|crc)|spillway-scratch)(\.tmp\.\d+)?)");
  return name == kScratchMarker || std::regex_match(name, ours);
}

// What ScratchFolder::create writes into the lock file before it makes the folder: a kill between
// making the folder and marking it leaves a folder without its marker, which this text still
// vouches for (a lock file of another's, empty or not, does not).
constexpr char kLockText[] = "spillway-scratch\n";

bool lock_vouches(int fd) {
  char buf[sizeof(kLockText)] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  return n == static_cast<ssize_t>(sizeof(kLockText) - 1) && std::strcmp(buf, kLockText) == 0;
}

// Removes the files of a scratch folder that Spillway wrote, then the folder when nothing else is
// left in it. A folder without the marker, whose lock file does not vouch for it either, is not
// Spillway's and is not touched. True when the folder is gone (or was never made).
bool remove_scratch_contents(const std::string& path, bool vouched) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return true;
  if (!vouched && !fs::exists(fs::path(path) / kScratchMarker, ec)) return false;
  bool foreign = false;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kScratchMarker) continue;  // last: while anything stays, the folder is marked
    std::error_code type_ec;
    if (e.symlink_status(type_ec).type() == fs::file_type::directory || !is_scratch_file(name)) {
      foreign = true;
      continue;
    }
    std::error_code rm;
    fs::remove(e.path(), rm);
    foreign |= static_cast<bool>(rm);
  }
  if (foreign) return false;
  fs::remove(fs::path(path) / kScratchMarker, ec);
  return fs::remove(path, ec);
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
    // Only a folder Spillway marked, and in it only the SSD store's files; the lock file goes
    // with the folder (one left holding a user's file keeps its lock file, and is looked at
    // again by the next run).
    const bool gone = remove_scratch_contents(
        (e.path().parent_path() / file.substr(0, file.size() - 5)).string(), lock_vouches(fd));
    if (gone)
      ::unlink(e.path().c_str());  // while still locked: a late locker sees nlink 0 and retries
    ::close(fd);
    removed += gone;
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
  // Made here, and marked: only a folder this created is ever emptied. One that is there already
  // (a name no run should have) is not Spillway's to use. The lock file vouches for the folder
  // before it exists, so that a kill before the marker is written leaves nothing unclaimed.
  if (!fs::exists(path, ec) &&
      (::ftruncate(fd, 0) != 0 ||
       ::pwrite(fd, kLockText, sizeof(kLockText) - 1, 0) != sizeof(kLockText) - 1)) {
    const int err = errno;
    ::unlink(lock.c_str());
    ::close(fd);
    return errno_status("cannot write " + lock, err);
  }
  const bool made = fs::create_directory(path, ec);
  // An empty file made in one call: no temporary of its own that a kill could leave behind.
  Status marked;
  if (made) {
    const std::string marker = (fs::path(path) / kScratchMarker).string();
    const int mfd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (mfd < 0)
      marked = errno_status("cannot create " + marker, errno);
    else
      ::close(mfd);
  }
  if (ec || !made || !marked.ok()) {
    ::unlink(lock.c_str());
    ::close(fd);
    if (ec) return io_error("cannot create " + path + ": " + ec.message());
    if (!made)
      return io_error(path + " exists already and is not this run's: move it away and try again");
    return marked.with_context("cannot mark the scratch folder " + path);
  }
  return std::unique_ptr<ScratchFolder>(new ScratchFolder(path, fd));
}

ScratchFolder::~ScratchFolder() {
  if (remove_scratch_contents(path_, /*vouched=*/true)) ::unlink((path_ + ".lock").c_str());
  ::close(lock_fd_);
}

}  // namespace spillway
