// The tokenizer half of a GGUF file: tokenizer.ggml.* and tokenizer.chat_template, as llama.cpp's
// convert_hf_to_gguf.py writes them from a Hugging Face tokenizer folder.
//
// Two vocabularies: "llama" (SentencePiece) from a tokenizer.model, read with libsentencepiece as
// convert's _create_vocab_sentencepiece reads it (pieces, scores, token types, added tokens from
// added_tokens.json and tokenizer_config.json's added_tokens_decoder, [PADn] up to vocab_size);
// "gpt2" (byte-level BPE) from tokenizer.json, as get_vocab_base and _set_vocab_gpt2 (tokens,
// token types, merges, and tokenizer.ggml.pre chosen as get_vocab_base_pre chooses it: the
// SHA-256 of the ids of its check text). Special token ids, add_bos/add_eos and the chat template
// as gguf-py's SpecialVocab finds them (tokenizer.json's added tokens and post-processor,
// tokenizer_config.json, chat_template.jinja, then config.json's *_token_id).
//
// A free function; thread-safe for distinct writers.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gguf-writer.h"

namespace spillway {

struct GgufVocabInfo {
  std::string model;          // tokenizer.ggml.model: "llama" or "gpt2"
  std::string pre;            // tokenizer.ggml.pre
  std::string chat_template;  // tokenizer.chat_template, empty when none
  // Texts that end a reply: the EOS token's and the chat template's end-of-turn tokens
  // (<|im_end|>, <|eot_id|>, <end_of_turn>, <|end|>) that are in the vocabulary.
  std::vector<std::string> stop;
  std::vector<std::string> notes;  // what the user should know (an unidentified pre-tokenizer)
};

// The SHA-256 hex digest convert's get_vocab_base_pre hashes: of Python's str() of the ids that
// `ids_of_check_text` gives for its check text (HF tokenizer.encode, special tokens added).
// Exposed for tests.
std::string gguf_pre_tokenizer_hash(const std::vector<int32_t>& ids_of_check_text);
// The check text itself.
const std::string& gguf_pre_tokenizer_check_text();
// llama.cpp's name for a hash (convert's table, for the tokenizers of the families Spillway
// trains); empty when the hash is not known.
std::string gguf_pre_tokenizer_name(const std::string& hash);

// Writes the tokenizer keys for a model of llama.cpp architecture `arch` with config.json
// `hparams`, from `tokenizer_path` (a tokenizer folder, or a tokenizer.json / tokenizer.model
// file, whose folder supplies tokenizer_config.json). kNotFound when it holds no tokenizer;
// kUnsupported for a tokenizer llama.cpp cannot run as convert would write it (a Llama-2 style
// byte-fallback BPE tokenizer.json without its tokenizer.model).
Result<GgufVocabInfo> set_gguf_vocab(const std::string& arch, const nlohmann::json& hparams,
                                     const std::string& tokenizer_path, GgufWriter& w);

}  // namespace spillway
