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

// The kinds of a block on the SSD, in group order: [master,] m, v.
enum Kind { kMasterKind = 0, kM = 1, kV = 2 };
constexpr const char* kKindPrefix[] = {"master.", "m.", "v."};

class SsdState final : public OptimizerStateStore {
 public:
  SsdState(ModelState& m, bool master, TierCounters* counters) : model_(m), master_(master), counters_(counters) {}
  ~SsdState() override {
    store_.reset();  // finishes in-flight requests before the staging they target goes away
    if (counters_) counters_->sub(Tier::kDram, Category::kOptimizer, static_cast<int64_t>(staging_bytes_));
  }

  Status init(const SsdConfig& config, StorageEnv* env) {
    SPW_ASSIGN_OR_RETURN(store_, SsdStore::open(config, counters_, env));
    const size_t max_bytes = model_.layout().max_block_numel() * sizeof(float);
    for (Stage& s : stage_) {
      for (int k = first_kind(); k <= kV; ++k) {
        // 4096-aligned, so whole SSD blocks move without the store's own staging copy.
        SPW_ASSIGN_OR_RETURN(s.buf[k], AlignedBuffer::allocate(max_bytes, 4096));
        staging_bytes_ += max_bytes;
      }
    }
    if (counters_) counters_->add(Tier::kDram, Category::kOptimizer, static_cast<int64_t>(staging_bytes_));
    for (size_t b = 0; b < model_.num_blocks(); ++b) {
      for (int k = first_kind(); k <= kV; ++k) {
        // A fresh group reads as zeros: the moments need no initial write.
        SPW_RETURN_IF_ERROR(store_->create_group(group(k, b), bytes(b), k == kMasterKind ? Category::kMaster
                                                                                         : Category::kOptimizer));
      }
      if (master_) {
        SPW_ASSIGN_OR_RETURN(SsdRequestId id, store_->write_async(group(kMasterKind, b), 0, model_.master(b), bytes(b)));
        (void)id;  // consumed by wait_all below
      }
    }
    return store_->wait_all();
  }

  Status for_each_block(const std::function<void(size_t, float*, float*, float*)>& update,
                        const std::function<void(size_t)>& released) override {
    const size_t n = model_.num_blocks();
    std::vector<Transfer> reads(n), writes(n);
    auto now = [&] { return span_sink_ ? clock_() : 0.0; };
    auto read = [&](size_t b) -> Status {
      Transfer& t = reads[b];
      t.start = now();
      for (int k = first_kind(); k <= kV; ++k) {
        SPW_ASSIGN_OR_RETURN(t.ids[t.count], store_->read_async(group(k, b), 0, stage_[b % 3].buf[k].data(), bytes(b)));
        ++t.count;
        read_bytes_ += bytes(b);
      }
      return {};
    };
    auto write = [&](size_t b) -> Status {
      Transfer& t = writes[b];
      t.start = now();
      for (int k = first_kind(); k <= kV; ++k) {
        SPW_ASSIGN_OR_RETURN(t.ids[t.count], store_->write_async(group(k, b), 0, stage_[b % 3].buf[k].data(), bytes(b)));
        ++t.count;
        write_bytes_ += bytes(b);
      }
      return {};
    };
    auto finish = [&](Transfer& t, size_t b, const char* phase) {
      Status first;
      for (int i = 0; i < t.count; ++i) {
        Status s = store_->wait(t.ids[i]);
        if (first.ok() && !s.ok()) first = s;
      }
      if (t.count && span_sink_) span_sink_(b, phase, t.start, clock_());
      t.count = 0;
      return first;
    };

    Status error = read(0);
    size_t b = 0;
    for (; b < n && error.ok(); ++b) {
      // Stage (b+1) % 3 last held block b-2: its write-back must be done before it is refilled.
      if (b >= 2) error = finish(writes[b - 2], b - 2, "ssd_write");
      if (error.ok() && b + 1 < n) error = read(b + 1);
      if (error.ok()) error = finish(reads[b], b, "ssd_read");
      if (!error.ok()) break;
      Stage& s = stage_[b % 3];
      float* master = master_ ? s.buf[kMasterKind].as<float>() : model_.master(b);
      update(b, master, s.buf[kM].as<float>(), s.buf[kV].as<float>());
      // The compute copy the next forward streams (fp32 on the CPU backend).
      if (master_) std::memcpy(model_.master(b), master, bytes(b));
      released(b);
      error = write(b);
    }
    for (; b < n; ++b) released(b);  // after an error: nobody waits forever
    for (size_t i = 0; i < n; ++i) {
      Status s = finish(writes[i], i, "ssd_write");
      if (error.ok()) error = s;
      (void)finish(reads[i], i, "ssd_read");  // only after an error: reads issued ahead
    }
    Status drained = store_->wait_all();
    return error.ok() ? drained : error;
  }

  Status read_block(size_t b, float* master, float* m, float* v) override {
    if (master && !master_) std::memcpy(master, model_.master(b), bytes(b));
    float* dst[3] = {master_ ? master : nullptr, m, v};
    return transfer(b, dst, /*write=*/false);
  }

  Status write_block(size_t b, const float* master, const float* m, const float* v) override {
    if (master && master != model_.master(b)) std::memcpy(model_.master(b), master, bytes(b));
    float* src[3] = {master_ ? model_.master(b) : nullptr, const_cast<float*>(m), const_cast<float*>(v)};
    return transfer(b, src, /*write=*/true);
  }

  bool on_ssd() const override { return true; }
  bool master_on_ssd() const override { return master_; }
  uint64_t ssd_read_bytes() const override { return read_bytes_.load(std::memory_order_relaxed); }
  uint64_t ssd_write_bytes() const override { return write_bytes_.load(std::memory_order_relaxed); }
  void set_span_sink(SpanSink sink, std::function<double()> clock) override {
    span_sink_ = std::move(sink);
    clock_ = std::move(clock);
  }

 private:
  struct Stage {
    AlignedBuffer buf[3];  // [kind][max_block_numel] fp32
  };
  struct Transfer {
    SsdRequestId ids[3] = {};
    int count = 0;
    double start = 0;
  };

  int first_kind() const { return master_ ? kMasterKind : kM; }
  size_t bytes(size_t b) const { return model_.layout().blocks()[b].numel * sizeof(float); }
  std::string group(int kind, size_t b) const { return kKindPrefix[kind] + model_.layout().blocks()[b].name; }

  // Moves the kinds whose pointer is non-null between the SSD and the caller's buffers, all at once.
  Status transfer(size_t b, float* const* ptr, bool write) {
    SsdRequestId ids[3];
    int count = 0;
    Status first;
    for (int k = first_kind(); k <= kV; ++k) {
      if (!ptr[k]) continue;
      auto id = write ? store_->write_async(group(k, b), 0, ptr[k], bytes(b))
                      : store_->read_async(group(k, b), 0, ptr[k], bytes(b));
      if (!id.ok()) {
        first = id.status();
        break;
      }
      ids[count++] = *id;
    }
    for (int i = 0; i < count; ++i) {
      Status s = store_->wait(ids[i]);
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }

  ModelState& model_;
  bool master_;
  TierCounters* counters_;
  std::unique_ptr<SsdStore> store_;
  Stage stage_[3];  // read b+1 / update b / write b-1, by b % 3
  uint64_t staging_bytes_ = 0;
  std::atomic<uint64_t> read_bytes_{0}, write_bytes_{0};
  SpanSink span_sink_;
  std::function<double()> clock_;
};

}  // namespace

std::unique_ptr<OptimizerStateStore> make_dram_state(ModelState& model) { return std::make_unique<DramState>(model); }

Result<std::unique_ptr<OptimizerStateStore>> make_ssd_state(ModelState& model, const SsdConfig& config, bool master_on_ssd,
                                                            TierCounters* counters, StorageEnv* env) {
  auto s = std::make_unique<SsdState>(model, master_on_ssd, counters);
  SPW_RETURN_IF_ERROR(s->init(config, env));
  return std::unique_ptr<OptimizerStateStore>(std::move(s));
}

}  // namespace spillway
