// Normalizers of a Hugging Face tokenizer.json ("normalizer"): text -> text before
// pre-tokenization. Supported types, with the semantics of `tokenizers` (Rust):
// NFC, NFD, NFKC, NFKD (ICU), Lowercase, Prepend, Replace (String or Regex pattern), Strip
// (Unicode whitespace), Sequence. Anything else is kUnsupported at load time.
//
// HF applies the normalizer to each piece of text between added tokens separately (so Prepend
// adds its "▁" to every such piece); the caller does the splitting. Normalizers are immutable
// after parsing; normalize() is const and thread-safe.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/status.h"

namespace spillway {

class TokenizerNormalizer {
 public:
  virtual ~TokenizerNormalizer() = default;
  // Rewrites `s` (UTF-8) in place. kInvalidArgument when a step cannot process this text (a
  // Replace regex that gives up, ICU failing on a Unicode form); `s` is then unusable.
  virtual Status normalize(std::string& s) const = 0;
  // False when the normalizer can change text in a way decode cannot undo (Unicode forms,
  // lowercasing, stripping); Prepend/Replace of the Metaspace kind count as reversible.
  virtual bool reversible() const = 0;
};

// Parses a "normalizer" object; a JSON null yields nullptr (no normalizer). kUnsupported names
// the type; kCorrupt names the missing field.
Result<std::unique_ptr<TokenizerNormalizer>> parse_normalizer(const nlohmann::json& j);

}  // namespace spillway
