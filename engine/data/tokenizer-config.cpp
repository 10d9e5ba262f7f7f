#include "data/tokenizer-config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "core/json-file.h"

namespace spillway {

using nlohmann::json;

namespace {

// A special token is written as "<s>", as {"content": "<s>", ...} (a serialized AddedToken) or
// as null.
Status read_token(const json& j, const char* key, const std::string& file,
                  std::optional<std::string>& out) {
  if (!j.contains(key) || j[key].is_null()) return {};
  const json& v = j[key];
  if (v.is_string()) {
    out = v.get<std::string>();
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    out = v["content"].get<std::string>();
  } else {
    return corrupt(file + ": \"" + key + "\" is neither a string nor {\"content\": ...}");
  }
  return {};
}

// A flag that may be absent or null (left unset); anything but true or false is an error.
Status read_flag(const json& j, const std::string& key, const std::string& file,
                 std::optional<bool>& out) {
  if (!j.contains(key) || j[key].is_null()) return {};
  if (!j[key].is_boolean())
    return corrupt(file + ": \"" + key + "\" is " + describe_json(j[key]) +
                   ", expected true or false");
  out = j[key].get<bool>();
  return {};
}

Result<json> read_json(const std::string& path) {
  return read_json_file(path, ErrorCode::kCorrupt);
}

}  // namespace

Result<TokenizerConfig> load_tokenizer_config(const std::string& dir) {
  namespace fs = std::filesystem;
  TokenizerConfig cfg;
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  std::error_code ec;
  // A file that exists is read, so that one that is not a regular file (a FIFO, a device) is an
  // error from read_file instead of silently left out.
  if (fs::exists(config_path, ec)) {
    SPW_ASSIGN_OR_RETURN(json j, read_json(config_path));
    if (!j.is_object()) return corrupt(config_path + ": not a JSON object");
    SPW_RETURN_IF_ERROR(read_token(j, "bos_token", config_path, cfg.bos_token));
    SPW_RETURN_IF_ERROR(read_token(j, "eos_token", config_path, cfg.eos_token));
    SPW_RETURN_IF_ERROR(read_token(j, "pad_token", config_path, cfg.pad_token));
    SPW_RETURN_IF_ERROR(read_token(j, "unk_token", config_path, cfg.unk_token));
    SPW_RETURN_IF_ERROR(read_token(j, "sep_token", config_path, cfg.sep_token));
    SPW_RETURN_IF_ERROR(read_token(j, "cls_token", config_path, cfg.cls_token));
    SPW_RETURN_IF_ERROR(read_token(j, "mask_token", config_path, cfg.mask_token));
    SPW_RETURN_IF_ERROR(read_flag(j, "add_bos_token", config_path, cfg.add_bos_token));
    SPW_RETURN_IF_ERROR(read_flag(j, "add_eos_token", config_path, cfg.add_eos_token));
    if (j.contains("tokenizer_class") && j["tokenizer_class"].is_string())
      cfg.tokenizer_class = j["tokenizer_class"].get<std::string>();
    if (j.contains("chat_template")) {
      const json& t = j["chat_template"];
      if (t.is_string()) {
        cfg.chat_template = t.get<std::string>();
      } else if (t.is_array()) {
        // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]: the default one.
        for (const auto& e : t) {
          if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) continue;
          if (cfg.chat_template.empty() || e.value("name", std::string()) == "default")
            cfg.chat_template = e["template"].get<std::string>();
        }
      } else if (!t.is_null()) {
        return corrupt(config_path + ": \"chat_template\" is neither a string nor a list");
      }
    }
  }
  const std::string map_path = (fs::path(dir) / "special_tokens_map.json").string();
  if (fs::exists(map_path, ec)) {
    SPW_ASSIGN_OR_RETURN(json j, read_json(map_path));
    if (!j.is_object()) return corrupt(map_path + ": not a JSON object");
    if (!cfg.bos_token) SPW_RETURN_IF_ERROR(read_token(j, "bos_token", map_path, cfg.bos_token));
    if (!cfg.eos_token) SPW_RETURN_IF_ERROR(read_token(j, "eos_token", map_path, cfg.eos_token));
    if (!cfg.pad_token) SPW_RETURN_IF_ERROR(read_token(j, "pad_token", map_path, cfg.pad_token));
    if (!cfg.unk_token) SPW_RETURN_IF_ERROR(read_token(j, "unk_token", map_path, cfg.unk_token));
    if (!cfg.sep_token) SPW_RETURN_IF_ERROR(read_token(j, "sep_token", map_path, cfg.sep_token));
    if (!cfg.cls_token) SPW_RETURN_IF_ERROR(read_token(j, "cls_token", map_path, cfg.cls_token));
    if (!cfg.mask_token) SPW_RETURN_IF_ERROR(read_token(j, "mask_token", map_path, cfg.mask_token));
  }
  // chat_template.jinja wins over tokenizer_config.json's chat_template, as in transformers 5
  // (PreTrainedTokenizerBase.from_pretrained: "independent chat template file(s) ... take
  // priority"): a save that updated the file left the older copy in the config.
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  if (fs::exists(jinja_path, ec)) {
    SPW_ASSIGN_OR_RETURN(cfg.chat_template, read_file(jinja_path));
  }
  return cfg;
}

std::map<std::string, std::string> special_tokens_map(const TokenizerConfig& c) {
  std::map<std::string, std::string> out;
  for (const auto& [name, token] :
       {std::pair{"bos_token", &c.bos_token}, std::pair{"eos_token", &c.eos_token},
        std::pair{"unk_token", &c.unk_token}, std::pair{"sep_token", &c.sep_token},
        std::pair{"pad_token", &c.pad_token}, std::pair{"cls_token", &c.cls_token},
        std::pair{"mask_token", &c.mask_token}}) {
    if (*token) out[name] = **token;
  }
  return out;
}

}  // namespace spillway
