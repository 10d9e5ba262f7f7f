// Pre-tokenizers of a Hugging Face tokenizer.json ("pre_tokenizer"): split normalized text into
// the words that the BPE model encodes one by one. Supported, with the semantics of `tokenizers`
// (Rust):
//   ByteLevel   optional prefix space, the GPT-2 regex (use_regex), then every byte mapped to
//               GPT-2's printable code point (bytes_to_unicode);
//   Split       a String or Regex pattern (PCRE2, UTF + UCP: the Llama-3 / Qwen2 patterns with
//               \p{L} \p{N}) with behavior Removed / Isolated / MergedWithPrevious /
//               MergedWithNext / Contiguous and `invert`;
//   Metaspace   ' ' -> '▁', prepend_scheme always / first / never (or legacy add_prefix_space),
//               optional split before each '▁';
//   Digits, Whitespace, WhitespaceSplit, Sequence.
// Others are kUnsupported at load time.
//
// Immutable after parsing; pre_tokenize() is const and thread-safe.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace spillway {

// One piece of text on its way to the model.
struct PreToken {
  std::string text;
  // The piece begins at offset 0 of the original input (Metaspace prepend_scheme "first").
  bool at_start = false;
};

class TokenizerPreTokenizer {
 public:
  virtual ~TokenizerPreTokenizer() = default;
  // Replaces `pieces` by their splits (empty splits are dropped, as HF does). kInvalidArgument
  // when a pattern gives up on a piece (tokenizer-regex.h); `pieces` is then unusable.
  virtual Status pre_tokenize(std::vector<PreToken>& pieces) const = 0;
  // True for ByteLevel (alone or in a Sequence): every byte is representable.
  virtual bool byte_level() const { return false; }
};

// Parses a "pre_tokenizer" object; JSON null yields nullptr (the whole piece is one word).
Result<std::unique_ptr<TokenizerPreTokenizer>> parse_pre_tokenizer(const nlohmann::json& j);

}  // namespace spillway
