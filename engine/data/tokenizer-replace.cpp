#include "data/tokenizer-replace.h"

#include <nlohmann/json.hpp>

namespace spillway {

Result<TokenizerReplace> TokenizerReplace::parse(const nlohmann::json& p, std::string content) {
  TokenizerReplace r;
  r.content_ = std::move(content);
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    r.literal_ = p["String"].get<std::string>();
    if (r.literal_.empty()) return corrupt("empty String pattern");
    return r;
  }
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    SPW_ASSIGN_OR_RETURN(r.re_, TokenizerRegex::compile(p["Regex"].get<std::string>()));
    return r;
  }
  return corrupt("pattern is neither {\"String\": ...} nor {\"Regex\": ...}");
}

Status TokenizerReplace::apply(std::string& s) const {
  std::string out;
  if (!literal_.empty()) {
    if (s.find(literal_) == std::string::npos) return {};
    out.reserve(s.size() + s.size() / 4);
    size_t pos = 0;
    for (size_t f; (f = s.find(literal_, pos)) != std::string::npos; pos = f + literal_.size()) {
      out.append(s, pos, f - pos);
      out += content_;
    }
    out.append(s, pos, std::string::npos);
  } else {
    size_t prev = 0;
    SPW_RETURN_IF_ERROR(re_.find_all(s, [&](size_t b, size_t e) {
      out.append(s, prev, b - prev);
      out += content_;
      prev = e;
    }));
    out.append(s, prev, std::string::npos);
  }
  s.swap(out);
  return {};
}

}  // namespace spillway
