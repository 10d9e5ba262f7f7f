#include "data/packing.h"

#include <algorithm>

namespace spillway {

int64_t TokenSequence::trained_count() const {
  return static_cast<int64_t>(
      std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l != kIgnoreIndex; }));
}

TokenSequence shift_tokens(std::span<const int32_t> tokens, std::span<const uint8_t> trained) {
  TokenSequence s;
  if (tokens.size() < 2) return s;
  const size_t n = tokens.size() - 1;
  s.input_ids.assign(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(n));
  s.labels.resize(n);
  for (size_t t = 0; t < n; ++t) s.labels[t] = trained[t + 1] ? tokens[t + 1] : kIgnoreIndex;
  return s;
}

std::vector<TokenSequence> pack_stream(std::span<const int32_t> tokens,
                                       std::span<const uint8_t> trained, int seq_len,
                                       bool keep_tail, int64_t* dropped_positions) {
  std::vector<TokenSequence> out;
  if (dropped_positions) *dropped_positions = 0;
  if (tokens.size() < 2 || seq_len < 1) return out;
  const size_t T = static_cast<size_t>(seq_len);
  const size_t positions = tokens.size() - 1;
  out.reserve(positions / T + 1);
  size_t start = 0;
  for (; start + T <= positions; start += T)
    out.push_back(shift_tokens(tokens.subspan(start, T + 1), trained.subspan(start, T + 1)));
  const size_t tail = positions - start;
  if (tail > 0) {
    if (keep_tail) {
      out.push_back(shift_tokens(tokens.subspan(start), trained.subspan(start)));
    } else if (dropped_positions) {
      *dropped_positions = static_cast<int64_t>(tail);
    }
  }
  return out;
}

TokenSequence single_sequence(std::span<const int32_t> tokens, std::span<const uint8_t> trained,
                              int seq_len, bool* truncated) {
  const size_t keep = std::min(tokens.size(), static_cast<size_t>(seq_len) + 1);
  if (truncated) *truncated = keep < tokens.size();
  return shift_tokens(tokens.first(keep), trained.first(keep));
}

TokenSequence sequence_from_hf_labels(std::span<const int32_t> ids,
                                      std::span<const int32_t> hf_labels, int seq_len,
                                      bool* truncated) {
  TokenSequence s;
  if (truncated) *truncated = false;
  if (ids.size() < 2) return s;
  if (hf_labels.empty()) hf_labels = ids;
  size_t n = ids.size() - 1;
  if (n > static_cast<size_t>(seq_len)) {
    n = static_cast<size_t>(seq_len);
    if (truncated) *truncated = true;
  }
  s.input_ids.assign(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n));
  s.labels.assign(hf_labels.begin() + 1, hf_labels.begin() + 1 + static_cast<ptrdiff_t>(n));
  return s;
}

}  // namespace spillway
