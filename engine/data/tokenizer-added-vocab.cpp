#include "data/tokenizer-added-vocab.h"

#include <algorithm>

#include "data/tokenizer-unicode.h"

namespace spillway {

namespace tu = tokenizer_unicode;

namespace {

// The code point that ends text[0, end) (U+0000 when empty).
char32_t last_char(std::string_view text, size_t end) {
  if (end == 0) return 0;
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return tu::utf8_next(text.substr(0, end), i);
}

bool is_word_char(char32_t c) {
  return c == '_' || tu::is_alphanumeric(c);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     const std::vector<std::string>& patterns)
    : tokens_(std::move(tokens)) {
  node_token_.push_back(-1);  // root
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : p) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | c;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        const int32_t child = static_cast<int32_t>(node_token_.size());
        node_token_.push_back(-1);
        edges_.emplace(key, child);
        node = child;
      } else {
        node = it->second;
      }
    }
    // With duplicate patterns the first token wins, like Aho-Corasick's pattern order.
    if (node_token_[node] < 0) node_token_[node] = static_cast<int32_t>(t);
    first_byte_[static_cast<unsigned char>(p[0])] = true;
  }
}

int AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& len) const {
  int best = -1;
  int32_t node = 0;
  for (size_t k = pos; k < text.size(); ++k) {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[k]));
    if (it == edges_.end()) break;
    node = it->second;
    if (node_token_[node] >= 0) {
      best = node_token_[node];
      len = k + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::find(std::string_view text, std::vector<AddedSplit>& out) const {
  if (text.empty()) return;
  size_t start_offset = 0;
  if (!tokens_.empty()) {
    size_t pos = 0;
    while (pos < text.size()) {
      if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      size_t len = 0;
      const int t = longest_at(text, pos, len);
      if (t < 0) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + len;
      pos = stop;  // matches never overlap, whether or not this one is kept
      const AddedToken& tok = tokens_[t];
      if (tok.single_word) {
        const bool start_space = start == 0 || !is_word_char(last_char(text, start));
        size_t i = stop;
        const bool stop_space = stop == text.size() || !is_word_char(tu::utf8_next(text, i));
        if (!start_space || !stop_space) continue;
      }
      if (tok.lstrip) {
        size_t s = start;
        while (s > 0) {
          size_t b = s - 1;
          while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
          size_t i = b;
          if (!tu::is_whitespace(tu::utf8_next(text, i))) break;
          s = b;
        }
        start = std::max(s, start_offset);
      }
      if (tok.rstrip) {
        while (stop < text.size()) {
          size_t i = stop;
          if (!tu::is_whitespace(tu::utf8_next(text, i))) break;
          stop = i;
        }
        pos = std::max(pos, stop);
      }
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, tok.id});
      start_offset = stop;
    }
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace spillway
