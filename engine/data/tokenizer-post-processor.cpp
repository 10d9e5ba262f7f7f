#include "data/tokenizer-post-processor.h"

#include <nlohmann/json.hpp>

namespace spillway {

using nlohmann::json;

std::vector<int32_t> TokenizerPostProcessor::process(const std::vector<int32_t>& ids) const {
  std::vector<int32_t> out;
  out.reserve(ids.size() + 4);
  for (const auto& item : items_) {
    if (item.sequence)
      out.insert(out.end(), ids.begin(), ids.end());
    else
      out.insert(out.end(), item.ids.begin(), item.ids.end());
  }
  return out;
}

namespace {

// ["</s>", 2] -> {2}
Result<std::vector<int32_t>> parse_token_pair(const json& j, const char* what) {
  if (!j.is_array() || j.size() != 2 || !j[1].is_number_integer())
    return corrupt(std::string("post_processor: \"") + what + "\" is not [token, id]");
  return std::vector<int32_t>{j[1].get<int32_t>()};
}

Result<std::vector<TokenizerPostProcessor::Item>> parse_items(const json& j) {
  using Item = TokenizerPostProcessor::Item;
  if (j.is_null()) return std::vector<Item>{Item{true, {}}};
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return corrupt("post_processor: missing \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return std::vector<Item>{Item{true, {}}};
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    if (!j.contains("cls") || !j.contains("sep"))
      return corrupt("post_processor " + type + ": missing \"cls\" or \"sep\"");
    SPW_ASSIGN_OR_RETURN(auto cls, parse_token_pair(j["cls"], "cls"));
    SPW_ASSIGN_OR_RETURN(auto sep, parse_token_pair(j["sep"], "sep"));
    return std::vector<Item>{Item{false, cls}, Item{true, {}}, Item{false, sep}};
  }
  if (type == "TemplateProcessing") {
    if (!j.contains("single") || !j["single"].is_array())
      return corrupt("post_processor TemplateProcessing: missing \"single\"");
    const json specials = j.value("special_tokens", json::object());
    std::vector<Item> items;
    for (const auto& piece : j["single"]) {
      if (piece.contains("Sequence")) {
        items.push_back(Item{true, {}});
      } else if (piece.contains("SpecialToken") && piece["SpecialToken"].contains("id")) {
        const std::string name = piece["SpecialToken"]["id"].get<std::string>();
        if (!specials.contains(name) || !specials[name].contains("ids") ||
            !specials[name]["ids"].is_array())
          return corrupt("post_processor TemplateProcessing: special token '" + name +
                         "' is not in \"special_tokens\"");
        Item item;
        for (const auto& id : specials[name]["ids"]) {
          if (!id.is_number_integer())
            return corrupt("post_processor TemplateProcessing: ids of '" + name +
                           "' are not integers");
          item.ids.push_back(id.get<int32_t>());
        }
        items.push_back(std::move(item));
      } else {
        return corrupt(
            "post_processor TemplateProcessing: item is neither Sequence nor SpecialToken");
      }
    }
    return items;
  }
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array())
      return corrupt("post_processor Sequence: missing \"processors\"");
    std::vector<Item> items{Item{true, {}}};
    for (const auto& p : j["processors"]) {
      SPW_ASSIGN_OR_RETURN(auto inner, parse_items(p));
      // Substitute the current template for the inner template's sequence slot.
      std::vector<Item> next;
      for (auto& it : inner) {
        if (it.sequence)
          next.insert(next.end(), items.begin(), items.end());
        else
          next.push_back(std::move(it));
      }
      items.swap(next);
    }
    return items;
  }
  return unsupported("post_processor type \"" + type + "\"");
}

}  // namespace

Result<TokenizerPostProcessor> parse_post_processor(const json& j) {
  SPW_ASSIGN_OR_RETURN(auto items, parse_items(j));
  return TokenizerPostProcessor(std::move(items));
}

}  // namespace spillway
