// StorageEnv, BlockFile and IoQueue: the operating-system surface under the SSD store, kept behind
// small interfaces (leveldb's Env) so that tests can swap in a fault-injecting implementation
// (fault-env.h) while the store's checksum, retry and error paths run unchanged.
//
// The real implementation, StorageEnv::posix(), creates files with fallocate, opens them with
// O_DIRECT (falling back to buffered I/O with a logged warning where the filesystem refuses it) and
// moves bytes through io_uring (liburing). Ownership: every object returned is owned by the caller
// (unique_ptr, RAII: files close their descriptor, queues tear down their ring). Thread-safety: a
// StorageEnv is safe from any thread; a BlockFile's sync() and an IoQueue's wake() may be called
// from any thread, but submit() and wait() belong to one thread at a time (the store's I/O thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace spillway {

// One open file of the SSD tier.
class BlockFile {
 public:
  virtual ~BlockFile() = default;
  virtual const std::string& path() const = 0;
  virtual int fd() const = 0;
  // True when opened with O_DIRECT: then every offset, length and buffer address of an I/O must be
  // a multiple of 4096.
  virtual bool direct() const = 0;
  // fdatasync: bytes written before this call are on the device when it returns ok.
  virtual Status sync() = 0;
};

enum class IoKind { kRead, kWrite };

// One positional read or write. `buf` and the file must stay valid until the op's completion.
struct IoOp {
  IoKind kind = IoKind::kRead;
  BlockFile* file = nullptr;
  uint64_t offset = 0;  // bytes into the file
  void* buf = nullptr;
  uint32_t bytes = 0;
  uint64_t tag = 0;  // returned with the completion
};

struct IoCompletion {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes transferred (may be short), or -errno
};

// An asynchronous submission and completion queue (io_uring for the real env).
class IoQueue {
 public:
  virtual ~IoQueue() = default;
  // Queues `op`; it reaches the kernel at the next wait(). At most depth() ops may be outstanding.
  virtual Status submit(const IoOp& op) = 0;
  // Sends queued ops, then appends finished ones to `out`. With `block`, returns only once at least
  // one op has finished or wake() was called (a wake adds nothing to `out`).
  virtual Status wait(std::vector<IoCompletion>* out, bool block) = 0;
  // Makes a blocked (or the next) wait() return. Safe from any thread.
  virtual void wake() = 0;
  virtual unsigned depth() const = 0;
};

class StorageEnv {
 public:
  virtual ~StorageEnv() = default;
  // Creates `path` (truncating an old file) and reserves `bytes` on disk with fallocate, so that a
  // full disk fails here, not in the middle of a step. `direct`: ask for O_DIRECT. kNoSpace (from
  // ENOSPC) when the disk cannot hold it; the partial file is removed.
  virtual Result<std::unique_ptr<BlockFile>> create_block_file(const std::string& path,
                                                               uint64_t bytes, bool direct) = 0;
  // Opens an existing file for reading and writing. kNotFound when it does not exist.
  virtual Result<std::unique_ptr<BlockFile>> open_block_file(const std::string& path,
                                                             bool direct) = 0;
  // A queue for up to `depth` outstanding ops.
  virtual Result<std::unique_ptr<IoQueue>> new_io_queue(unsigned depth) = 0;
  // Bytes an unprivileged user may still write on the filesystem holding `folder` (statvfs
  // f_bavail).
  virtual Result<uint64_t> free_bytes(const std::string& folder) = 0;
  // Size in bytes of the file at `path`.
  virtual Result<uint64_t> file_size(const std::string& path) = 0;

  // The real env: POSIX files, fallocate, O_DIRECT, io_uring. Process-wide, never destroyed.
  static StorageEnv* posix();
};

}  // namespace spillway
