#include "tiers/fault-env.h"

#include <cerrno>
#include <unordered_map>

#include "tiers/byte-size.h"

namespace spillway {

class FaultInjectingQueue final : public IoQueue {
 public:
  FaultInjectingQueue(FaultInjectingEnv* env, std::unique_ptr<IoQueue> base)
      : env_(env), base_(std::move(base)) {}

  Status submit(const IoOp& op) override {
    const FaultPlan& plan = env_->plan_;
    const int64_t n = env_->ops_++;
    const int64_t kind_n = op.kind == IoKind::kWrite ? env_->writes_++ : env_->reads_++;
    if (n == plan.eio_on_op) return fake(op.tag, -EIO);
    if (op.kind == IoKind::kWrite) {
      if (plan.enospc_from_write >= 0 && kind_n >= plan.enospc_from_write)
        return fake(op.tag, -ENOSPC);
      if (kind_n == plan.short_write_on_write) {
        IoOp half = op;
        half.bytes = static_cast<uint32_t>(op.bytes / 2 / 4096 * 4096);
        if (half.bytes == 0) return fake(op.tag, 0);
        return base_->submit(half);
      }
    } else if (kind_n == plan.flip_byte_on_read) {
      flips_[op.tag] = static_cast<uint8_t*>(op.buf);
    }
    return base_->submit(op);
  }

  Status wait(std::vector<IoCompletion>* out, bool block) override {
    const size_t first = out->size();
    // Made-up completions are ready now: do not block on the real queue for them.
    SPW_RETURN_IF_ERROR(base_->wait(out, block && fake_.empty()));
    for (size_t i = first; i < out->size(); ++i) {
      auto it = flips_.find((*out)[i].tag);
      if (it == flips_.end()) continue;
      if ((*out)[i].result > 0) it->second[(*out)[i].result / 2] ^= 0xFF;
      flips_.erase(it);
    }
    out->insert(out->end(), fake_.begin(), fake_.end());
    fake_.clear();
    return Status();
  }

  void wake() override { base_->wake(); }
  unsigned depth() const override { return base_->depth(); }

 private:
  Status fake(uint64_t tag, int64_t result) {
    fake_.push_back({tag, result});
    return Status();
  }

  FaultInjectingEnv* env_;
  std::unique_ptr<IoQueue> base_;
  std::vector<IoCompletion> fake_;
  std::unordered_map<uint64_t, uint8_t*> flips_;  // tag -> buffer of a read to corrupt
};

Result<std::unique_ptr<BlockFile>> FaultInjectingEnv::create_block_file(const std::string& path,
                                                                        uint64_t bytes,
                                                                        bool direct) {
  if (plan_.enospc_on_create)
    return errno_status("fallocate " + format_bytes(bytes) + " for " + path, ENOSPC);
  return base_->create_block_file(path, bytes, direct && !plan_.refuse_direct_io);
}

Result<std::unique_ptr<BlockFile>> FaultInjectingEnv::open_block_file(const std::string& path,
                                                                      bool direct) {
  return base_->open_block_file(path, direct && !plan_.refuse_direct_io);
}

Result<std::unique_ptr<IoQueue>> FaultInjectingEnv::new_io_queue(unsigned depth) {
  SPW_ASSIGN_OR_RETURN(std::unique_ptr<IoQueue> q, base_->new_io_queue(depth));
  return std::unique_ptr<IoQueue>(new FaultInjectingQueue(this, std::move(q)));
}

Result<uint64_t> FaultInjectingEnv::free_bytes(const std::string& folder) {
  if (plan_.free_bytes_override > 0) return plan_.free_bytes_override;
  return base_->free_bytes(folder);
}

}  // namespace spillway
