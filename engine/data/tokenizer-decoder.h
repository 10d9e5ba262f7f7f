// Decoders of a Hugging Face tokenizer.json ("decoder"): token strings -> text, with the
// semantics of `tokenizers` (Rust) decode_chain. Supported: ByteLevel (GPT-2 code points back to
// bytes, then UTF-8 with U+FFFD for invalid sequences), Metaspace ('▁' -> ' ', the first token's
// dropped unless prepend_scheme is never), Replace, ByteFallback (<0xXX> runs to bytes; an
// invalid run gives one U+FFFD per byte), Fuse, Strip, BPEDecoder (suffix), Sequence.
//
// Immutable after parsing; decode_chain() is const and thread-safe.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace spillway {

class TokenizerDecoder {
 public:
  virtual ~TokenizerDecoder() = default;
  // Rewrites the token strings; the decoded text is the concatenation of the result.
  // kInvalidArgument when a Replace regex gives up on a token (tokenizer-regex.h).
  virtual Status decode_chain(std::vector<std::string>& tokens) const = 0;
  // True for a ByteLevel or ByteFallback step: decode reproduces arbitrary bytes.
  virtual bool restores_bytes() const { return false; }
};

// Parses a "decoder" object; JSON null yields nullptr (tokens are joined with ' ', as HF does).
Result<std::unique_ptr<TokenizerDecoder>> parse_decoder(const nlohmann::json& j);

}  // namespace spillway
