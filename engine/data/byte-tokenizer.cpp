#include "data/byte-tokenizer.h"

namespace spillway {

Result<std::vector<int32_t>> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

Result<std::vector<int32_t>> ByteTokenizer::encode_with_special(std::string_view text) const {
  std::vector<int32_t> ids{kBos};
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

Result<std::string> ByteTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < 256)
      out.push_back(static_cast<char>(id));
    else if (!skip_special)
      out += id_to_token(id);
  }
  return out;
}

std::optional<int32_t> ByteTokenizer::token_to_id(std::string_view token) const {
  if (token == "<|endoftext|>") return kEos;
  if (token == "<|begin_of_text|>") return kBos;
  if (token.size() == 1) return static_cast<unsigned char>(token[0]);
  return std::nullopt;
}

std::string ByteTokenizer::id_to_token(int32_t id) const {
  if (id == kEos) return "<|endoftext|>";
  if (id == kBos) return "<|begin_of_text|>";
  if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
  return "";
}

}  // namespace spillway
