#include "tiers/ssd-store.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/crc32c.h"
#include "core/file-util.h"
#include "core/log.h"
#include "tiers/byte-size.h"

namespace spillway {

namespace {

constexpr size_t kDirectAlign = 4096;
constexpr char kSidecarMagic[8] = {'S', 'P', 'W', 'C', 'R', 'C', '1', '\n'};
constexpr uint32_t kSidecarVersion = 1;

bool valid_group_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08" PRIx32, v);
  return buf;
}

template <typename T>
void put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
bool get(const std::string& in, size_t* pos, T* v) {
  if (in.size() - *pos < sizeof(T)) return false;
  std::memcpy(v, in.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}

}  // namespace

struct SsdStore::Group {
  std::string name, path, crc_path;
  Category category = Category::kWorkspace;
  uint64_t bytes = 0;       // as created: the readable range
  uint64_t file_bytes = 0;  // bytes rounded up to whole blocks
  uint64_t n_blocks = 0;
  std::unique_ptr<BlockFile> file;
  std::vector<uint32_t> crcs;  // [n_blocks] CRC-32C of each whole block as last written
  std::vector<uint8_t> bad;    // [n_blocks] 1: the last write of the block failed, content unknown
  bool sidecar_dirty = false;
  size_t active_ops = 0;
};

// One block's share of a request. Owned by pending_ until started, then by inflight_; between
// pick and completion only the I/O thread touches it.
struct SsdStore::BlockOp {
  SsdRequestId request = 0;
  std::shared_ptr<Group> group;
  bool write = false;
  uint64_t block = 0;
  uint32_t in_block = 0;  // the caller's piece: bytes [in_block, in_block + len) of the block
  uint32_t len = 0;
  uint32_t valid = 0;    // bytes of this block inside the group (less than a block only at the end)
  char* user = nullptr;  // the caller's bytes for the piece
  // Set when started.
  uint64_t tag = 0;
  unsigned slot = 0;
  bool rmw_read = false;  // reading the block to patch part of it
  bool zero_copy = false;
  char* io_buf = nullptr;
  uint32_t expected_crc = 0;
  bool block_bad = false;
  uint32_t new_crc = 0;
};

std::string SsdStore::group_path(const std::string& group) const {
  return config_.folder + "/" + group + ".blk";
}

namespace {

std::string serialize_sidecar(uint32_t block_bytes, uint64_t bytes,
                              const std::vector<uint32_t>& crcs, const std::vector<uint8_t>& bad) {
  std::string out(kSidecarMagic, sizeof kSidecarMagic);
  put(&out, kSidecarVersion);
  put(&out, block_bytes);
  put(&out, bytes);
  put(&out, static_cast<uint64_t>(crcs.size()));
  out.append(reinterpret_cast<const char*>(crcs.data()), crcs.size() * sizeof(uint32_t));
  out.append(reinterpret_cast<const char*>(bad.data()), bad.size());
  put(&out, crc32c(out.data(), out.size()));
  return out;
}

}  // namespace

SsdStore::SsdStore(SsdConfig config, TierCounters* counters, StorageEnv* env)
    : config_(std::move(config)), counters_(counters), env_(env) {}

Result<std::unique_ptr<SsdStore>> SsdStore::open(const SsdConfig& config, TierCounters* counters,
                                                 StorageEnv* env) {
  if (config.folder.empty()) return invalid_argument("SSD store: no folder given");
  if (config.block_bytes < kDirectAlign || config.block_bytes % kDirectAlign != 0 ||
      config.block_bytes > (64u << 20)) {
    return invalid_argument("SSD store: block_bytes " + std::to_string(config.block_bytes) +
                            " must be a multiple of 4096 between 4 KiB and 64 MiB");
  }
  if (config.queue_depth < 1 || config.queue_depth > 1024) {
    return invalid_argument("SSD store: queue_depth " + std::to_string(config.queue_depth) +
                            " must be 1..1024");
  }
  std::unique_ptr<SsdStore> store(new SsdStore(config, counters, env));
  SPW_RETURN_IF_ERROR(store->start());
  return store;
}

Status SsdStore::start() {
  std::error_code ec;
  std::filesystem::create_directories(config_.folder, ec);
  if (ec)
    return io_error("SSD store: cannot create folder " + config_.folder + ": " + ec.message());
  auto q = env_->new_io_queue(config_.queue_depth);
  if (!q.ok())
    return q.status().with_context("SSD store: cannot start asynchronous I/O (io_uring)");
  queue_ = std::move(*q);
  for (unsigned i = 0; i < config_.queue_depth; ++i) {
    SPW_ASSIGN_OR_RETURN(AlignedBuffer b,
                         AlignedBuffer::allocate(config_.block_bytes, kDirectAlign));
    staging_.push_back(std::move(b));
    free_slots_.push_back(config_.queue_depth - 1 - i);
  }
  zero_block_crc_ = crc32c(staging_[0].data(), config_.block_bytes);  // fresh buffers are zeroed
  io_thread_ = std::thread([this] { io_loop(); });
  return Status();
}

SsdStore::~SsdStore() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  if (io_thread_.joinable()) {
    queue_->wake();
    io_thread_.join();
  }
  for (auto& [name, g] : groups_) {
    if (g->sidecar_dirty) {
      Status s = write_file_atomic(
          g->crc_path,
          serialize_sidecar(static_cast<uint32_t>(config_.block_bytes), g->bytes, g->crcs, g->bad));
      if (!s.ok())
        log_warn("SSD store: checksums of group '" + name + "' not saved: " + s.to_string());
    }
    if (counters_) counters_->sub(Tier::kSsd, g->category, static_cast<int64_t>(g->file_bytes));
  }
}

bool SsdStore::direct_io() const {
  std::lock_guard lock(mutex_);
  return config_.use_direct_io && !warned_buffered_;
}

bool SsdStore::has_group(const std::string& group) const {
  std::lock_guard lock(mutex_);
  return groups_.count(group) > 0;
}

Result<uint64_t> SsdStore::group_bytes(const std::string& group) const {
  std::lock_guard lock(mutex_);
  auto it = groups_.find(group);
  if (it == groups_.end())
    return not_found("SSD store: no group '" + group + "' is open in " + config_.folder);
  return it->second->bytes;
}

Status SsdStore::check_file(const Group& g, const BlockFile& f) {
  std::lock_guard lock(mutex_);
  if (groups_.count(g.name)) {
    return invalid_argument("SSD store: group '" + g.name + "' is already open in " +
                            config_.folder);
  }
  if (config_.use_direct_io && !f.direct() && !warned_buffered_) {
    warned_buffered_ = true;
    log_warn(
        "SSD store: the filesystem under " + config_.folder +
        " refuses O_DIRECT; using buffered I/O, so the page cache will also hold SSD-tier data");
  }
  return Status();
}

Status SsdStore::create_group(const std::string& group, uint64_t bytes, Category category) {
  if (!valid_group_name(group)) {
    return invalid_argument("SSD store: group name '" + group +
                            "' must be 1-200 of [A-Za-z0-9._-], not starting with '.'");
  }
  {
    std::lock_guard lock(mutex_);
    if (groups_.count(group)) {
      return invalid_argument("SSD store: group '" + group + "' already exists in " +
                              config_.folder + "; remove_group it first");
    }
  }
  auto g = std::make_shared<Group>();
  g->name = group;
  g->path = group_path(group);
  g->crc_path = config_.folder + "/" + group + ".crc";
  g->category = category;
  g->bytes = bytes;
  g->file_bytes = round_up(bytes, config_.block_bytes);
  g->n_blocks = g->file_bytes / config_.block_bytes;

  // Space an old file of the same name holds comes back when it is replaced.
  auto free_now = [&]() -> Result<uint64_t> {
    SPW_ASSIGN_OR_RETURN(uint64_t free_bytes, env_->free_bytes(config_.folder));
    auto old_size = env_->file_size(g->path);
    return free_bytes + (old_size.ok() ? *old_size : 0);
  };
  auto no_space_status = [&](const Result<uint64_t>& free_bytes) {
    return no_space(
        "SSD store: cannot pre-allocate group '" + group + "' in " + config_.folder +
        ": it needs " + format_bytes(g->file_bytes) + " and that filesystem has " +
        (free_bytes.ok() ? format_bytes(*free_bytes) : std::string("an unknown amount")) +
        " free; free space there, choose another folder, or keep less on the SSD tier");
  };
  // Checked before fallocate so the message is the same on filesystems that over-commit.
  if (auto free_bytes = free_now(); free_bytes.ok() && g->file_bytes > *free_bytes)
    return no_space_status(free_bytes);
  auto file = env_->create_block_file(g->path, g->file_bytes, config_.use_direct_io);
  if (!file.ok()) {
    if (file.status().code() == ErrorCode::kNoSpace) return no_space_status(free_now());
    return file.status().with_context("SSD store: cannot create group '" + group + "'");
  }
  SPW_RETURN_IF_ERROR(check_file(*g, **file));
  g->file = std::move(*file);
  g->crcs.assign(g->n_blocks, zero_block_crc_);
  g->bad.assign(g->n_blocks, 0);
  Status s = write_file_atomic(
      g->crc_path,
      serialize_sidecar(static_cast<uint32_t>(config_.block_bytes), g->bytes, g->crcs, g->bad));
  if (!s.ok()) return s.with_context("SSD store: cannot write checksums of group '" + group + "'");
  std::lock_guard lock(mutex_);
  if (groups_.count(group))
    return invalid_argument("SSD store: group '" + group + "' was created concurrently");
  groups_.emplace(group, g);
  if (counters_) counters_->add(Tier::kSsd, category, static_cast<int64_t>(g->file_bytes));
  return Status();
}

Status SsdStore::open_group(const std::string& group, Category category) {
  if (!valid_group_name(group))
    return invalid_argument("SSD store: bad group name '" + group + "'");
  auto g = std::make_shared<Group>();
  g->name = group;
  g->path = group_path(group);
  g->crc_path = config_.folder + "/" + group + ".crc";
  g->category = category;

  auto side = read_file(g->crc_path);
  if (!side.ok()) {
    return Status(side.status().code(), "SSD store: group '" + group +
                                            "' has no readable checksum file " + g->crc_path +
                                            " (" + side.status().message() + ")");
  }
  const std::string& in = *side;
  auto bad_sidecar = [&](const std::string& why) {
    return corrupt("SSD store: checksum file " + g->crc_path + " is damaged: " + why);
  };
  if (in.size() < sizeof kSidecarMagic + 4 ||
      std::memcmp(in.data(), kSidecarMagic, sizeof kSidecarMagic) != 0) {
    return bad_sidecar("not a Spillway checksum file");
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, in.data() + in.size() - 4, 4);
  if (crc32c(in.data(), in.size() - 4) != stored_crc)
    return bad_sidecar("its own checksum does not match");
  size_t pos = sizeof kSidecarMagic;
  uint32_t version = 0, block_bytes = 0;
  uint64_t n_blocks = 0;
  if (!get(in, &pos, &version) || !get(in, &pos, &block_bytes) || !get(in, &pos, &g->bytes) ||
      !get(in, &pos, &n_blocks)) {
    return bad_sidecar("header cut short");
  }
  if (version != kSidecarVersion) return bad_sidecar("unknown version " + std::to_string(version));
  if (block_bytes != config_.block_bytes) {
    return corrupt("SSD store: group '" + group + "' was written with block_bytes " +
                   std::to_string(block_bytes) + " but this store uses " +
                   std::to_string(config_.block_bytes) + "; open it with the same block size");
  }
  g->file_bytes = round_up(g->bytes, config_.block_bytes);
  g->n_blocks = g->file_bytes / config_.block_bytes;
  if (n_blocks != g->n_blocks || in.size() != pos + n_blocks * 5 + 4)
    return bad_sidecar("block count does not match");
  g->crcs.resize(n_blocks);
  g->bad.resize(n_blocks);
  std::memcpy(g->crcs.data(), in.data() + pos, n_blocks * 4);
  std::memcpy(g->bad.data(), in.data() + pos + n_blocks * 4, n_blocks);

  auto size = env_->file_size(g->path);
  if (!size.ok()) return size.status().with_context("SSD store: group '" + group + "'");
  if (*size < g->file_bytes) {
    return corrupt("SSD store: " + g->path + " holds " + format_bytes(*size) +
                   " but its checksums cover " + format_bytes(g->file_bytes) + " (truncated?)");
  }
  auto file = env_->open_block_file(g->path, config_.use_direct_io);
  if (!file.ok()) return file.status().with_context("SSD store: cannot open group '" + group + "'");
  SPW_RETURN_IF_ERROR(check_file(*g, **file));
  g->file = std::move(*file);
  std::lock_guard lock(mutex_);
  groups_.emplace(group, g);
  if (counters_) counters_->add(Tier::kSsd, category, static_cast<int64_t>(g->file_bytes));
  return Status();
}

Status SsdStore::remove_group(const std::string& group) {
  std::shared_ptr<Group> g;
  {
    std::lock_guard lock(mutex_);
    auto it = groups_.find(group);
    if (it == groups_.end())
      return not_found("SSD store: no group '" + group + "' is open in " + config_.folder);
    if (it->second->active_ops > 0) {
      return invalid_argument("SSD store: group '" + group +
                              "' has I/O in flight; wait for it before removing");
    }
    g = it->second;
    groups_.erase(it);
  }
  if (counters_) counters_->sub(Tier::kSsd, g->category, static_cast<int64_t>(g->file_bytes));
  g->file.reset();
  std::error_code ec1, ec2;
  std::filesystem::remove(g->path, ec1);
  std::filesystem::remove(g->crc_path, ec2);
  if (ec1 || ec2)
    return io_error("SSD store: cannot delete files of group '" + group +
                    "': " + (ec1 ? ec1 : ec2).message());
  return Status();
}

Result<SsdRequestId> SsdStore::read_async(const std::string& group, uint64_t offset, void* dst,
                                          size_t bytes) {
  return enqueue(false, group, offset, static_cast<char*>(dst), bytes);
}

Result<SsdRequestId> SsdStore::write_async(const std::string& group, uint64_t offset,
                                           const void* src, size_t bytes) {
  // The I/O thread only reads from `src`; the cast lets both directions share one op type.
  return enqueue(true, group, offset, const_cast<char*>(static_cast<const char*>(src)), bytes);
}

Result<SsdRequestId> SsdStore::enqueue(bool write, const std::string& group, uint64_t offset,
                                       char* user, size_t bytes) {
  SsdRequestId id = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = groups_.find(group);
    if (it == groups_.end()) {
      return invalid_argument("SSD store: no group '" + group + "' is open in " + config_.folder);
    }
    const std::shared_ptr<Group>& g = it->second;
    if (offset > g->bytes || bytes > g->bytes - offset) {
      return invalid_argument("SSD store: " + std::string(write ? "write" : "read") +
                              " of bytes [" + std::to_string(offset) + ", " +
                              std::to_string(offset + bytes) + ") is past the end of group '" +
                              group + "' (" + std::to_string(g->bytes) + " bytes)");
    }
    if (bytes > 0 && user == nullptr) return invalid_argument("SSD store: null buffer");
    id = next_id_++;
    Request& req = requests_[id];
    if (bytes == 0) return id;
    const uint64_t bb = config_.block_bytes;
    uint64_t pos = offset;
    const uint64_t end = offset + bytes;
    while (pos < end) {
      auto op = std::make_unique<BlockOp>();
      op->request = id;
      op->group = g;
      op->write = write;
      op->block = pos / bb;
      const uint64_t block_start = op->block * bb;
      const uint64_t block_end = std::min(block_start + bb, end);
      op->in_block = static_cast<uint32_t>(pos - block_start);
      op->len = static_cast<uint32_t>(block_end - pos);
      op->valid = static_cast<uint32_t>(std::min(bb, g->bytes - block_start));
      op->user = user + (pos - offset);
      pending_.push_back(std::move(op));
      ++req.ops_left;
      ++g->active_ops;
      pos = block_end;
    }
    ++requests_open_;
  }
  queue_->wake();
  return id;
}

void SsdStore::pick_startable_locked(std::vector<BlockOp*>* out) {
  // Ops on one block run one at a time and in submission order (a read after a write sees the
  // write; two partial writes both land). `blocked` keeps later ops behind an earlier waiting one.
  std::set<std::pair<const Group*, uint64_t>> blocked;
  for (auto it = pending_.begin(); it != pending_.end() && !free_slots_.empty();) {
    BlockOp* op = it->get();
    const auto key = std::make_pair(static_cast<const Group*>(op->group.get()), op->block);
    if (busy_blocks_.count(key) || blocked.count(key)) {
      blocked.insert(key);
      ++it;
      continue;
    }
    busy_blocks_.insert(key);
    op->slot = free_slots_.back();
    free_slots_.pop_back();
    op->tag = next_tag_++;
    op->expected_crc = op->group->crcs[op->block];
    op->block_bad = op->group->bad[op->block] != 0;
    out->push_back(op);
    inflight_.emplace(op->tag, std::move(*it));
    it = pending_.erase(it);
  }
}

void SsdStore::io_loop() {
  std::vector<BlockOp*> starting;
  std::vector<IoCompletion> done;
  for (;;) {
    starting.clear();
    {
      std::lock_guard lock(mutex_);
      if (stop_ && pending_.empty() && inflight_.empty()) return;
      pick_startable_locked(&starting);
    }
    for (BlockOp* op : starting) {
      Status s = submit_op(op);
      if (!s.ok()) {
        std::lock_guard lock(mutex_);
        finish_op_locked(op, s);
      }
    }
    done.clear();
    Status s = queue_->wait(&done, /*block=*/true);
    if (!s.ok()) {
      // The ring itself failed: nothing in flight will complete. Fail those requests rather than
      // hang.
      log_error("SSD store: I/O queue failed: " + s.to_string());
      std::lock_guard lock(mutex_);
      std::vector<BlockOp*> all;
      for (auto& [tag, op] : inflight_) all.push_back(op.get());
      for (BlockOp* op : all) finish_op_locked(op, s);
      continue;
    }
    for (const IoCompletion& c : done) {
      BlockOp* op = nullptr;
      {
        std::lock_guard lock(mutex_);
        auto it = inflight_.find(c.tag);
        if (it != inflight_.end()) op = it->second.get();
      }
      if (op) on_completion(op, c.result);
    }
  }
}

Status SsdStore::submit_op(BlockOp* op) {
  const Group& g = *op->group;
  const uint32_t bb = static_cast<uint32_t>(config_.block_bytes);
  char* stage = staging_[op->slot].as<char>();
  const bool whole = op->in_block == 0 && op->len == op->valid;
  const bool user_ok = op->len == bb && (!g.file->direct() ||
                                         reinterpret_cast<uintptr_t>(op->user) % kDirectAlign == 0);
  IoOp io;
  io.file = g.file.get();
  io.offset = op->block * config_.block_bytes;
  io.bytes = bb;
  io.tag = op->tag;
  if (op->write && whole) {
    op->zero_copy = user_ok;
    if (!op->zero_copy) {
      std::memcpy(stage, op->user, op->len);
      std::memset(stage + op->len, 0, bb - op->len);  // padding past the group's end stays zero
    }
    op->io_buf = op->zero_copy ? op->user : stage;
    op->new_crc = crc32c(op->io_buf, bb);
    io.kind = IoKind::kWrite;
  } else if (op->write) {
    // Part of a block: read it, verify, patch, then write (on_completion).
    op->rmw_read = true;
    op->io_buf = stage;
    io.kind = IoKind::kRead;
  } else {
    op->zero_copy = user_ok;
    op->io_buf = op->zero_copy ? op->user : stage;
    io.kind = IoKind::kRead;
  }
  io.buf = op->io_buf;
  return queue_->submit(io);
}

void SsdStore::on_completion(BlockOp* op, int64_t result) {
  const Group& g = *op->group;
  const uint64_t bb = config_.block_bytes;
  const bool writing = op->write && !op->rmw_read;
  auto where = [&] {
    return "block " + std::to_string(op->block) + " (bytes " + std::to_string(op->block * bb) +
           ".." + std::to_string((op->block + 1) * bb) + ") of " + g.path;
  };
  auto fail = [&](Status s) {
    std::lock_guard lock(mutex_);
    if (writing) {
      op->group->bad[op->block] = 1;
      op->group->sidecar_dirty = true;
    }
    finish_op_locked(op, std::move(s));
  };
  if (result < 0) {
    const int err = static_cast<int>(-result);
    Status s = errno_status(
        std::string(writing ? "SSD store: write of " : "SSD store: read of ") + where(), err);
    if (err == ENOSPC)
      s = no_space("SSD store: write of " + where() + ": the disk under " + config_.folder +
                   " is full");
    return fail(s);
  }
  if (static_cast<uint64_t>(result) < bb) {
    if (writing) {
      return fail(io_error("SSD store: short write: " + std::to_string(result) + " of " +
                           std::to_string(bb) + " bytes reached " + where() +
                           "; the device or filesystem stopped early (full disk or "
                           "device error: check free space and the kernel log)"));
    }
    return fail(corrupt("SSD store: short read: " + std::to_string(result) + " of " +
                        std::to_string(bb) + " bytes from " + where() +
                        "; the file is shorter than its checksums say (truncated?)"));
  }
  if (writing) {
    if (counters_) counters_->add_moved(Link::kSsdWrite, bb);
    std::lock_guard lock(mutex_);
    op->group->crcs[op->block] = op->new_crc;
    op->group->bad[op->block] = 0;
    op->group->sidecar_dirty = true;
    finish_op_locked(op, Status());
    return;
  }
  if (counters_) counters_->add_moved(Link::kSsdRead, bb);
  if (op->block_bad) {
    return fail(io_error("SSD store: " + where() +
                         " holds an incomplete write (an earlier write to it failed); "
                         "write the whole block again before reading it"));
  }
  const uint32_t got = crc32c(op->io_buf, bb);
  if (got != op->expected_crc) {
    return fail(corrupt("SSD store: checksum mismatch in " + where() + ": stored crc32c " +
                        hex32(op->expected_crc) + ", data reads " + hex32(got) +
                        "; the file was changed or damaged on disk "
                        "(restore from a checkpoint)"));
  }
  if (op->rmw_read) {
    std::memcpy(op->io_buf + op->in_block, op->user, op->len);
    op->new_crc = crc32c(op->io_buf, bb);
    op->rmw_read = false;
    IoOp io;
    io.kind = IoKind::kWrite;
    io.file = g.file.get();
    io.offset = op->block * bb;
    io.buf = op->io_buf;
    io.bytes = static_cast<uint32_t>(bb);
    io.tag = op->tag;
    Status s = queue_->submit(io);
    if (!s.ok()) fail(s);
    return;
  }
  if (!op->zero_copy) std::memcpy(op->user, op->io_buf + op->in_block, op->len);
  std::lock_guard lock(mutex_);
  finish_op_locked(op, Status());
}

void SsdStore::finish_op_locked(BlockOp* op, Status status) {
  busy_blocks_.erase(std::make_pair(static_cast<const Group*>(op->group.get()), op->block));
  free_slots_.push_back(op->slot);
  --op->group->active_ops;
  auto req = requests_.find(op->request);
  if (req != requests_.end()) {
    if (!status.ok() && req->second.status.ok()) req->second.status = std::move(status);
    if (--req->second.ops_left == 0) {
      --requests_open_;
      done_cv_.notify_all();
    }
  }
  inflight_.erase(op->tag);  // destroys *op: last
}

Status SsdStore::wait(SsdRequestId id) {
  std::unique_lock lock(mutex_);
  if (!requests_.count(id)) {
    return invalid_argument("SSD store: unknown request id " + std::to_string(id) +
                            " (never issued or already waited for)");
  }
  done_cv_.wait(lock, [&] {
    auto it = requests_.find(id);
    return it == requests_.end() || it->second.ops_left == 0;
  });
  auto it = requests_.find(id);
  if (it == requests_.end())
    return Status();  // consumed by a concurrent wait_all, which reported it
  Status s = std::move(it->second.status);
  requests_.erase(it);
  return s;
}

Status SsdStore::wait_all() {
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return requests_open_ == 0; });
  Status first;
  SsdRequestId first_id = 0;
  for (auto& [id, req] : requests_) {
    if (!req.status.ok() && (first.ok() || id < first_id)) {
      first = req.status;
      first_id = id;
    }
  }
  requests_.clear();
  return first;
}

Status SsdStore::flush() {
  Status first = wait_all();
  std::vector<std::shared_ptr<Group>> groups;
  {
    std::lock_guard lock(mutex_);
    for (auto& [name, g] : groups_) groups.push_back(g);
  }
  for (auto& g : groups) {
    // Data first, then the checksums that describe it: a crash in between leaves old checksums
    // that flag the new blocks as corrupt, never new checksums over old data that pass.
    Status s = g->file->sync();
    if (s.ok()) {
      std::string sidecar;
      {
        std::lock_guard lock(mutex_);
        if (g->sidecar_dirty) {
          sidecar = serialize_sidecar(static_cast<uint32_t>(config_.block_bytes), g->bytes, g->crcs,
                                      g->bad);
          g->sidecar_dirty = false;
        }
      }
      if (!sidecar.empty()) {
        s = write_file_atomic(g->crc_path, sidecar);
        if (!s.ok()) {
          std::lock_guard lock(mutex_);
          g->sidecar_dirty = true;
        }
      }
    }
    if (!s.ok() && first.ok())
      first = s.with_context("SSD store: flush of group '" + g->name + "'");
  }
  return first;
}

}  // namespace spillway
