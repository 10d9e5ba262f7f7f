#include "data/tokenizer-normalizer.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "core/log.h"
#include "data/tokenizer-replace.h"
#include "data/tokenizer-unicode.h"

namespace spillway {

namespace tu = tokenizer_unicode;
using nlohmann::json;

namespace {

const char* form_name(tu::NormalForm f) {
  switch (f) {
    case tu::NormalForm::kNfc:
      return "NFC";
    case tu::NormalForm::kNfd:
      return "NFD";
    case tu::NormalForm::kNfkc:
      return "NFKC";
    case tu::NormalForm::kNfkd:
      return "NFKD";
  }
  return "?";
}

class NormalFormNormalizer final : public TokenizerNormalizer {
 public:
  explicit NormalFormNormalizer(tu::NormalForm f) : form_(f) {}
  Status normalize(std::string& s) const override {
    std::string out;
    if (!tu::normalize(form_, s, out))
      return invalid_argument(std::string("Unicode normalization (") + form_name(form_) +
                              ") failed on a piece of " + std::to_string(s.size()) +
                              " bytes (ICU)");
    s.swap(out);
    return {};
  }
  bool reversible() const override { return false; }

 private:
  tu::NormalForm form_;
};

class LowercaseNormalizer final : public TokenizerNormalizer {
 public:
  Status normalize(std::string& s) const override {
    s = tu::to_lower(s);
    return {};
  }
  bool reversible() const override { return false; }
};

class PrependNormalizer final : public TokenizerNormalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  Status normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend_);
    return {};
  }
  bool reversible() const override { return true; }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public TokenizerNormalizer {
 public:
  explicit ReplaceNormalizer(TokenizerReplace r) : replace_(std::move(r)) {}
  Status normalize(std::string& s) const override { return replace_.apply(s); }
  // " " -> "▁" (the SentencePiece convention) is undone by the Metaspace/Replace decoders.
  bool reversible() const override { return replace_.literal() == " "; }

 private:
  TokenizerReplace replace_;
};

class StripNormalizer final : public TokenizerNormalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status normalize(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t i = b;
        if (!tu::is_whitespace(tu::utf8_next(s, i))) break;
        b = i;
      }
    }
    if (right_) {
      while (e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!tu::is_whitespace(tu::utf8_next(s, i))) break;
        e = start;
      }
    }
    s = s.substr(b, e - b);
    return {};
  }
  bool reversible() const override { return false; }

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public TokenizerNormalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<TokenizerNormalizer>> n)
      : items_(std::move(n)) {}
  Status normalize(std::string& s) const override {
    for (const auto& n : items_) SPW_RETURN_IF_ERROR(n->normalize(s));
    return {};
  }
  bool reversible() const override {
    for (const auto& n : items_)
      if (!n->reversible()) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<TokenizerNormalizer>> items_;
};

}  // namespace

Result<std::unique_ptr<TokenizerNormalizer>> parse_normalizer(const json& j) {
  if (j.is_null()) return std::unique_ptr<TokenizerNormalizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return corrupt("normalizer: missing \"type\"");
  const std::string type = j["type"].get<std::string>();
  auto form = [&](tu::NormalForm f) -> Result<std::unique_ptr<TokenizerNormalizer>> {
    if (!tu::have_icu())
      log_warn("tokenizer: normalizer " + type +
               " needs ICU, which this build lacks; text is used as given");
    return std::unique_ptr<TokenizerNormalizer>(std::make_unique<NormalFormNormalizer>(f));
  };
  if (type == "NFC") return form(tu::NormalForm::kNfc);
  if (type == "NFD") return form(tu::NormalForm::kNfd);
  if (type == "NFKC") return form(tu::NormalForm::kNfkc);
  if (type == "NFKD") return form(tu::NormalForm::kNfkd);
  if (type == "Lowercase")
    return std::unique_ptr<TokenizerNormalizer>(std::make_unique<LowercaseNormalizer>());
  if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string())
      return corrupt("normalizer Prepend: missing \"prepend\"");
    return std::unique_ptr<TokenizerNormalizer>(
        std::make_unique<PrependNormalizer>(j["prepend"].get<std::string>()));
  }
  if (type == "Replace") {
    if (!j.contains("pattern") || !j.contains("content") || !j["content"].is_string())
      return corrupt("normalizer Replace: missing \"pattern\" or \"content\"");
    auto r = TokenizerReplace::parse(j["pattern"], j["content"].get<std::string>());
    if (!r.ok()) return r.status().with_context("normalizer Replace");
    return std::unique_ptr<TokenizerNormalizer>(
        std::make_unique<ReplaceNormalizer>(std::move(r).value()));
  }
  if (type == "Strip") {
    return std::unique_ptr<TokenizerNormalizer>(std::make_unique<StripNormalizer>(
        j.value("strip_left", true), j.value("strip_right", true)));
  }
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      return corrupt("normalizer Sequence: missing \"normalizers\"");
    std::vector<std::unique_ptr<TokenizerNormalizer>> items;
    for (const auto& n : j["normalizers"]) {
      SPW_ASSIGN_OR_RETURN(auto item, parse_normalizer(n));
      if (item) items.push_back(std::move(item));
    }
    return std::unique_ptr<TokenizerNormalizer>(
        std::make_unique<SequenceNormalizer>(std::move(items)));
  }
  return unsupported("normalizer type \"" + type + "\"");
}

}  // namespace spillway
