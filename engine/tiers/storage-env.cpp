#include "tiers/storage-env.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "tiers/byte-size.h"

namespace spillway {
namespace {

class PosixBlockFile final : public BlockFile {
 public:
  PosixBlockFile(std::string path, int fd, bool direct)
      : path_(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixBlockFile() override { ::close(fd_); }
  PosixBlockFile(const PosixBlockFile&) = delete;
  PosixBlockFile& operator=(const PosixBlockFile&) = delete;

  const std::string& path() const override { return path_; }
  int fd() const override { return fd_; }
  bool direct() const override { return direct_; }
  Status sync() override {
    if (::fdatasync(fd_) != 0) return errno_status("fdatasync " + path_, errno);
    return Status();
  }

 private:
  std::string path_;
  int fd_;
  bool direct_;
};

Result<std::unique_ptr<BlockFile>> open_file(const std::string& path, int flags, bool direct) {
  int fd = -1;
  bool is_direct = false;
  if (direct) {
    fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      is_direct = true;
    } else if (errno == EINVAL || errno == EOPNOTSUPP) {
      // The filesystem refuses O_DIRECT; the file opens buffered and reports direct() == false,
      // which the store turns into one warning per store.
      log_debug("O_DIRECT refused for " + path + ": " + std::strerror(errno));
    } else {
      return errno_status("open " + path, errno);
    }
  }
  if (fd < 0) fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("open " + path, errno);
  return std::unique_ptr<BlockFile>(new PosixBlockFile(path, fd, is_direct));
}

constexpr uint64_t kWakeTag = ~uint64_t{0};

class UringQueue final : public IoQueue {
 public:
  UringQueue() = default;
  ~UringQueue() override {
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (event_fd_ >= 0) ::close(event_fd_);
  }
  UringQueue(const UringQueue&) = delete;
  UringQueue& operator=(const UringQueue&) = delete;

  Status init(unsigned depth) {
    depth_ = depth;
    // One extra entry for the eventfd read that wake() completes.
    int rc = io_uring_queue_init(depth + 1, &ring_, 0);
    if (rc < 0)
      return errno_status("io_uring_queue_init (depth " + std::to_string(depth) + ")", -rc);
    ring_ok_ = true;
    event_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (event_fd_ < 0) return errno_status("eventfd", errno);
    return arm_wake();
  }

  Status submit(const IoOp& op) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    if (!sqe)
      return internal_error("io_uring submission queue full (more than depth ops outstanding)");
    if (op.kind == IoKind::kRead) {
      io_uring_prep_read(sqe, op.file->fd(), op.buf, op.bytes, op.offset);
    } else {
      io_uring_prep_write(sqe, op.file->fd(), op.buf, op.bytes, op.offset);
    }
    io_uring_sqe_set_data64(sqe, op.tag);
    return Status();
  }

  Status wait(std::vector<IoCompletion>* out, bool block) override {
    int rc;
    do {
      rc = block ? io_uring_submit_and_wait(&ring_, 1) : io_uring_submit(&ring_);
    } while (rc == -EINTR);
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) return errno_status("io_uring_submit", -rc);
    io_uring_cqe* cqe = nullptr;
    unsigned head, seen = 0;
    bool rearm = false;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == kWakeTag) {
        rearm = true;
      } else {
        out->push_back({tag, cqe->res});
      }
    }
    io_uring_cq_advance(&ring_, seen);
    if (rearm) return arm_wake();
    return Status();
  }

  void wake() override {
    uint64_t one = 1;
    ssize_t n = ::write(event_fd_, &one, sizeof one);
    (void)n;  // an eventfd write only fails when the counter would overflow: already woken
  }

  unsigned depth() const override { return depth_; }

 private:
  Status arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    if (!sqe) return internal_error("io_uring: no submission entry for the wake-up read");
    io_uring_prep_read(sqe, event_fd_, &wake_value_, sizeof wake_value_, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
    return Status();
  }

  io_uring ring_{};
  bool ring_ok_ = false;
  int event_fd_ = -1;
  uint64_t wake_value_ = 0;
  unsigned depth_ = 0;
};

class PosixEnv final : public StorageEnv {
 public:
  Result<std::unique_ptr<BlockFile>> create_block_file(const std::string& path, uint64_t bytes,
                                                       bool direct) override {
    SPW_ASSIGN_OR_RETURN(std::unique_ptr<BlockFile> f,
                         open_file(path, O_RDWR | O_CREAT | O_TRUNC, direct));
    if (bytes > 0) {
      int rc = ::posix_fallocate(f->fd(), 0, static_cast<off_t>(bytes));
      if (rc == EOPNOTSUPP || rc == EINVAL) {
        // Filesystems without fallocate: size the file; space is then claimed on first write.
        log_debug("fallocate unsupported for " + path + "; using ftruncate");
        rc = ::ftruncate(f->fd(), static_cast<off_t>(bytes)) == 0 ? 0 : errno;
      }
      if (rc != 0) {
        f.reset();
        ::unlink(path.c_str());
        return errno_status("fallocate " + format_bytes(bytes) + " for " + path, rc);
      }
    }
    return f;
  }

  Result<std::unique_ptr<BlockFile>> open_block_file(const std::string& path,
                                                     bool direct) override {
    return open_file(path, O_RDWR, direct);
  }

  Result<std::unique_ptr<IoQueue>> new_io_queue(unsigned depth) override {
    auto q = std::make_unique<UringQueue>();
    SPW_RETURN_IF_ERROR(q->init(depth));
    return std::unique_ptr<IoQueue>(std::move(q));
  }

  Result<uint64_t> free_bytes(const std::string& folder) override {
    struct statvfs st {};
    if (::statvfs(folder.c_str(), &st) != 0) return errno_status("statvfs " + folder, errno);
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }

  Result<uint64_t> file_size(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return errno_status("stat " + path, errno);
    return static_cast<uint64_t>(st.st_size);
  }
};

}  // namespace

StorageEnv* StorageEnv::posix() {
  static PosixEnv* env = new PosixEnv();  // never destroyed: outlives every store, even static ones
  return env;
}

}  // namespace spillway
