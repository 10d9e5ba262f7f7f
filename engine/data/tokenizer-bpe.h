// BpeModel: the "model" of a Hugging Face tokenizer.json with type BPE: a vocabulary
// (token string -> id) and ranked merges, applied to one pre-tokenized word at a time.
//
// Encoding a word follows `tokenizers` (models/bpe/model.rs and word.rs): with ignore_merges a
// word that is itself in the vocabulary is one token (Llama-3); otherwise the word is split into
// characters (each looked up, else its bytes as <0xXX> tokens with byte_fallback, else the unk
// token, consecutive unks fused with fuse_unk), then merges are applied lowest rank first using
// a min-heap of candidate pairs over a linked list of symbols (O(n log n) per word). Results of
// words up to 256 bytes are memoised in a sharded cache.
//
// Thread-safety: immutable after load except for the cache, which is guarded by per-shard
// mutexes, so tokenize() may be called from many threads. Not copyable (owns the cache).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace spillway {

// Hash for heterogeneous lookup (find(std::string_view) on a map keyed by std::string).
struct TokenizerStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenizerVocab =
    std::unordered_map<std::string, int32_t, TokenizerStringHash, std::equal_to<>>;

class BpeModel {
 public:
  BpeModel() = default;
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Parses a "model" object of type BPE. Merges may be "a b" strings or ["a", "b"] pairs.
  // kCorrupt names the field or the merge that is wrong (a merge whose parts or result are not
  // in the vocabulary, or vocabulary ids mostly unused, as in an id of 1e9 among 300 tokens, which
  // would size the id table); kUnsupported for another model type.
  static Result<std::unique_ptr<BpeModel>> from_json(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized word (UTF-8) to `out`. Empty words add nothing.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr for an id outside the vocabulary.
  const std::string* id_to_token(int32_t id) const;
  // Max id + 1 of the model vocabulary (added tokens may extend it).
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  bool byte_fallback() const { return byte_fallback_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Splits `word` into initial symbols (HF BPE::merge_word before merge_all).
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  // Applies merges in rank order to `ids` in place (HF Word::merge_all).
  void merge_all(std::vector<int32_t>& ids) const;

  TokenizerVocab vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> tokens, -1 when absent
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;

  struct CacheShard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, TokenizerStringHash, std::equal_to<>> map;
  };
  static constexpr size_t kCacheShards = 16;
  static constexpr size_t kCacheShardCapacity = 4096;
  static constexpr size_t kCacheMaxWordBytes = 256;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace spillway
