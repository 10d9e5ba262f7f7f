// JsonTokenizer: a Hugging Face tokenizer.json with a BPE model, run through the same pipeline as
// `tokenizers` (Rust) Tokenizer::encode:
//   1. added tokens with normalized=false are split out of the raw text;
//   2. each remaining piece is normalized, and added tokens with normalized=true are split out;
//   3. each remaining piece is pre-tokenized into words;
//   4. each word is encoded by the BPE model (tokenizer-bpe.h);
//   5. encode_with_special() applies the post-processor's template.
// decode() maps ids to token strings (added tokens first, then the model), drops special tokens
// when asked, and runs the decoder chain. Input that is not valid UTF-8 is repaired first
// (U+FFFD per invalid subpart), since HF only accepts valid strings.
//
// Immutable after load; every const method is thread-safe (the BPE word cache locks per shard).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer-added-vocab.h"
#include "data/tokenizer-bpe.h"
#include "data/tokenizer-config.h"
#include "data/tokenizer-decoder.h"
#include "data/tokenizer-normalizer.h"
#include "data/tokenizer-post-processor.h"
#include "data/tokenizer-pretokenizer.h"
#include "data/tokenizer.h"

namespace spillway {

class JsonTokenizer final : public Tokenizer {
 public:
  // Parses the contents of a tokenizer.json; `source` names it in errors. `config` supplies
  // bos/eos/pad and the chat template (may be empty). kCorrupt: invalid JSON or a bad field (the
  // message names it); kUnsupported: a model, normalizer, pre-tokenizer, decoder or
  // post-processor type that is not implemented.
  static Result<std::unique_ptr<JsonTokenizer>> from_json_text(std::string_view text,
                                                               const std::string& source,
                                                               const TokenizerConfig& config);

  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  Result<std::vector<int32_t>> encode_with_special(std::string_view text) const override;
  Result<std::string> decode(std::span<const int32_t> ids,
                             bool skip_special = false) const override;

  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;

  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::optional<int32_t> pad_id() const override { return pad_id_; }
  const std::string& chat_template() const override { return chat_template_; }
  const std::map<std::string, std::string>& special_tokens_map() const override {
    return special_tokens_map_;
  }
  bool lossless() const override { return lossless_; }

  // The added tokens as listed in the file.
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  JsonTokenizer() = default;

  std::string source_;  // the file, for errors
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<TokenizerNormalizer> normalizer_;
  std::unique_ptr<TokenizerPreTokenizer> pre_tokenizer_;
  std::unique_ptr<TokenizerDecoder> decoder_;
  TokenizerPostProcessor post_processor_;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;  // id -> index into added_
  TokenizerVocab added_by_content_;                  // content -> id
  AddedTokenMatcher raw_matcher_;                    // normalized=false tokens
  AddedTokenMatcher normalized_matcher_;             // normalized=true tokens
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  std::string chat_template_;
  std::map<std::string, std::string> special_tokens_map_;
  bool lossless_ = false;
};

}  // namespace spillway
