// Texts the tokenizer fuzz targets encode and decode once a fuzzed tokenizer has loaded: words,
// numbers, contractions, runs of spaces and newlines, ligatures and other compatibility
// characters, CJK, emoji, text that spells special tokens, invalid UTF-8 and one long run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace spillway::fuzz {

inline const std::vector<std::string>& tokenizer_texts() {
  static const std::vector<std::string> texts = {
      "",
      "Hello world! It's 2024, isn't it? 1234567 3.14e-2",
      "  two  spaces\n\n\ttab\r\nline  \n",
      "h\xC3\xA9llo w\xC3\xB6rld \xEF\xAC\x81 \xE2\x85\xAB \xC2\xBD \xED\x95\x9C\xEA\xB5\xAD "
      "\xE6\x97\xA5\xE6\x9C\xAC "
      "\xF0\x9F\x98\x80\xF0\x9F\xA6\x99 \xE2\x96\x81x",
      "<s> </s> <unk> <|endoftext|> [INST] hi [/INST] <|im_start|>user\n<|im_end|> "
      "<|begin_of_text|>",
      "\xFF\xFE a \xE2\x82 b \xC0\x80 \xED\xA0\x80",
      std::string(200, ' ') + std::string(300, 'a') + std::string(100, '7') + std::string(50, '\n'),
  };
  return texts;
}

// Encodes and decodes every text with `tok` through each public entry point. Errors are fine
// (a fuzzed tokenizer may refuse a text); crashes, hangs and leaks are what the fuzzer looks for.
inline void exercise_tokenizer(const Tokenizer& tok) {
  for (const std::string& text : tokenizer_texts()) {
    auto ids = tok.encode(text);
    auto with = tok.encode_with_special(text);
    if (!ids.ok() || !with.ok()) continue;
    (void)tok.decode(*ids);
    (void)tok.decode(*with, /*skip_special=*/true);
  }
  for (int32_t id : {-1, 0, 1, 2, 255, 256, tok.vocab_size() - 1, tok.vocab_size(), INT32_MAX}) {
    const std::string s = tok.id_to_token(id);
    (void)tok.token_to_id(s);
    const int32_t one[1] = {id};
    (void)tok.decode(one);
  }
  (void)tok.bos_id();
  (void)tok.eos_id();
  (void)tok.pad_id();
  (void)tok.lossless();
}

}  // namespace spillway::fuzz
