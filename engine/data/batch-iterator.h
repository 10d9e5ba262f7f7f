// Batches: fixed-shape [rows, seq_len] blocks of input ids and labels for the trainer, and the
// BatchIterator that draws them from a Dataset in the deterministic, resumable order of a
// DataCursor.
//
// Training iterates an endless stream: a batch that reaches the end of an epoch continues with
// the start of the next epoch's order, so every batch is full and every sequence is seen once
// per epoch. Evaluation takes sequences in file order with make_batch_range; the last batch may
// have empty rows (all labels -100).
//
// A BatchIterator is a value owning a Dataset handle (shared, immutable sequences) and its
// cursor; it is not thread-safe (one owner advances it). Batches are plain values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "data/data-cursor.h"
#include "data/dataset.h"

namespace spillway {

struct Batch {
  int rows = 0;
  int seq_len = 0;
  std::vector<int32_t> input_ids;  // [rows, seq_len], pad id after each row's length
  std::vector<int32_t> labels;     // [rows, seq_len], target of each position or -100 (padding too)
  std::vector<int32_t> lengths;    // [rows] real positions of each row (0 for an empty row)
  std::vector<int64_t> indices;    // [rows] dataset index of each row (-1 for an empty row)
  // [rows, seq_len] each token's position within its example when some row packs several
  // (TokenSequence::positions; compute/backend.h, Positions), else empty (0..seq_len-1).
  std::vector<int32_t> positions;
  int64_t trained_tokens = 0;  // labels that are not -100: the loss's denominator
};

// A batch of the sequences `indices` (at most `rows` of them, each < ds.size()), padded to
// ds.seq_len(); rows beyond indices.size() are empty.
Batch make_batch(const Dataset& ds, std::span<const size_t> indices, int rows);
// The sequences [begin, begin + rows) in file order (clipped at ds.size()), for evaluation.
Batch make_batch_range(const Dataset& ds, size_t begin, int rows);

class BatchIterator {
 public:
  // Starts at epoch 0, index 0. kInvalidArgument for an empty dataset or micro_batch < 1.
  static Result<BatchIterator> create(const Dataset& ds, int micro_batch, uint64_t seed,
                                      bool shuffle = true);

  // Continues from a saved cursor. kInvalidArgument when its seed, shuffle flag or dataset
  // size differ from this iterator's (the dataset or the settings changed since the save).
  Status seek(const DataCursor& cursor);

  // The next micro-batch of `micro_batch` rows; advances the cursor.
  Batch next();

  // Where the next batch starts: save this with a checkpoint taken after the step that
  // consumed the last batch.
  const DataCursor& cursor() const { return cursor_; }
  int micro_batch() const { return micro_batch_; }
  // ceil(dataset size / micro_batch).
  int64_t batches_per_epoch() const;
  const Dataset& dataset() const { return ds_; }

 private:
  BatchIterator(Dataset ds, int micro_batch, DataCursor cursor)
      : ds_(std::move(ds)), micro_batch_(micro_batch), cursor_(cursor) {}
  const std::vector<uint32_t>& order_for(int64_t epoch);

  Dataset ds_;
  int micro_batch_ = 1;
  DataCursor cursor_;
  std::vector<uint32_t> order_;  // order of epoch order_epoch_
  int64_t order_epoch_ = -1;
};

}  // namespace spillway
