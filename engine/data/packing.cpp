#include "data/packing.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace spillway {

int64_t TokenSequence::trained_count() const {
  return static_cast<int64_t>(
      std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l != kIgnoreIndex; }));
}

int64_t TokenSequence::example_count() const {
  if (positions.empty()) return input_ids.empty() ? 0 : 1;
  return std::count(positions.begin(), positions.end(), 0);
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

std::vector<TokenSequence> pack_examples(std::vector<TokenSequence> examples, int seq_len) {
  std::vector<size_t> order;  // non-empty examples, longest first, ties in file order
  for (size_t i = 0; i < examples.size(); ++i)
    if (!examples[i].input_ids.empty()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return examples[a].size() > examples[b].size(); });
  // Best fit: the open sequence with the least room that holds the example (ties: the first
  // opened), else a new one.
  const size_t capacity = static_cast<size_t>(std::max(seq_len, 0));
  std::vector<std::vector<size_t>> bins;  // example indices of each sequence
  std::vector<size_t> used;               // positions taken in each sequence
  std::multimap<size_t, size_t> room;     // room left -> bin
  for (size_t i : order) {
    const size_t n = examples[i].size();
    auto it = room.lower_bound(n);
    size_t bin = bins.size();
    if (it == room.end()) {
      bins.emplace_back();
      used.push_back(0);
    } else {
      bin = it->second;
      room.erase(it);
    }
    bins[bin].push_back(i);
    used[bin] += n;
    if (used[bin] < capacity) room.emplace(capacity - used[bin], bin);
  }
  // Examples in file order within each sequence, sequences in the order of their first example.
  for (std::vector<size_t>& b : bins) std::sort(b.begin(), b.end());
  std::sort(bins.begin(), bins.end(), [](const auto& a, const auto& b) { return a[0] < b[0]; });
  std::vector<TokenSequence> out(bins.size());
  for (size_t s = 0; s < bins.size(); ++s) {
    TokenSequence& seq = out[s];
    for (size_t i : bins[s]) {
      TokenSequence& e = examples[i];
      seq.input_ids.insert(seq.input_ids.end(), e.input_ids.begin(), e.input_ids.end());
      seq.labels.insert(seq.labels.end(), e.labels.begin(), e.labels.end());
      const size_t at = seq.positions.size();
      seq.positions.resize(at + e.size());
      std::iota(seq.positions.begin() + static_cast<ptrdiff_t>(at), seq.positions.end(), 0);
      e = TokenSequence();  // free as we go
    }
    if (bins[s].size() == 1) seq.positions.clear();  // one example: the default positions
  }
  return out;
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
