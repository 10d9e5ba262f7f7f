// A byte-level stand-in for Tokenizer in dataset tests: every UTF-8 byte b is token b + 3,
// 0 = <unk>/pad, 1 = BOS, 2 = EOS. Token counts are therefore byte counts, which lets tests
// compute expected figures independently of the code under test.
#pragma once

#include <string>

#include "data/tokenizer.h"

namespace spillway::testing {

class FakeByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kBos = 1, kEos = 2, kOffset = 3;

  explicit FakeByteTokenizer(std::string chat_template = "", bool has_bos = true,
                             bool has_eos = true)
      : chat_template_(std::move(chat_template)), has_bos_(has_bos), has_eos_(has_eos) {}

  Result<std::vector<int32_t>> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c) + kOffset);
    return ids;
  }
  Result<std::vector<int32_t>> encode_with_special(std::string_view text) const override {
    std::vector<int32_t> ids{kBos};
    auto body = encode(text);
    ids.insert(ids.end(), body->begin(), body->end());
    return ids;
  }
  Result<std::string> decode(std::span<const int32_t> ids,
                             bool skip_special = false) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id >= kOffset)
        s.push_back(static_cast<char>(id - kOffset));
      else if (!skip_special)
        s += id == kBos ? "<s>" : id == kEos ? "</s>" : "<unk>";
    }
    return s;
  }
  int32_t vocab_size() const override { return 256 + kOffset; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (token == "<s>") return kBos;
    if (token == "</s>") return kEos;
    if (token.size() == 1) return static_cast<unsigned char>(token[0]) + kOffset;
    return std::nullopt;
  }
  std::string id_to_token(int32_t id) const override {
    return *decode(std::span<const int32_t>(&id, 1));
  }
  std::optional<int32_t> bos_id() const override {
    return has_bos_ ? std::optional<int32_t>(kBos) : std::nullopt;
  }
  std::optional<int32_t> eos_id() const override {
    return has_eos_ ? std::optional<int32_t>(kEos) : std::nullopt;
  }
  std::optional<int32_t> pad_id() const override { return std::nullopt; }
  const std::string& chat_template() const override { return chat_template_; }
  bool lossless() const override { return true; }

 private:
  std::string chat_template_;
  bool has_bos_, has_eos_;
};

}  // namespace spillway::testing
