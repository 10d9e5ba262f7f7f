// Tokenizer: text <-> token ids, exactly as Hugging Face `tokenizers` (tokenizer.json) or
// SentencePiece (tokenizer.model) produce them.
//
// Implementations: BPE from tokenizer.json (byte-level as GPT-2 / Llama-3 / Qwen, or
// SentencePiece-style metaspace with byte fallback as Llama-2 / Mistral), and libsentencepiece for
// a tokenizer.model. A loaded tokenizer is immutable: every const method is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spillway {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads `path`: a tokenizer.json, a tokenizer.model, or a model folder (tokenizer.json is
  // preferred, then tokenizer.model; tokenizer_config.json beside it supplies bos/eos/pad and
  // the chat template when present). kNotFound names the folder and the files looked for;
  // kCorrupt/kUnsupported name the file and the field.
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& path);

  // Ids of `text` as HF `tokenizer(text, add_special_tokens=False)`: added/special tokens written
  // in the text are recognised and split out, but no BOS/EOS is added. kInvalidArgument naming
  // the tokenizer file, the pattern and the piece of text when the text cannot be tokenized as
  // the tokenizer defines it: a pre-tokenizer or normalizer regex on which PCRE2 gives up (its
  // match limit; HF's Oniguruma has none, so no result would match HF's), or a Unicode
  // normalization that fails. Never a silently different split.
  virtual Result<std::vector<int32_t>> encode(std::string_view text) const = 0;
  // As HF with add_special_tokens=True: the post-processor's BOS/EOS around encode(text).
  virtual Result<std::vector<int32_t>> encode_with_special(std::string_view text) const = 0;
  // Text of `ids`; with skip_special, special tokens are dropped (HF skip_special_tokens).
  // kInvalidArgument when a decoder's Replace regex gives up on a token (as encode).
  virtual Result<std::string> decode(std::span<const int32_t> ids,
                                     bool skip_special = false) const = 0;

  // Number of ids, including added tokens (max id + 1).
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // The token's string as stored in the vocabulary ("" for an unknown id).
  virtual std::string id_to_token(int32_t id) const = 0;

  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  virtual std::optional<int32_t> pad_id() const = 0;
  // The Jinja chat template of tokenizer_config.json, empty when none was found.
  virtual const std::string& chat_template() const = 0;
  // The named special tokens a chat template sees as variables (bos_token, eos_token, ...: as
  // transformers' special_tokens_map), from tokenizer_config.json and special_tokens_map.json.
  // Empty for tokenizers without those files.
  virtual const std::map<std::string, std::string>& special_tokens_map() const;
  // True when decode(encode(x)) == x for every UTF-8 x (byte-level BPE, byte-fallback SPM
  // without normalisation that loses information). Exceptions common to HF: with a Metaspace /
  // Prepend("▁") tokenizer, text that itself contains U+2581 or spells an added token.
  // A Unicode normalizer (Qwen's NFC) makes this false even though NFC text round-trips.
  // tokenizer.model: probed at load on text with space runs, ligatures and emoji.
  virtual bool lossless() const = 0;
};

}  // namespace spillway
