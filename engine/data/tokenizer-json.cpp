#include "data/tokenizer-json.h"

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>

#include "core/json-file.h"
#include "data/tokenizer-unicode.h"

namespace spillway {

using nlohmann::json;

namespace {

Result<std::vector<AddedToken>> parse_added_tokens(const json& j) {
  std::vector<AddedToken> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return corrupt("\"added_tokens\" is not an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const json& t = j[i];
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string())
      return corrupt("added_tokens[" + std::to_string(i) +
                     "]: needs integer \"id\" and string \"content\"");
    AddedToken a;
    // An id past int32 was wrapped into some other token's id.
    auto id = JsonField(t, "added_tokens[" + std::to_string(i) + "]")["id"].integer(0, INT32_MAX);
    if (!id.ok()) return Status(ErrorCode::kCorrupt, id.status().message());
    a.id = static_cast<int32_t>(*id);
    a.content = t["content"].get<std::string>();
    a.single_word = t.value("single_word", false);
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    a.normalized = t.value("normalized", !t.value("special", false));
    a.special = t.value("special", false);
    out.push_back(std::move(a));
  }
  return out;
}

// Runs the parser of one part of the file (model, normalizer, ...): a field of the wrong type deep
// inside it, which nlohmann reports by throwing, becomes an error naming the part.
template <typename Fn>
auto parse_part(const char* name, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const json::exception& e) {
    std::string what =
        e.what();  // "[json.exception.type_error.302] type must be boolean, but is null"
    if (const size_t p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);
    return corrupt(std::string(name) + ": a field has the wrong type (" + what.substr(0, 120) +
                   "); compare it with the same part of a tokenizer.json that transformers writes");
  }
}

bool is_llama_class(const std::string& c) {
  return c == "LlamaTokenizer" || c == "LlamaTokenizerFast" || c == "CodeLlamaTokenizer" ||
         c == "CodeLlamaTokenizerFast";
}

}  // namespace

Result<std::unique_ptr<JsonTokenizer>> JsonTokenizer::from_json_text(
    std::string_view text, const std::string& source, const TokenizerConfig& config) {
  SPW_ASSIGN_OR_RETURN(json root, parse_json(text, source, ErrorCode::kCorrupt));
  if (!root.is_object()) return corrupt(source + ": not a JSON object");
  if (!root.contains("model")) return corrupt(source + ": missing field \"model\"");

  std::unique_ptr<JsonTokenizer> t(new JsonTokenizer());
  t->source_ = source;
  auto ctx = [&](const Status& s) { return s.with_context(source); };
  {
    auto m = parse_part("model", [&] { return BpeModel::from_json(root["model"]); });
    if (!m.ok()) return ctx(m.status());
    t->model_ = std::move(m).value();
  }
  {
    auto n = parse_part("normalizer",
                        [&] { return parse_normalizer(root.value("normalizer", json())); });
    if (!n.ok()) return ctx(n.status());
    t->normalizer_ = std::move(n).value();
  }
  {
    auto p = parse_part("pre_tokenizer",
                        [&] { return parse_pre_tokenizer(root.value("pre_tokenizer", json())); });
    if (!p.ok()) return ctx(p.status());
    t->pre_tokenizer_ = std::move(p).value();
  }
  {
    auto d = parse_part("decoder", [&] { return parse_decoder(root.value("decoder", json())); });
    if (!d.ok()) return ctx(d.status());
    t->decoder_ = std::move(d).value();
  }
  {
    auto p = parse_part("post_processor",
                        [&] { return parse_post_processor(root.value("post_processor", json())); });
    if (!p.ok()) return ctx(p.status());
    t->post_processor_ = std::move(p).value();
  }
  {
    auto a = parse_part("added_tokens",
                        [&] { return parse_added_tokens(root.value("added_tokens", json())); });
    if (!a.ok()) return ctx(a.status());
    t->added_ = std::move(a).value();
  }

  // Added tokens: lookup tables and the two matchers.
  t->vocab_size_ = t->model_->vocab_size();
  std::vector<AddedToken> raw, norm;
  std::vector<std::string> raw_pat, norm_pat;
  for (size_t i = 0; i < t->added_.size(); ++i) {
    const AddedToken& a = t->added_[i];
    t->added_by_id_[a.id] = i;
    t->added_by_content_.emplace(a.content, a.id);
    t->vocab_size_ = std::max(t->vocab_size_, a.id + 1);
    if (a.normalized) {
      std::string p = a.content;
      if (t->normalizer_) {
        const Status st = t->normalizer_->normalize(p);
        if (!st.ok()) return ctx(st.with_context("added token " + std::to_string(a.id)));
      }
      norm.push_back(a);
      norm_pat.push_back(std::move(p));
    } else {
      raw.push_back(a);
      raw_pat.push_back(a.content);
    }
  }
  t->raw_matcher_ = AddedTokenMatcher(std::move(raw), raw_pat);
  t->normalized_matcher_ = AddedTokenMatcher(std::move(norm), norm_pat);

  // transformers' LlamaTokenizerFast rebuilds the template from add_bos_token / add_eos_token.
  if (is_llama_class(config.tokenizer_class) && (config.add_bos_token || config.add_eos_token)) {
    std::vector<TokenizerPostProcessor::Item> items;
    auto special = [&](const std::optional<std::string>& tok) -> std::optional<int32_t> {
      return tok ? t->token_to_id(*tok) : std::nullopt;
    };
    const auto bos = special(config.bos_token), eos = special(config.eos_token);
    if (config.add_bos_token.value_or(true) && bos) items.push_back({false, {*bos}});
    items.push_back({true, {}});
    if (config.add_eos_token.value_or(false) && eos) items.push_back({false, {*eos}});
    t->post_processor_ = TokenizerPostProcessor(std::move(items));
  }

  auto lookup = [&](const std::optional<std::string>& tok) -> std::optional<int32_t> {
    return tok ? t->token_to_id(*tok) : std::nullopt;
  };
  t->bos_id_ = lookup(config.bos_token);
  t->eos_id_ = lookup(config.eos_token);
  t->pad_id_ = lookup(config.pad_token);
  if (!config.bos_token) {
    // No config: the special token the template puts first, if any.
    const auto& items = t->post_processor_.items();
    if (!items.empty() && !items.front().sequence && items.front().ids.size() == 1)
      t->bos_id_ = items.front().ids[0];
  }
  t->chat_template_ = config.chat_template;
  t->special_tokens_map_ = spillway::special_tokens_map(config);

  const bool bytes_ok =
      (t->pre_tokenizer_ && t->pre_tokenizer_->byte_level()) || t->model_->byte_fallback();
  t->lossless_ = bytes_ok && t->decoder_ && t->decoder_->restores_bytes() &&
                 (!t->normalizer_ || t->normalizer_->reversible());
  return t;
}

Result<std::vector<int32_t>> JsonTokenizer::encode(std::string_view text) const {
  std::string repaired;
  if (!tokenizer_unicode::utf8_valid(text)) {
    repaired = tokenizer_unicode::utf8_repair(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedSplit> raw_splits, norm_splits;
  raw_matcher_.find(text, raw_splits);
  std::vector<PreToken> pieces;
  std::string segment;
  for (const AddedSplit& rs : raw_splits) {
    if (rs.id >= 0) {
      ids.push_back(rs.id);
      continue;
    }
    segment.assign(text.substr(rs.begin, rs.end - rs.begin));
    if (normalizer_) {
      const Status st = normalizer_->normalize(segment);
      if (!st.ok()) return st.with_context(source_ + ": normalizer");
    }
    norm_splits.clear();
    normalized_matcher_.find(segment, norm_splits);
    for (const AddedSplit& ns : norm_splits) {
      if (ns.id >= 0) {
        ids.push_back(ns.id);
        continue;
      }
      pieces.clear();
      pieces.push_back(
          {segment.substr(ns.begin, ns.end - ns.begin), rs.begin == 0 && ns.begin == 0});
      if (pre_tokenizer_) {
        const Status st = pre_tokenizer_->pre_tokenize(pieces);
        if (!st.ok()) return st.with_context(source_ + ": pre_tokenizer");
      }
      for (const PreToken& p : pieces) model_->tokenize(p.text, ids);
    }
  }
  return ids;
}

Result<std::vector<int32_t>> JsonTokenizer::encode_with_special(std::string_view text) const {
  SPW_ASSIGN_OR_RETURN(std::vector<int32_t> ids, encode(text));
  return post_processor_.process(std::move(ids));
}

Result<std::string> JsonTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) {
      const AddedToken& a = added_[it->second];
      if (skip_special && a.special) continue;
      tokens.push_back(a.content);
      continue;
    }
    const std::string* tok = model_->id_to_token(id);
    if (!tok) continue;
    // A model token whose string is a special added token (e.g. "<s>") is skipped too.
    if (skip_special) {
      auto c = added_by_content_.find(*tok);
      if (c != added_by_content_.end() && added_[added_by_id_.at(c->second)].special) continue;
    }
    tokens.push_back(*tok);
  }
  if (!decoder_) {
    std::string out;
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k) out.push_back(' ');
      out += tokens[k];
    }
    return out;
  }
  const Status st = decoder_->decode_chain(tokens);
  if (!st.ok()) return st.with_context(source_ + ": decoder");
  std::string out;
  for (const auto& s : tokens) out += s;
  return out;
}

std::optional<int32_t> JsonTokenizer::token_to_id(std::string_view token) const {
  auto it = added_by_content_.find(token);
  if (it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

std::string JsonTokenizer::id_to_token(int32_t id) const {
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return added_[it->second].content;
  const std::string* t = model_->id_to_token(id);
  return t ? *t : std::string();
}

}  // namespace spillway
