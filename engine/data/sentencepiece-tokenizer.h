// SentencePieceTokenizer: a tokenizer.model (SentencePiece ModelProto) run by libsentencepiece,
// for model folders that ship no tokenizer.json.
//
// encode() is SentencePiece's Encode (its own normalizer and dummy-prefix rule) with one change:
// the model's remove_extra_whitespaces flag is cleared at load, because HF's converter ignores
// it. For Llama-style models (identity normalization, add_dummy_prefix, byte_fallback) the ids
// then equal those of the converted tokenizer.json with add_special_tokens=False, except that
// SentencePiece never recognises control-token text such as "<s>" inside the input.
// encode_with_special() adds BOS (unless tokenizer_config.json says add_bos_token=false) and EOS
// when add_eos_token=true. decode() renders control tokens as their piece text (HF-like) unless
// skip_special.
//
// Immutable after load; SentencePieceProcessor's const methods are thread-safe, so every const
// method here is too. Owns the processor.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer-config.h"
#include "data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace spillway {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  ~SentencePieceTokenizer() override;

  // kNotFound when `path` does not exist; kCorrupt (naming the file and libsentencepiece's
  // message) when it is not a valid model.
  static Result<std::unique_ptr<SentencePieceTokenizer>> load(const std::string& path,
                                                              const TokenizerConfig& config);

  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  Result<std::vector<int32_t>> encode_with_special(std::string_view text) const override;
  Result<std::string> decode(std::span<const int32_t> ids,
                             bool skip_special = false) const override;

  int32_t vocab_size() const override;
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

 private:
  SentencePieceTokenizer();

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;  // for errors
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  bool add_bos_ = true, add_eos_ = false;
  std::string chat_template_;
  std::map<std::string, std::string> special_tokens_map_;
  bool lossless_ = false;
};

}  // namespace spillway
