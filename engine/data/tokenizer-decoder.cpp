#include "data/tokenizer-decoder.h"

#include <nlohmann/json.hpp>

#include "data/tokenizer-replace.h"
#include "data/tokenizer-unicode.h"

namespace spillway {

namespace tu = tokenizer_unicode;
using nlohmann::json;

namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

class ByteLevelDecoder final : public TokenizerDecoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      // A token whose characters are not all in the table (an added token such as "<|x|>" is
      // fine: ASCII maps to itself) is taken as raw UTF-8, as HF does.
      const size_t mark = bytes.size();
      bool all = true;
      size_t i = 0;
      while (i < t.size()) {
        const int b = tu::unicode_to_byte(tu::utf8_next(t, i));
        if (b < 0) {
          all = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!all) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, tu::utf8_valid(bytes) ? bytes : tu::utf8_repair(bytes));
    return {};
  }
  bool restores_bytes() const override { return true; }
};

class MetaspaceDecoder final : public TokenizerDecoder {
 public:
  MetaspaceDecoder(std::string rep, bool strip_first)
      : rep_(std::move(rep)), strip_first_(strip_first) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string out;
      const std::string& t = tokens[k];
      for (size_t pos = 0;;) {
        const size_t f = t.find(rep_, pos);
        out.append(t, pos, f == std::string::npos ? std::string::npos : f - pos);
        if (f == std::string::npos) break;
        if (!(k == 0 && strip_first_)) out.push_back(' ');
        pos = f + rep_.size();
      }
      tokens[k].swap(out);
    }
    return {};
  }

 private:
  std::string rep_;
  bool strip_first_;
};

class ReplaceDecoder final : public TokenizerDecoder {
 public:
  explicit ReplaceDecoder(TokenizerReplace r) : replace_(std::move(r)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) SPW_RETURN_IF_ERROR(replace_.apply(t));
    return {};
  }

 private:
  TokenizerReplace replace_;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class ByteFallbackDecoder final : public TokenizerDecoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (tu::utf8_valid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back(kReplacementChar);
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex_digit(t[3]) >= 0 &&
          hex_digit(t[4]) >= 0) {
        pending.push_back(static_cast<char>(hex_digit(t[3]) * 16 + hex_digit(t[4])));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens.swap(out);
    return {};
  }
  bool restores_bytes() const override { return true; }
};

class FuseDecoder final : public TokenizerDecoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
    return {};
  }
};

class StripDecoder final : public TokenizerDecoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && b < e && t.compare(b, content_.size(), content_) == 0; ++k)
        b += content_.size();
      for (size_t k = 0; k < stop_ && e >= b + content_.size() &&
                         t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++k)
        e -= content_.size();
      t = t.substr(b, e - b);
    }
    return {};
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class BpeSuffixDecoder final : public TokenizerDecoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string& t = tokens[k];
      const std::string rep = k + 1 == tokens.size() ? "" : " ";
      std::string out;
      size_t pos = 0;
      for (size_t f; (f = t.find(suffix_, pos)) != std::string::npos; pos = f + suffix_.size()) {
        out.append(t, pos, f - pos);
        out += rep;
      }
      out.append(t, pos, std::string::npos);
      t.swap(out);
    }
    return {};
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public TokenizerDecoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<TokenizerDecoder>> d)
      : items_(std::move(d)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) SPW_RETURN_IF_ERROR(d->decode_chain(tokens));
    return {};
  }
  bool restores_bytes() const override {
    for (const auto& d : items_)
      if (d->restores_bytes()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<TokenizerDecoder>> items_;
};

}  // namespace

Result<std::unique_ptr<TokenizerDecoder>> parse_decoder(const json& j) {
  using Ptr = std::unique_ptr<TokenizerDecoder>;
  if (j.is_null()) return Ptr();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return corrupt("decoder: missing \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return Ptr(std::make_unique<ByteLevelDecoder>());
  if (type == "ByteFallback") return Ptr(std::make_unique<ByteFallbackDecoder>());
  if (type == "Fuse") return Ptr(std::make_unique<FuseDecoder>());
  if (type == "Metaspace") {
    bool strip_first = true;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string())
      strip_first = j["prepend_scheme"].get<std::string>() != "never";
    else if (j.contains("add_prefix_space"))
      strip_first = j.value("add_prefix_space", true);
    return Ptr(std::make_unique<MetaspaceDecoder>(
        j.value("replacement", std::string("\xE2\x96\x81")), strip_first));
  }
  if (type == "Replace") {
    if (!j.contains("pattern") || !j["pattern"].is_object() || !j.contains("content") ||
        !j["content"].is_string())
      return corrupt("decoder Replace: missing \"pattern\" or \"content\"");
    auto r = TokenizerReplace::parse(j["pattern"], j["content"].get<std::string>());
    if (!r.ok()) return r.status().with_context("decoder Replace");
    return Ptr(std::make_unique<ReplaceDecoder>(std::move(r).value()));
  }
  if (type == "Strip") {
    const std::string content = j.value("content", std::string(" "));
    if (content.empty()) return corrupt("decoder Strip: empty \"content\"");
    return Ptr(std::make_unique<StripDecoder>(content, j.value("start", size_t{0}),
                                              j.value("stop", size_t{0})));
  }
  if (type == "BPEDecoder")
    return Ptr(std::make_unique<BpeSuffixDecoder>(j.value("suffix", std::string("</w>"))));
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array())
      return corrupt("decoder Sequence: missing \"decoders\"");
    std::vector<Ptr> items;
    for (const auto& d : j["decoders"]) {
      SPW_ASSIGN_OR_RETURN(auto item, parse_decoder(d));
      if (item) items.push_back(std::move(item));
    }
    return Ptr(std::make_unique<SequenceDecoder>(std::move(items)));
  }
  return unsupported("decoder type \"" + type + "\"");
}

}  // namespace spillway
