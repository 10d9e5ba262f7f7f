#include "data/batch-iterator.h"

#include <algorithm>

namespace spillway {

Batch make_batch(const Dataset& ds, std::span<const size_t> indices, int rows) {
  Batch b;
  b.rows = rows;
  b.seq_len = ds.seq_len();
  const size_t T = static_cast<size_t>(b.seq_len);
  b.input_ids.assign(static_cast<size_t>(rows) * T, ds.pad_id());
  b.labels.assign(static_cast<size_t>(rows) * T, kIgnoreIndex);
  b.lengths.assign(static_cast<size_t>(rows), 0);
  b.indices.assign(static_cast<size_t>(rows), -1);
  const size_t used = std::min(indices.size(), static_cast<size_t>(rows));
  for (size_t r = 0; r < used; ++r) {
    const TokenSequence& s = ds[indices[r]];
    const size_t n = std::min(s.size(), T);
    std::copy_n(s.input_ids.begin(), n, b.input_ids.begin() + static_cast<ptrdiff_t>(r * T));
    std::copy_n(s.labels.begin(), n, b.labels.begin() + static_cast<ptrdiff_t>(r * T));
    b.lengths[r] = static_cast<int32_t>(n);
    b.indices[r] = static_cast<int64_t>(indices[r]);
    for (size_t t = 0; t < n; ++t) b.trained_tokens += s.labels[t] != kIgnoreIndex;
  }
  // Positions when a row packs several examples: each row's own, then the padding after them as
  // an example of its own (it sees no real token, and none sees it); other rows 0..T-1.
  const bool packed = std::any_of(indices.begin(), indices.begin() + static_cast<ptrdiff_t>(used),
                                  [&](size_t i) { return !ds[i].positions.empty(); });
  if (packed) {
    b.positions.resize(static_cast<size_t>(rows) * T);
    for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
      int32_t* p = b.positions.data() + r * T;
      size_t n = 0;
      if (r < used) {
        const std::vector<int32_t>& own = ds[indices[r]].positions;
        n = std::min(own.size(), T);
        std::copy_n(own.begin(), n, p);
      }
      for (size_t t = n; t < T; ++t) p[t] = static_cast<int32_t>(t - n);
    }
  }
  return b;
}

Batch make_batch_range(const Dataset& ds, size_t begin, int rows) {
  std::vector<size_t> idx;
  for (size_t i = begin; i < ds.size() && idx.size() < static_cast<size_t>(rows); ++i)
    idx.push_back(i);
  return make_batch(ds, idx, rows);
}

Result<BatchIterator> BatchIterator::create(const Dataset& ds, int micro_batch, uint64_t seed,
                                            bool shuffle) {
  if (ds.empty()) return invalid_argument("cannot iterate an empty dataset");
  if (micro_batch < 1)
    return invalid_argument("micro_batch must be at least 1, got " + std::to_string(micro_batch));
  DataCursor c;
  c.seed = seed;
  c.shuffle = shuffle;
  c.dataset_size = static_cast<int64_t>(ds.size());
  return BatchIterator(ds, micro_batch, c);
}

Status BatchIterator::seek(const DataCursor& c) {
  if (c.seed != cursor_.seed || c.shuffle != cursor_.shuffle ||
      c.dataset_size != cursor_.dataset_size)
    return invalid_argument(
        "data cursor does not match this dataset: saved seed " + std::to_string(c.seed) +
        ", shuffle " + (c.shuffle ? "on" : "off") + ", " + std::to_string(c.dataset_size) +
        " sequences; now seed " + std::to_string(cursor_.seed) + ", shuffle " +
        (cursor_.shuffle ? "on" : "off") + ", " + std::to_string(cursor_.dataset_size) +
        " sequences (the dataset, seq_len or eval split changed since the checkpoint)");
  if (c.index < 0 || c.index >= c.dataset_size || c.epoch < 0)
    return invalid_argument("data cursor position (epoch " + std::to_string(c.epoch) + ", index " +
                            std::to_string(c.index) + ") is out of range");
  cursor_ = c;
  return Status();
}

const std::vector<uint32_t>& BatchIterator::order_for(int64_t epoch) {
  if (epoch != order_epoch_) {
    order_ = epoch_order(ds_.size(), cursor_.seed, epoch, cursor_.shuffle);
    order_epoch_ = epoch;
  }
  return order_;
}

Batch BatchIterator::next() {
  std::vector<size_t> idx;
  idx.reserve(static_cast<size_t>(micro_batch_));
  while (idx.size() < static_cast<size_t>(micro_batch_)) {
    const std::vector<uint32_t>& order = order_for(cursor_.epoch);
    idx.push_back(order[static_cast<size_t>(cursor_.index)]);
    if (++cursor_.index == cursor_.dataset_size) {
      cursor_.index = 0;
      ++cursor_.epoch;
    }
  }
  return make_batch(ds_, idx, micro_batch_);
}

int64_t BatchIterator::batches_per_epoch() const {
  return (cursor_.dataset_size + micro_batch_ - 1) / micro_batch_;
}

}  // namespace spillway
