#include "data/tokenizer-pretokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "data/tokenizer-regex.h"
#include "data/tokenizer-unicode.h"

namespace spillway {

namespace tu = tokenizer_unicode;
using nlohmann::json;

namespace {

// GPT-2's pattern, as HF's ByteLevel pre-tokenizer uses it.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin, end;
  bool match;
};

// The spans of `text` that match / do not match, covering it (HF Pattern::find_matches).
Result<std::vector<Span>> find_spans(const TokenizerRegex& re, std::string_view text, bool invert) {
  std::vector<Span> spans;
  size_t prev = 0;
  SPW_RETURN_IF_ERROR(re.find_all(text, [&](size_t b, size_t e) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }));
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});
  return spans;
}

// Appends the splits of `piece` to `out` according to `behavior`
// (HF NormalizedString::split).
void split_piece(const PreToken& piece, const std::vector<Span>& spans, SplitBehavior behavior,
                 std::vector<PreToken>& out) {
  struct Cut {
    size_t begin, end;
    bool remove;
  };
  std::vector<Cut> cuts;
  cuts.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& s : spans) cuts.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : spans) cuts.push_back({s.begin, s.end, s.match});
      break;
    case SplitBehavior::kContiguous: {
      bool prev = false;
      for (const auto& s : spans) {
        if (s.match == prev && !cuts.empty())
          cuts.back().end = s.end;
        else
          cuts.push_back({s.begin, s.end, false});
        prev = s.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev = false;
      for (const auto& s : spans) {
        if (s.match && !prev && !cuts.empty())
          cuts.back().end = s.end;
        else
          cuts.push_back({s.begin, s.end, false});
        prev = s.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !prev && !cuts.empty())
          cuts.back().begin = it->begin;
        else
          cuts.push_back({it->begin, it->end, false});
        prev = it->match;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
    }
  }
  for (const auto& c : cuts) {
    if (c.remove || c.end == c.begin) continue;
    out.push_back({piece.text.substr(c.begin, c.end - c.begin), piece.at_start && c.begin == 0});
  }
}

class SplitPreTokenizer final : public TokenizerPreTokenizer {
 public:
  SplitPreTokenizer(TokenizerRegex re, SplitBehavior b, bool invert)
      : re_(std::move(re)), behavior_(b), invert_(invert) {}
  Status pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    out.reserve(pieces.size() * 4);
    for (const auto& p : pieces) {
      SPW_ASSIGN_OR_RETURN(const std::vector<Span> spans, find_spans(re_, p.text, invert_));
      split_piece(p, spans, behavior_, out);
    }
    pieces.swap(out);
    return {};
  }

 private:
  TokenizerRegex re_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public TokenizerPreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<TokenizerRegex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  Status pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_) {
      for (auto& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
    }
    if (re_) {
      std::vector<PreToken> out;
      out.reserve(pieces.size() * 4);
      for (const auto& p : pieces) {
        SPW_ASSIGN_OR_RETURN(const std::vector<Span> spans, find_spans(*re_, p.text, false));
        split_piece(p, spans, SplitBehavior::kIsolated, out);
      }
      pieces.swap(out);
    }
    const auto& table = tu::byte_to_utf8();
    for (auto& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char c : p.text) mapped += table[c];
      p.text.swap(mapped);
    }
    return {};
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<TokenizerRegex> re_;  // null when use_regex is false
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public TokenizerPreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split,
                        TokenizerRegex re)
      : rep_(std::move(replacement)), scheme_(scheme), split_(split), re_(std::move(re)) {}
  Status pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    out.reserve(pieces.size() * 4);
    for (auto& p : pieces) {
      std::string t;
      t.reserve(p.text.size() + 8);
      for (char c : p.text) {
        if (c == ' ')
          t += rep_;
        else
          t.push_back(c);
      }
      const bool starts = t.compare(0, rep_.size(), rep_) == 0;
      if (!starts &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start)))
        t.insert(0, rep_);
      PreToken np{std::move(t), p.at_start};
      if (split_) {
        SPW_ASSIGN_OR_RETURN(const std::vector<Span> spans, find_spans(re_, np.text, false));
        split_piece(np, spans, SplitBehavior::kMergedWithNext, out);
      } else if (!np.text.empty()) {
        out.push_back(std::move(np));
      }
    }
    pieces.swap(out);
    return {};
  }

 private:
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
  TokenizerRegex re_;  // the replacement as a literal
};

class SequencePreTokenizer final : public TokenizerPreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<TokenizerPreTokenizer>> items)
      : items_(std::move(items)) {}
  Status pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : items_) SPW_RETURN_IF_ERROR(p->pre_tokenize(pieces));
    return {};
  }
  bool byte_level() const override {
    for (const auto& p : items_)
      if (p->byte_level()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<TokenizerPreTokenizer>> items_;
};

Result<SplitBehavior> parse_behavior(const json& j) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return unsupported("pre_tokenizer Split: behavior \"" + b + "\"");
}

std::unique_ptr<TokenizerPreTokenizer> make_split(TokenizerRegex re, SplitBehavior b, bool invert) {
  return std::make_unique<SplitPreTokenizer>(std::move(re), b, invert);
}

}  // namespace

Result<std::unique_ptr<TokenizerPreTokenizer>> parse_pre_tokenizer(const json& j) {
  using Ptr = std::unique_ptr<TokenizerPreTokenizer>;
  if (j.is_null()) return Ptr();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return corrupt("pre_tokenizer: missing \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") {
    std::unique_ptr<TokenizerRegex> re;
    if (j.value("use_regex", true)) {
      SPW_ASSIGN_OR_RETURN(auto r, TokenizerRegex::compile(kGpt2Pattern));
      re = std::make_unique<TokenizerRegex>(std::move(r));
    }
    return Ptr(
        std::make_unique<ByteLevelPreTokenizer>(j.value("add_prefix_space", true), std::move(re)));
  }
  if (type == "Split") {
    if (!j.contains("pattern") || !j["pattern"].is_object())
      return corrupt("pre_tokenizer Split: missing \"pattern\"");
    const json& p = j["pattern"];
    Result<TokenizerRegex> re = invalid_argument("pattern");
    if (p.contains("Regex") && p["Regex"].is_string())
      re = TokenizerRegex::compile(p["Regex"].get<std::string>());
    else if (p.contains("String") && p["String"].is_string())
      re = TokenizerRegex::literal(p["String"].get<std::string>());
    else
      return corrupt("pre_tokenizer Split: pattern is neither String nor Regex");
    if (!re.ok()) return re.status().with_context("pre_tokenizer Split");
    SPW_ASSIGN_OR_RETURN(SplitBehavior b, parse_behavior(j.value("behavior", json("Isolated"))));
    return Ptr(make_split(std::move(re).value(), b, j.value("invert", false)));
  }
  if (type == "Metaspace") {
    std::string rep = j.value("replacement", std::string("\xE2\x96\x81"));
    PrependScheme scheme = PrependScheme::kAlways;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      const std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "first")
        scheme = PrependScheme::kFirst;
      else if (s == "never")
        scheme = PrependScheme::kNever;
      else if (s != "always")
        return unsupported("pre_tokenizer Metaspace: prepend_scheme \"" + s + "\"");
    } else if (j.contains("add_prefix_space") && !j.value("add_prefix_space", true)) {
      scheme = PrependScheme::kNever;
    }
    SPW_ASSIGN_OR_RETURN(auto re, TokenizerRegex::literal(rep));
    return Ptr(std::make_unique<MetaspacePreTokenizer>(rep, scheme, j.value("split", true),
                                                       std::move(re)));
  }
  if (type == "Digits") {
    const bool individual = j.value("individual_digits", false);
    SPW_ASSIGN_OR_RETURN(auto re, TokenizerRegex::compile(individual ? "\\p{N}" : "\\p{N}+"));
    return Ptr(make_split(std::move(re), SplitBehavior::kIsolated, false));
  }
  if (type == "WhitespaceSplit") {
    SPW_ASSIGN_OR_RETURN(auto re, TokenizerRegex::compile("\\s+"));
    return Ptr(make_split(std::move(re), SplitBehavior::kRemoved, false));
  }
  if (type == "Whitespace") {
    // HF: split on \w+|[^\w\s]+ keeping the matches only.
    SPW_ASSIGN_OR_RETURN(auto re, TokenizerRegex::compile("\\w+|[^\\w\\s]+"));
    return Ptr(make_split(std::move(re), SplitBehavior::kRemoved, true));
  }
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return corrupt("pre_tokenizer Sequence: missing \"pretokenizers\"");
    std::vector<Ptr> items;
    for (const auto& p : j["pretokenizers"]) {
      SPW_ASSIGN_OR_RETURN(auto item, parse_pre_tokenizer(p));
      if (item) items.push_back(std::move(item));
    }
    return Ptr(std::make_unique<SequencePreTokenizer>(std::move(items)));
  }
  return unsupported("pre_tokenizer type \"" + type + "\"");
}

}  // namespace spillway
