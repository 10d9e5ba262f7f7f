// SsdStore: the SSD tier. One pre-allocated file per tensor group (a layer's master weights, its
// Adam moments, a checkpoint) under a folder the user picks, read and written asynchronously
// through io_uring with O_DIRECT, every block checksummed.
//
// Shaped like DeepSpeed's aio handle (STYLE.md 9): a config struct (block size, queue depth, direct
// I/O), read_async/write_async that return a request id at once, and wait(id)/wait_all(). A request
// is split into blocks of `block_bytes`; at most `queue_depth` blocks are in flight. A dedicated
// I/O thread owns the queue, so transfers progress while the caller computes, without polling.
//
// Integrity: each block has a CRC-32C kept in a sidecar file `<group>.crc` next to `<group>.blk`.
// A write computes the block's CRC, a read verifies it; a mismatch is kCorrupt naming the file and
// the block. Writes that cover part of a block read, verify and patch it first (read-modify-write),
// so the checksum always covers a whole block. Blocks past a group's end are zero padding.
// flush() makes everything written so far durable, data and checksums together: call it before
// recording a checkpoint as complete.
//
// Buffers: data moves to and from the caller's memory without a copy when the caller's pointer is
// 4096-byte aligned (HostPool regions are) and the piece is a whole block; otherwise through one of
// `queue_depth` aligned staging buffers. The caller's buffer must stay valid and unchanged until
// its request has been waited for.
//
// Accounting: a group's file bytes count as held on Tier::kSsd under its category while the group
// is open; bytes moved to and from the device count on Link::kSsdWrite / Link::kSsdRead.
//
// Thread-safety: every method may be called from any thread. A request id is waited for once
// (wait() or wait_all(), which consumes every outstanding id). Ownership: the store owns its files,
// queue and I/O thread; destruction finishes every outstanding request and writes the checksums
// (without fsync: call flush() for durability). The env and counters are borrowed and must outlive
// the store.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "telemetry/counters.h"
#include "tiers/storage-env.h"

namespace spillway {

struct SsdConfig {
  std::string folder;  // created if missing
  size_t block_bytes =
      size_t{1} << 20;        // I/O and checksum unit: a multiple of 4096, at most 64 MiB
  unsigned queue_depth = 32;  // blocks in flight (1..1024)
  bool use_direct_io = true;  // O_DIRECT where the filesystem allows it
};

using SsdRequestId = uint64_t;

class SsdStore {
 public:
  // Opens (creating the folder if needed) a store. kInvalidArgument for a bad config; kIo when the
  // folder cannot be made or io_uring is unavailable. `counters` may be null.
  static Result<std::unique_ptr<SsdStore>> open(const SsdConfig& config,
                                                TierCounters* counters = nullptr,
                                                StorageEnv* env = StorageEnv::posix());
  ~SsdStore();
  SsdStore(const SsdStore&) = delete;
  SsdStore& operator=(const SsdStore&) = delete;

  // Creates group `group` ([A-Za-z0-9._-], as a file name) of `bytes` bytes, pre-allocated on disk
  // (an old file of that name is replaced) and reading as zeros. kNoSpace names the folder, the
  // bytes needed and the bytes free; kInvalidArgument when the group is already open in this store.
  Status create_group(const std::string& group, uint64_t bytes, Category category);
  // Opens a group written by an earlier store over the same folder (resume). kNotFound when its
  // file or sidecar is missing; kCorrupt when the sidecar is damaged or was written with another
  // block size.
  Status open_group(const std::string& group, Category category);
  // Closes the group and deletes its files. kInvalidArgument while it has requests in flight.
  Status remove_group(const std::string& group);
  bool has_group(const std::string& group) const;
  // The group's size in bytes as created (kNotFound when not open).
  Result<uint64_t> group_bytes(const std::string& group) const;
  // `<folder>/<group>.blk`: the data file (its checksums are in `<folder>/<group>.crc`).
  std::string group_path(const std::string& group) const;

  // Reads bytes [offset, offset + bytes) of `group` into `dst` / writes them from `src`. Returns at
  // once with an id for wait(). kInvalidArgument (nothing queued) for an unknown group or a range
  // past the group's end. Errors of the transfer itself (kIo, kNoSpace, kCorrupt) come from wait().
  Result<SsdRequestId> read_async(const std::string& group, uint64_t offset, void* dst,
                                  size_t bytes);
  Result<SsdRequestId> write_async(const std::string& group, uint64_t offset, const void* src,
                                   size_t bytes);
  // Blocks until request `id` has finished; its first error, or ok. kInvalidArgument for an unknown
  // (or already waited) id.
  Status wait(SsdRequestId id);
  // Waits for every outstanding request; the first error among them, or ok.
  Status wait_all();
  // wait_all(), then fdatasync every group file and write every changed checksum sidecar
  // atomically. After it returns ok, what was written survives a crash and verifies on the next
  // open_group().
  Status flush();

  const SsdConfig& config() const { return config_; }
  // False when the filesystem refused O_DIRECT and the store fell back to buffered I/O.
  bool direct_io() const;

 private:
  struct Group;
  struct BlockOp;
  struct Request {
    size_t ops_left = 0;
    Status status;
  };

  SsdStore(SsdConfig config, TierCounters* counters, StorageEnv* env);
  Status start();
  Result<SsdRequestId> enqueue(bool write, const std::string& group, uint64_t offset, char* user,
                               size_t bytes);
  void io_loop();
  void pick_startable_locked(std::vector<BlockOp*>* out);
  // Fills the staging buffer (writes) and submits one started op; called outside the lock.
  Status submit_op(BlockOp* op);
  void on_completion(BlockOp* op, int64_t result);
  void finish_op_locked(BlockOp* op, Status status);
  // Refuses a name already open; warns once when the file fell back to buffered I/O.
  Status check_file(const Group& g, const BlockFile& f);

  SsdConfig config_;
  TierCounters* counters_;
  StorageEnv* env_;
  std::unique_ptr<IoQueue> queue_;
  std::vector<AlignedBuffer> staging_;  // [queue_depth][block_bytes]
  uint32_t zero_block_crc_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  std::map<std::string, std::shared_ptr<Group>> groups_;
  std::unordered_map<SsdRequestId, Request> requests_;
  size_t requests_open_ = 0;  // requests with ops_left > 0
  SsdRequestId next_id_ = 1;
  std::list<std::unique_ptr<BlockOp>> pending_;                      // not yet started, FIFO
  std::unordered_map<uint64_t, std::unique_ptr<BlockOp>> inflight_;  // tag -> op
  std::set<std::pair<const Group*, uint64_t>> busy_blocks_;          // blocks with an op in flight
  std::vector<unsigned> free_slots_;
  uint64_t next_tag_ = 1;
  bool stop_ = false;
  bool warned_buffered_ = false;
  std::thread io_thread_;
};

}  // namespace spillway
