// TokenizerRegex: a PCRE2 pattern compiled with PCRE2_UTF | PCRE2_UCP (so \p{L}, \p{N}, \s and
// case folding follow Unicode, as the Oniguruma regexes of Hugging Face `tokenizers` do) and
// JIT-compiled when the platform allows, used by the Split pre-tokenizer, the Replace normalizer
// and decoder.
//
// Immutable after compile(); find_all() is const and thread-safe (match data is per call).
// A failed match is an error the tokenizer returns from encode(), never a silently unsplit text.
// Move-only: owns the pcre2_code.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

typedef struct pcre2_real_code_8 pcre2_code_8;

namespace spillway {

class TokenizerRegex {
 public:
  TokenizerRegex() = default;
  ~TokenizerRegex();
  TokenizerRegex(TokenizerRegex&& o) noexcept;
  TokenizerRegex& operator=(TokenizerRegex&& o) noexcept;
  TokenizerRegex(const TokenizerRegex&) = delete;
  TokenizerRegex& operator=(const TokenizerRegex&) = delete;

  // kInvalidArgument with PCRE2's message and the offset when `pattern` does not compile.
  static Result<TokenizerRegex> compile(const std::string& pattern);
  // A literal pattern (HF's {"String": ...}): every character is escaped.
  static Result<TokenizerRegex> literal(std::string_view text);

  // Calls on_match(start, end) for each successive non-overlapping match in `text` (byte
  // offsets), as Rust's find_iter: an empty match advances by one character. `text` must be
  // valid UTF-8. When PCRE2 gives up (its match limit, depth or heap limit, or the 8 MiB JIT
  // stack: a pattern that backtracks catastrophically on this text), the matches reported so far
  // stand and kInvalidArgument names the pattern, the text and PCRE2's reason; the caller must
  // not use a partial split (Oniguruma, which HF `tokenizers` uses, has no such limit, so there is
  // no result to match).
  Status find_all(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  pcre2_code_8* code_ = nullptr;
  bool jit_ = false;
  std::string pattern_;
};

}  // namespace spillway
