#include "core/file-util.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/crc32c.h"
#include "core/fail-point.h"

namespace spillway {

namespace {

// Reads the regular file `path` in pieces of up to `chunk` bytes: `opened` with its size first,
// then `piece` for each piece in order. The errors are read_file's.
Status read_in_pieces(const std::string& path, size_t chunk,
                      const std::function<void(uint64_t size)>& opened,
                      const std::function<void(const char* data, size_t n)>& piece) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever (a FIFO named
  // config.json hung the worker); only regular files are read, so a FIFO or a device such as
  // /dev/zero (which never ends) is an error instead.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno_status("cannot open " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    return invalid_argument(path + (dir ? " is a folder, not a file"
                                        : " is not a regular file (a FIFO, socket or device)"));
  }
  opened(static_cast<uint64_t>(st.st_size));
  std::vector<char> buf(chunk);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return errno_status("cannot read " + path, err);
    }
    if (n == 0) break;
    piece(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return Status();
}

}  // namespace

Result<std::string> read_file(const std::string& path) {
  std::string out;
  SPW_RETURN_IF_ERROR(read_in_pieces(
      path, size_t{1} << 16, [&](uint64_t size) { out.reserve(static_cast<size_t>(size)); },
      [&](const char* data, size_t n) { out.append(data, n); }));
  return out;
}

Status write_all(int fd, const void* data, size_t size, const std::string& path) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot write " + path, errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status();
}

Status fsync_directory(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open directory " + dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return errno_status("cannot fsync directory " + dir, err);
  return Status();
}

Status write_file_atomic_stream(
    const std::string& path,
    const std::function<Status(const std::function<Status(const void*, size_t)>&)>& produce,
    FileDigests* digests) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("cannot create " + tmp, errno);
  FileDigest digest{path, 0, 0};
  Status st = produce([&](const void* d, size_t n) {
    if (digests) digest.crc32c = crc32c_extend(digest.crc32c, d, n);
    digest.bytes += n;
    return write_all(fd, d, n, tmp);
  });
  if (st.ok() && ::fsync(fd) != 0) st = errno_status("cannot fsync " + tmp, errno);
  if (::close(fd) != 0 && st.ok()) st = errno_status("cannot close " + tmp, errno);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = errno_status("cannot rename " + tmp + " to " + path, errno);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  SPW_RETURN_IF_ERROR(fsync_directory(std::filesystem::path(path).parent_path().string()));
  if (digests) digests->push_back(std::move(digest));
  return Status();
}

namespace {

// Removes `<name>.tmp-<pid>` siblings of `dir` left by writers that died (SIGKILL, power loss)
// before their folder was swapped in: each is a half-written folder, or after a swap the version
// it replaced, never the only copy of anything. Only those holding kPartialFolderMarker, which
// write_folder_atomic puts in each it makes, are Spillway's.
void remove_dead_folder_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path target(dir);
  const std::string prefix = target.filename().string() + ".tmp-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(
           target.parent_path().empty() ? fs::path(".") : target.parent_path(), ec)) {
    const std::string n = e.path().filename().string();
    if (!n.starts_with(prefix)) continue;
    char* end = nullptr;
    const long pid = std::strtol(n.c_str() + prefix.size(), &end, 10);
    if (*end != '\0' || !fs::exists(e.path() / kPartialFolderMarker, ec)) continue;
    if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignore;
      fs::remove_all(e.path(), ignore);
    }
  }
}

// Marks `tmp` as a temporary folder of this writer (see remove_dead_folder_temporaries).
Status mark_partial(const std::string& tmp) {
  const std::string marker = (std::filesystem::path(tmp) / kPartialFolderMarker).string();
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("cannot create " + marker, errno);
  ::close(fd);
  return Status();
}

}  // namespace

Status write_folder_atomic(const std::string& dir,
                           const std::function<Status(const std::string& tmp)>& fill,
                           const std::function<Status(const std::string& dir)>& may_replace) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto check = [&]() -> Status {
    std::error_code exists_ec;
    const bool there = fs::exists(fs::symlink_status(dir, exists_ec));  // a dangling link too
    return may_replace && there ? may_replace(dir) : Status();
  };
  SPW_RETURN_IF_ERROR(check());
  remove_dead_folder_temporaries(dir);
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  // A folder of this name from an earlier write_folder_atomic of this process (the same pid can
  // come back after a reboot) is ours only with the marker; anything else there is refused.
  if (fs::exists(tmp, ec)) {
    if (!fs::exists(fs::path(tmp) / kPartialFolderMarker, ec))
      return io_error(tmp + " exists and is not Spillway's: move it away and try again");
    fs::remove_all(tmp, ec);
  }
  fs::create_directories(tmp, ec);
  if (ec) return io_error("cannot create " + tmp + ": " + ec.message());
  Status st = mark_partial(tmp);
  if (st.ok()) st = fill(tmp);
  if (st.ok()) st = check();
  if (st.ok() && ::unlink((fs::path(tmp) / kPartialFolderMarker).c_str()) != 0)
    st = errno_status("cannot remove " + tmp + "/" + kPartialFolderMarker, errno);
  if (st.ok()) {
    // The finished folder takes `dir`'s place in one step (RENAME_EXCHANGE), so that at every
    // instant `dir` holds one whole version: removing the old one first left a moment in which a
    // kill lost both. The old version is marked first, so that under `tmp` after the swap it is
    // removed, here or (after a kill) by the next writer.
    if (fs::exists(dir, ec) && mark_partial(dir).ok() &&
        ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      (void)fail_point("folder.replace");
      st = fsync_directory(fs::path(dir).parent_path().string());
      fs::remove_all(tmp, ec);
      return st;
    }
    // No `dir` yet, or a filesystem without RENAME_EXCHANGE: the old one goes first.
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
    if (ec) st = io_error("cannot rename " + tmp + " to " + dir + ": " + ec.message());
  }
  if (!st.ok()) {
    fs::remove_all(tmp, ec);
    return st;
  }
  return fsync_directory(fs::path(dir).parent_path().string());
}

Status write_file_atomic(const std::string& path, std::string_view data, FileDigests* digests) {
  return write_file_atomic_stream(
      path, [&](const auto& write) { return write(data.data(), data.size()); }, digests);
}

Result<FileDigest> digest_file(const std::string& path) {
  FileDigest d{path, 0, 0};
  SPW_RETURN_IF_ERROR(read_in_pieces(
      path, size_t{4} << 20, [](uint64_t) {},
      [&](const char* data, size_t n) {
        d.crc32c = crc32c_extend(d.crc32c, data, n);
        d.bytes += n;
      }));
  return d;
}

MappedFile::~MappedFile() {
  reset();
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

void MappedFile::reset() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errno_status("cannot stat " + path, err);
  }
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      m.size_ = 0;
      return errno_status("cannot map " + path, err);
    }
    m.data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

}  // namespace spillway
