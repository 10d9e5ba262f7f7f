// FaultInjectingEnv: a StorageEnv that forwards to a real one and breaks chosen operations, for
// tests of the SSD store's error paths (leveldb's fault_injection_test). Each fault is one a real
// disk produces: a write that transfers fewer bytes than asked, EIO on the n-th operation, ENOSPC
// on pre-allocation or on a write, a byte that comes back flipped from a read, a filesystem that
// refuses O_DIRECT.
//
// Operations are counted from 0 in submission order, across every queue of this env: `op` counts
// reads and writes together, `write`/`read` count one kind. Thread-safety: the counters are atomic;
// set_plan() must not race with I/O. Ownership: the base env is borrowed and must outlive this one,
// and every file and queue made by it.
#pragma once

#include <atomic>
#include <cstdint>

#include "tiers/storage-env.h"

namespace spillway {

struct FaultPlan {
  int64_t eio_on_op = -1;  // this op completes with -EIO and transfers nothing
  int64_t short_write_on_write =
      -1;                          // this write transfers half its bytes (4096-aligned) and says so
  int64_t enospc_from_write = -1;  // this write and every later one fail with -ENOSPC
  int64_t flip_byte_on_read = -1;  // this read returns its data with one byte inverted
  bool enospc_on_create = false;   // create_block_file fails as fallocate does on a full disk
  bool refuse_direct_io = false;   // opening with O_DIRECT fails with EINVAL (old tmpfs)
  uint64_t free_bytes_override = 0;  // non-zero: free_bytes() reports this instead of statvfs
};

class FaultInjectingEnv final : public StorageEnv {
 public:
  explicit FaultInjectingEnv(StorageEnv* base = StorageEnv::posix()) : base_(base) {}

  void set_plan(const FaultPlan& plan) { plan_ = plan; }
  const FaultPlan& plan() const { return plan_; }
  // Ops seen so far (submitted through any queue of this env).
  int64_t ops() const { return ops_.load(); }
  int64_t writes() const { return writes_.load(); }
  int64_t reads() const { return reads_.load(); }

  Result<std::unique_ptr<BlockFile>> create_block_file(const std::string& path, uint64_t bytes,
                                                       bool direct) override;
  Result<std::unique_ptr<BlockFile>> open_block_file(const std::string& path, bool direct) override;
  Result<std::unique_ptr<IoQueue>> new_io_queue(unsigned depth) override;
  Result<uint64_t> free_bytes(const std::string& folder) override;
  Result<uint64_t> file_size(const std::string& path) override { return base_->file_size(path); }

 private:
  friend class FaultInjectingQueue;
  StorageEnv* base_;
  FaultPlan plan_;
  std::atomic<int64_t> ops_{0}, writes_{0}, reads_{0};
};

}  // namespace spillway
