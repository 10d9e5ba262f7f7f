#include "train/optimizer-state.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "tiers/byte-size.h"

namespace spillway {

BlockTiers BlockTiers::all(size_t blocks, Tier tier) {
  BlockTiers t;
  (tier == kDram ? t.dram : tier == kSsdMoments ? t.ssd_moments : t.ssd) = blocks;
  return t;
}

namespace {

// A DRAM block's state in ModelState's buffers, copied out and in (null pointers skipped).
void read_dram_block(ModelState& model, size_t b, float* master, float* m, float* v) {
  const size_t bytes = model.layout().blocks()[b].numel * sizeof(float);
  if (master) std::memcpy(master, model.master(b), bytes);
  if (m) std::memcpy(m, model.exp_avg(b), bytes);
  if (v) std::memcpy(v, model.exp_avg_sq(b), bytes);
}

void write_dram_block(ModelState& model, size_t b, const float* master, const float* m,
                      const float* v) {
  const size_t bytes = model.layout().blocks()[b].numel * sizeof(float);
  if (master && master != model.master(b)) std::memcpy(model.master(b), master, bytes);
  std::memcpy(model.exp_avg(b), m, bytes);
  std::memcpy(model.exp_avg_sq(b), v, bytes);
}

class DramState final : public OptimizerStateStore {
 public:
  explicit DramState(ModelState& m) : model_(m) {}
  Status for_each_block(size_t first, const UpdateFn& update,
                        const std::function<void(size_t)>& released) override {
    for (size_t b = first; b < model_.num_blocks(); ++b) {
      if (model_.holds(b))
        update(b, 0, model_.layout().blocks()[b].numel, model_.master(b), model_.exp_avg(b),
               model_.exp_avg_sq(b));
      released(b);
    }
    return {};
  }
  Status read_block(size_t b, float* master, float* m, float* v) override {
    read_dram_block(model_, b, master, m, v);
    return {};
  }
  Status write_block(size_t b, const float* master, const float* m, const float* v) override {
    write_dram_block(model_, b, master, m, v);
    return {};
  }
  BlockTiers tiers() const override {
    return BlockTiers::all(model_.num_blocks(), BlockTiers::kDram);
  }

 private:
  ModelState& model_;
};

// The kinds of a block on the SSD, in group order: [master,] m, v.
enum Kind { kMasterKind = 0, kM = 1, kV = 2 };
constexpr const char* kKindPrefix[] = {"master.", "m.", "v."};

class SsdState final : public OptimizerStateStore {
 public:
  SsdState(ModelState& m, const SsdStateConfig& c, TierCounters* counters)
      : model_(m), tiers_(c.tiers), counters_(counters) {
    const size_t bb = c.store.block_bytes;
    chunk_numel_ = std::max<size_t>(1, (c.chunk_bytes + bb - 1) / bb) * bb / sizeof(float);
  }
  ~SsdState() override {
    store_.reset();  // finishes in-flight requests before the staging they target goes away
    if (counters_)
      counters_->sub(Tier::kDram, Category::kOptimizer, static_cast<int64_t>(staging_bytes_));
  }

  Status init(const SsdConfig& config, StorageEnv* env) {
    SPW_ASSIGN_OR_RETURN(store_, SsdStore::open(config, counters_, env));
    // All groups at once, so that a disk too small says what the whole state needs, not one group.
    uint64_t need = 0;
    for (size_t b = tiers_.dram; b < model_.num_blocks(); ++b) {
      if (!model_.holds(b)) continue;  // another machine's (block-owners.h)
      need += (kV - first_kind(b) + 1) *
              ((bytes(b) + config.block_bytes - 1) / config.block_bytes * config.block_bytes);
    }
    if (auto free = env->free_bytes(config.folder); free.ok() && *free < need) {
      return no_space(
          std::string(tiers_.ssd > 0 ? "the AdamW state and master weights need "
                                     : "the AdamW state needs ") +
          format_bytes(need) + " under " + config.folder + " but only " + format_bytes(*free) +
          " are free: free space there, choose another placement.ssd_dir, or keep them in DRAM");
    }
    size_t max_numel = 0;  // of the blocks on the SSD
    for (size_t b = tiers_.dram; b < model_.num_blocks(); ++b) {
      if (model_.holds(b)) max_numel = std::max(max_numel, numel(b));
    }
    const size_t piece_bytes = std::min(chunk_numel_, max_numel) * sizeof(float);
    for (Stage& s : stage_) {
      for (int k = tiers_.ssd > 0 ? kMasterKind : kM; k <= kV; ++k) {
        // 4096-aligned, so whole SSD blocks move without the store's own staging copy.
        SPW_ASSIGN_OR_RETURN(s.buf[k], AlignedBuffer::allocate(piece_bytes, 4096));
        staging_bytes_ += piece_bytes;
      }
    }
    if (counters_)
      counters_->add(Tier::kDram, Category::kOptimizer, static_cast<int64_t>(staging_bytes_));
    for (size_t b = tiers_.dram; b < model_.num_blocks(); ++b) {
      if (!model_.holds(b)) continue;
      for (int k = first_kind(b); k <= kV; ++k) {
        // A fresh group reads as zeros: the moments need no initial write.
        SPW_RETURN_IF_ERROR(store_->create_group(
            group(k, b), bytes(b), k == kMasterKind ? Category::kMaster : Category::kOptimizer));
      }
      if (master_on_ssd(b)) {
        SPW_ASSIGN_OR_RETURN(SsdRequestId id, store_->write_async(group(kMasterKind, b), 0,
                                                                  model_.master(b), bytes(b)));
        (void)id;  // consumed by wait_all below
      }
    }
    for (size_t b = tiers_.dram; b < model_.num_blocks(); ++b) {
      if (!model_.holds(b)) continue;
      for (size_t off = 0; off < numel(b); off += chunk_numel_)
        pieces_.push_back({b, off, std::min(chunk_numel_, numel(b) - off)});
    }
    return store_->wait_all();
  }

  Status for_each_block(size_t first, const UpdateFn& update,
                        const std::function<void(size_t)>& released) override {
    // The SSD's pieces of blocks [first, num_blocks); the DRAM blocks before them are updated in
    // place while the first piece is read.
    const auto from = std::find_if(pieces_.begin(), pieces_.end(),
                                   [&](const Piece& p) { return p.block >= first; });
    const std::span<const Piece> pieces(from, pieces_.end());
    const size_t n = pieces.size();
    std::vector<Transfer> reads(n), writes(n);
    std::vector<double> read_start(model_.num_blocks()), write_start(model_.num_blocks());
    auto now = [&] { return span_sink_ ? clock_() : 0.0; };
    auto issue = [&](size_t i, bool write) -> Status {
      const Piece& p = pieces[i];
      Transfer& t = write ? writes[i] : reads[i];
      if (p.offset == 0) (write ? write_start : read_start)[p.block] = now();
      for (int k = first_kind(p.block); k <= kV; ++k) {
        void* buf = stage_[i % 3].buf[k].data();
        const uint64_t at = p.offset * sizeof(float);
        auto id = write ? store_->write_async(group(k, p.block), at, buf, p.count * sizeof(float))
                        : store_->read_async(group(k, p.block), at, buf, p.count * sizeof(float));
        if (!id.ok()) return id.status();
        t.ids[t.count++] = *id;
        (write ? write_bytes_ : read_bytes_) += p.count * sizeof(float);
      }
      return {};
    };
    auto finish = [&](size_t i, bool write) {
      Transfer& t = write ? writes[i] : reads[i];
      Status first;
      for (int j = 0; j < t.count; ++j) {
        Status s = store_->wait(t.ids[j]);
        if (first.ok() && !s.ok()) first = s;
      }
      const Piece& p = pieces[i];
      if (t.count && span_sink_ && p.offset + p.count == numel(p.block)) {
        span_sink_(p.block, write ? "ssd_write" : "ssd_read",
                   (write ? write_start : read_start)[p.block], clock_());
      }
      t.count = 0;
      return first;
    };

    Status error = n ? issue(0, false) : Status();
    for (size_t b = first; b < tiers_.dram; ++b) {
      if (error.ok() && model_.holds(b))
        update(b, 0, numel(b), model_.master(b), model_.exp_avg(b), model_.exp_avg_sq(b));
      released(b);
    }
    size_t i = 0;
    for (; i < n && error.ok(); ++i) {
      // Stage (i+1) % 3 last held piece i-2: its write-back must be done before it is refilled.
      if (i >= 2) error = finish(i - 2, true);
      if (error.ok() && i + 1 < n) error = issue(i + 1, false);
      if (error.ok()) error = finish(i, false);
      if (!error.ok()) break;
      const Piece& p = pieces[i];
      Stage& s = stage_[i % 3];
      const bool master_here = master_on_ssd(p.block);
      float* master =
          master_here ? s.buf[kMasterKind].as<float>() : model_.master(p.block) + p.offset;
      update(p.block, p.offset, p.count, master, s.buf[kM].as<float>(), s.buf[kV].as<float>());
      // The compute copy the next forward streams (fp32 on the CPU backend).
      if (master_here)
        std::memcpy(model_.master(p.block) + p.offset, master, p.count * sizeof(float));
      if (p.offset + p.count == numel(p.block)) released(p.block);
      error = issue(i, true);
    }
    // After an error nobody may wait forever: release the blocks not yet released.
    for (size_t b = i < n ? pieces[i].block : model_.num_blocks(); b < model_.num_blocks(); ++b)
      released(b);
    for (size_t j = 0; j < n; ++j) {
      Status s = finish(j, true);
      if (error.ok()) error = s;
      (void)finish(j, false);  // only after an error: reads issued ahead
    }
    Status drained = store_->wait_all();
    return error.ok() ? drained : error;
  }

  Status read_block(size_t b, float* master, float* m, float* v) override {
    if (tiers_.of(b) == BlockTiers::kDram) {
      read_dram_block(model_, b, master, m, v);
      return {};
    }
    if (master && !master_on_ssd(b)) std::memcpy(master, model_.master(b), bytes(b));
    float* dst[3] = {master_on_ssd(b) ? master : nullptr, m, v};
    return transfer(b, dst, /*write=*/false);
  }

  Status write_block(size_t b, const float* master, const float* m, const float* v) override {
    if (tiers_.of(b) == BlockTiers::kDram) {
      write_dram_block(model_, b, master, m, v);
      return {};
    }
    if (master && master != model_.master(b)) std::memcpy(model_.master(b), master, bytes(b));
    float* src[3] = {master_on_ssd(b) ? model_.master(b) : nullptr, const_cast<float*>(m),
                     const_cast<float*>(v)};
    return transfer(b, src, /*write=*/true);
  }

  BlockTiers tiers() const override { return tiers_; }
  uint64_t ssd_read_bytes() const override { return read_bytes_.load(std::memory_order_relaxed); }
  uint64_t ssd_write_bytes() const override { return write_bytes_.load(std::memory_order_relaxed); }
  void set_span_sink(SpanSink sink, std::function<double()> clock) override {
    span_sink_ = std::move(sink);
    clock_ = std::move(clock);
  }

 private:
  struct Stage {
    AlignedBuffer buf[3];  // [kind][piece] fp32
  };
  struct Piece {
    size_t block, offset, count;  // elements [offset, offset + count) of the block
  };
  struct Transfer {
    SsdRequestId ids[3] = {};
    int count = 0;
  };

  bool master_on_ssd(size_t b) const { return tiers_.of(b) == BlockTiers::kSsd; }
  int first_kind(size_t b) const { return master_on_ssd(b) ? kMasterKind : kM; }
  size_t numel(size_t b) const { return model_.layout().blocks()[b].numel; }
  size_t bytes(size_t b) const { return numel(b) * sizeof(float); }
  std::string group(int kind, size_t b) const {
    return kKindPrefix[kind] + model_.layout().blocks()[b].name;
  }

  // Moves the kinds whose pointer is non-null between the SSD and the caller's buffers, all at
  // once.
  Status transfer(size_t b, float* const* ptr, bool write) {
    SsdRequestId ids[3];
    int count = 0;
    Status first;
    for (int k = first_kind(b); k <= kV; ++k) {
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
  const BlockTiers tiers_;
  TierCounters* counters_;
  size_t chunk_numel_;  // a multiple of the store's block size (and so of kParamAlignment)
  std::unique_ptr<SsdStore> store_;
  std::vector<Piece> pieces_;
  Stage stage_[3];  // read i+1 / update i / write i-1, by piece i % 3
  uint64_t staging_bytes_ = 0;
  std::atomic<uint64_t> read_bytes_{0}, write_bytes_{0};
  SpanSink span_sink_;
  std::function<double()> clock_;
};

}  // namespace

std::unique_ptr<OptimizerStateStore> make_dram_state(ModelState& model) {
  return std::make_unique<DramState>(model);
}

Result<std::unique_ptr<OptimizerStateStore>> make_ssd_state(ModelState& model,
                                                            const SsdStateConfig& config,
                                                            TierCounters* counters,
                                                            StorageEnv* env) {
  if (config.store.block_bytes == 0 || config.store.block_bytes % 4096)
    return invalid_argument("SSD state: block_bytes must be a positive multiple of 4096");
  const BlockTiers& t = config.tiers;
  if (t.blocks() != model.num_blocks() || !t.any_on_ssd())
    return invalid_argument("SSD state: the tiers place " + std::to_string(t.blocks()) +
                            " blocks, " + std::to_string(t.ssd_moments + t.ssd) +
                            " of them on the SSD, for a model of " +
                            std::to_string(model.num_blocks()) + " blocks");
  for (size_t b = 0; b < model.num_blocks(); ++b) {
    if (model.holds(b) && (t.of(b) == BlockTiers::kDram) != (model.exp_avg(b) != nullptr))
      return invalid_argument("SSD state: ModelState must hold the moments of the first " +
                              std::to_string(t.dram) +
                              " blocks (ModelState::create's moment_blocks), and only those");
  }
  auto s = std::make_unique<SsdState>(model, config, counters);
  SPW_RETURN_IF_ERROR(s->init(config.store, env));
  return std::unique_ptr<OptimizerStateStore>(std::move(s));
}

Result<std::unique_ptr<OptimizerStateStore>> make_ssd_state(ModelState& model,
                                                            const SsdConfig& config,
                                                            bool master_on_ssd,
                                                            TierCounters* counters,
                                                            StorageEnv* env) {
  SsdStateConfig c;
  c.store = config;
  c.tiers = BlockTiers::all(model.num_blocks(),
                            master_on_ssd ? BlockTiers::kSsd : BlockTiers::kSsdMoments);
  return make_ssd_state(model, c, counters, env);
}

}  // namespace spillway
