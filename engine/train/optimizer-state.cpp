#include "train/optimizer-state.h"

#include <cstring>

namespace spillway {
namespace {

class DramState final : public OptimizerStateStore {
 public:
  explicit DramState(ModelState& m) : model_(m) {}
  Status for_each_block(const std::function<void(size_t, float*, float*, float*)>& update,
                        const std::function<void(size_t)>& released) override {
    for (size_t b = 0; b < model_.num_blocks(); ++b) {
      update(b, model_.master(b), model_.exp_avg(b), model_.exp_avg_sq(b));
      released(b);
    }
    return {};
  }
  Status read_block(size_t b, float* master, float* m, float* v) override {
    const size_t bytes = model_.layout().blocks()[b].numel * sizeof(float);
    if (master) std::memcpy(master, model_.master(b), bytes);
    std::memcpy(m, model_.exp_avg(b), bytes);
    std::memcpy(v, model_.exp_avg_sq(b), bytes);
    return {};
  }
  Status write_block(size_t b, const float* master, const float* m, const float* v) override {
    const size_t bytes = model_.layout().blocks()[b].numel * sizeof(float);
    if (master) std::memcpy(model_.master(b), master, bytes);
    std::memcpy(model_.exp_avg(b), m, bytes);
    std::memcpy(model_.exp_avg_sq(b), v, bytes);
    return {};
  }
  bool on_ssd() const override { return false; }
  bool master_on_ssd() const override { return false; }

 private:
  ModelState& model_;
};

class SsdState final : public OptimizerStateStore {
 public:
  SsdState(ModelState& m, bool master) : model_(m), master_(master) {}

  Status init(const SsdConfig& config, TierCounters* counters, StorageEnv* env) {
    SPW_ASSIGN_OR_RETURN(store_, SsdStore::open(config, counters, env));
    const size_t max = model_.layout().max_block_numel();
    for (auto& s : stage_) {
      SPW_ASSIGN_OR_RETURN(s, AlignedBuffer::allocate(parts() * max * sizeof(float), 4096));
    }
    std::vector<float> zeros(max, 0.0f);
    for (size_t b = 0; b < model_.num_blocks(); ++b) {
      SPW_RETURN_IF_ERROR(store_->create_group(group(b), parts() * numel(b) * sizeof(float),
                                               master_ ? Category::kMaster : Category::kOptimizer));
      SPW_RETURN_IF_ERROR(write_block(b, master_ ? model_.master(b) : nullptr, zeros.data(), zeros.data()));
    }
    return store_->flush();
  }

  Status for_each_block(const std::function<void(size_t, float*, float*, float*)>& update,
                        const std::function<void(size_t)>& released) override {
    const size_t n = model_.num_blocks();
    std::vector<SsdRequestId> reads(n, 0), writes(n, 0);
    Status error;
    auto read = [&](size_t b) -> Status {
      SPW_ASSIGN_OR_RETURN(reads[b], store_->read_async(group(b), 0, stage_[b % 3].data(), bytes(b)));
      read_bytes_ += bytes(b);
      return {};
    };
    size_t b = 0;
    error = read(0);
    for (; b < n && error.ok(); ++b) {
      // Stage (b+1) % 3 last held block b-2: its write-back must be done before it is refilled.
      if (b >= 2 && writes[b - 2]) error = store_->wait(writes[b - 2]);
      if (error.ok() && b + 1 < n) error = read(b + 1);
      if (error.ok()) error = store_->wait(reads[b]);
      if (!error.ok()) break;
      float* base = stage_[b % 3].as<float>();
      const size_t k = numel(b);
      float* master = master_ ? base : model_.master(b);
      float* m = base + (master_ ? k : 0);
      float* v = m + k;
      update(b, master, m, v);
      if (master_) std::memcpy(model_.master(b), master, k * sizeof(float));  // the compute copy
      released(b);
      auto w = store_->write_async(group(b), 0, base, bytes(b));
      if (!w.ok()) error = w.status();
      else writes[b] = *w, write_bytes_ += bytes(b);
    }
    for (; b < n; ++b) released(b);  // after an error: nobody waits forever
    Status drained = store_->wait_all();
    return error.ok() ? drained : error;
  }

  Status read_block(size_t b, float* master, float* m, float* v) override {
    AlignedBuffer& s = stage_[0];
    SPW_ASSIGN_OR_RETURN(SsdRequestId id, store_->read_async(group(b), 0, s.data(), bytes(b)));
    SPW_RETURN_IF_ERROR(store_->wait(id));
    const size_t k = numel(b);
    const float* base = s.as<float>();
    if (master_ && master) std::memcpy(master, base, k * sizeof(float));
    std::memcpy(m, base + (master_ ? k : 0), k * sizeof(float));
    std::memcpy(v, base + (master_ ? 2 * k : k), k * sizeof(float));
    return {};
  }

  Status write_block(size_t b, const float* master, const float* m, const float* v) override {
    AlignedBuffer& s = stage_[0];
    const size_t k = numel(b);
    float* base = s.as<float>();
    if (master_) std::memcpy(base, master ? master : model_.master(b), k * sizeof(float));
    std::memcpy(base + (master_ ? k : 0), m, k * sizeof(float));
    std::memcpy(base + (master_ ? 2 * k : k), v, k * sizeof(float));
    SPW_ASSIGN_OR_RETURN(SsdRequestId id, store_->write_async(group(b), 0, base, bytes(b)));
    return store_->wait(id);
  }

  bool on_ssd() const override { return true; }
  bool master_on_ssd() const override { return master_; }
  uint64_t ssd_read_bytes() const override { return read_bytes_; }
  uint64_t ssd_write_bytes() const override { return write_bytes_; }

 private:
  size_t parts() const { return master_ ? 3 : 2; }
  size_t numel(size_t b) const { return model_.layout().blocks()[b].numel; }
  size_t bytes(size_t b) const { return parts() * numel(b) * sizeof(float); }
  std::string group(size_t b) const { return "block-" + std::to_string(b); }

  ModelState& model_;
  bool master_;
  std::unique_ptr<SsdStore> store_;
  AlignedBuffer stage_[3];  // read b+1 / update b / write b-1
  uint64_t read_bytes_ = 0, write_bytes_ = 0;
};

}  // namespace

std::unique_ptr<OptimizerStateStore> make_dram_state(ModelState& model) { return std::make_unique<DramState>(model); }

Result<std::unique_ptr<OptimizerStateStore>> make_ssd_state(ModelState& model, const SsdConfig& config, bool master_on_ssd,
                                                            TierCounters* counters, StorageEnv* env) {
  auto s = std::make_unique<SsdState>(model, master_on_ssd);
  SPW_RETURN_IF_ERROR(s->init(config, counters, env));
  return std::unique_ptr<OptimizerStateStore>(std::move(s));
}

}  // namespace spillway
