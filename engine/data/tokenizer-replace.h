// TokenizerReplace: Hugging Face's Replace, the same in the normalizer and the decoder: every
// non-overlapping match of a {"String": s} or {"Regex": r} pattern becomes `content`. A String
// pattern is matched as plain bytes (std::string::find), a Regex through PCRE2 (tokenizer-regex.h).
// Immutable after parse(); apply() is const and thread-safe.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/status.h"
#include "data/tokenizer-regex.h"

namespace spillway {

class TokenizerReplace {
 public:
  // kCorrupt for a pattern that is neither {"String": non-empty} nor {"Regex": r}; PCRE2's
  // kInvalidArgument for a regex that does not compile.
  static Result<TokenizerReplace> parse(const nlohmann::json& pattern, std::string content);

  // Replaces every match in `s`, in place. A Regex pattern's matching failure (find_all) is
  // returned and leaves `s` unchanged.
  Status apply(std::string& s) const;

  // The String pattern, empty for a Regex one.
  const std::string& literal() const { return literal_; }

 private:
  std::string literal_;
  TokenizerRegex re_;
  std::string content_;
};

}  // namespace spillway
