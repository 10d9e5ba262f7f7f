// AddedVocabulary: the "added_tokens" of a tokenizer.json (special tokens such as <|eot_id|>, and
// non-special ones such as Qwen's <think>), found in the text and split out before
// normalization and BPE, as Hugging Face `tokenizers` (tokenizer/added_vocabulary.rs) does:
//   - leftmost-longest matching over all added tokens (HF uses Aho-Corasick LeftmostLongest;
//     here a byte trie scanned from each position, with a first-byte filter);
//   - tokens with normalized=false match the raw text; tokens with normalized=true match the
//     normalized text (their content normalized by the same normalizer) in a second pass;
//   - single_word drops a match that touches a word character (alphanumeric or '_') on either
//     side; lstrip / rstrip extend a match over the whitespace on its left / right.
//
// Immutable after construction; find() is const and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace spillway {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A byte span of the searched text: an added token (id >= 0) or plain text (id == -1).
struct AddedSplit {
  size_t begin, end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the text to find for `tokens[i]` (its content, normalized for the
  // normalized=true pass).
  AddedTokenMatcher(std::vector<AddedToken> tokens, const std::vector<std::string>& patterns);

  bool empty() const { return tokens_.empty(); }
  // Splits `text` into added-token and plain spans covering it in order (HF find_matches);
  // empty text yields no spans.
  void find(std::string_view text, std::vector<AddedSplit>& out) const;

 private:
  // Index into tokens_ of the longest pattern starting at text[pos], or -1.
  int longest_at(std::string_view text, size_t pos, size_t& len) const;

  std::vector<AddedToken> tokens_;
  std::vector<int32_t> node_token_;              // per trie node: token index or -1
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  bool first_byte_[256] = {};
};

}  // namespace spillway
