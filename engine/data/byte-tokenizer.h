// ByteTokenizer: the built-in tokenizer for models trained from scratch without a tokenizer file
// (the README's default job): one id per UTF-8 byte (0..255), then <|endoftext|> = 256 (EOS) and
// <|begin_of_text|> = 257 (BOS). Lossless; immutable and thread-safe.
#pragma once

#include "data/tokenizer.h"

namespace spillway {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEos = 256;
  static constexpr int32_t kBos = 257;

  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  Result<std::vector<int32_t>> encode_with_special(std::string_view text) const override;
  Result<std::string> decode(std::span<const int32_t> ids,
                             bool skip_special = false) const override;
  int32_t vocab_size() const override { return 258; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::optional<int32_t> eos_id() const override { return kEos; }
  std::optional<int32_t> pad_id() const override { return kEos; }
  const std::string& chat_template() const override { return empty_; }
  bool lossless() const override { return true; }

 private:
  std::string empty_;
};

}  // namespace spillway
