// DatasetStats: token-length statistics of a loaded dataset, for the new-run page's histogram
// and preview, the planner (tokens per epoch) and the log.
//
// Counts are filled by Dataset while loading and are plain values afterwards (copyable, no
// shared state). "Example" means one record: a document for text formats, a rendered
// conversation for chat formats, a token list for pre-tokenized data.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/dataset-reader.h"

namespace spillway {

struct DatasetStats {
  int64_t records = 0;              // examples tokenized
  int64_t skipped = 0;              // bad records left out (reader and tokenizer passes together)
  std::vector<RecordIssue> issues;  // the first few of them, "FILE:LINE: reason"
  int64_t sequences = 0;            // training sequences made

  // [records] tokens of each example before truncation, including BOS/EOS and template text.
  std::vector<int32_t> example_tokens;
  int64_t total_tokens = 0;       // sum of example_tokens
  int64_t truncated = 0;          // examples longer than seq_len + 1 tokens, cut (not packed)
  int64_t positions = 0;          // sum of sequence lengths: positions the model sees
  int64_t trained_tokens = 0;     // positions with a label (not -100)
  int64_t dropped_positions = 0;  // targets lost to truncation or a dropped packing tail

  int32_t max_example_tokens() const;
  double mean_example_tokens() const;
  // Counts of example_tokens in `bins` equal bins over [0, upper] (upper <= 0: the maximum);
  // longer examples fall into the last bin. Empty when bins < 1.
  std::vector<int64_t> histogram(int bins, int32_t upper = 0) const;
  // Counts only, no per-example list: {"records", "skipped", "sequences", "total_tokens",
  // "truncated", "positions", "trained_tokens", "dropped_positions", "max_example_tokens",
  // "mean_example_tokens", "issues": ["FILE:LINE: reason", ...]}.
  nlohmann::json summary_json() const;
};

}  // namespace spillway
