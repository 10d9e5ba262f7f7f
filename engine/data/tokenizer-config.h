// TokenizerConfig: what transformers keeps beside the tokenizer files: tokenizer_config.json
// (bos/eos/pad/unk tokens, add_bos_token / add_eos_token, tokenizer_class, chat_template),
// special_tokens_map.json (fills the special tokens the former lacks) and chat_template.jinja
// (newer checkpoints keep the template there; it wins over the config's, as in transformers).
// All of them may be absent.
//
// A plain value; load_tokenizer_config is thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/status.h"

namespace spillway {

struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::optional<std::string> sep_token, cls_token, mask_token;
  std::optional<bool> add_bos_token, add_eos_token;
  std::string tokenizer_class;
  std::string chat_template;  // Jinja source, empty when none
};

// Reads the files in `dir`; missing files give an empty config. kCorrupt names a file that is
// not valid JSON or a field of the wrong type.
Result<TokenizerConfig> load_tokenizer_config(const std::string& dir);

// The named special tokens that are set, as transformers' special_tokens_map gives them to a chat
// template: bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token.
std::map<std::string, std::string> special_tokens_map(const TokenizerConfig& config);

}  // namespace spillway
