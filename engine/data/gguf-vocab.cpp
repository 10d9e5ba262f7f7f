#include "data/gguf-vocab.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/file-util.h"
#include "core/json-file.h"
#include "core/sha256.h"
#include "data/tokenizer.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// gguf.TokenType (llama_token_type).
enum TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

Result<std::optional<json>> read_json_if_present(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::optional<json>();
  SPW_ASSIGN_OR_RETURN(std::string text, read_file(p.string()));
  SPW_ASSIGN_OR_RETURN(json j, parse_json(text, p.string()));
  return std::optional<json>(std::move(j));
}

// TextModel.does_token_look_special.
bool looks_special(const std::string& t) {
  const auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">");
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size())
    s.replace(p, from.size(), to);
  return s;
}
const std::string kSpmSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// A token's content from a tokenizer_config.json entry (a string or {"content": ...}).
std::optional<std::string> token_content(const json& entry) {
  if (entry.is_string()) return entry.get<std::string>();
  if (entry.is_object() && entry.contains("content") && entry["content"].is_string())
    return entry["content"].get<std::string>();
  return std::nullopt;
}

struct SpmVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  // The model's normalizer_spec.add_dummy_prefix: whether it encodes "a" as U+2581 "a".
  bool add_dummy_prefix = true;
};

// _create_vocab_sentencepiece (and Phi3MiniModel.set_vocab's variant when `phi3`).
Result<SpmVocab> spm_vocab(const fs::path& model, const json& hp, const std::optional<json>& tc,
                           const std::optional<json>& tj, const fs::path& dir, bool phi3) {
  sentencepiece::SentencePieceProcessor sp;
  if (auto st = sp.Load(model.string()); !st.ok())
    return corrupt(model.string() + ": " + st.ToString());
  const int sp_size = sp.GetPieceSize();
  const int vocab = hp.contains("vocab_size") && hp["vocab_size"].is_number()
                        ? hp["vocab_size"].get<int>()
                        : sp_size;
  SpmVocab v;
  for (int i = 0; i < vocab; ++i) v.tokens.push_back("[PAD" + std::to_string(i) + "]");
  v.scores.assign(vocab, -10000.0f);
  v.types.assign(vocab, kUnused);
  for (int id = 0; id < sp_size && id < vocab; ++id) {
    v.tokens[id] = sp.IdToPiece(id);
    v.scores[id] = sp.GetScore(id);
    int32_t t = kNormal;
    if (sp.IsUnknown(id))
      t = kUnknown;
    else if (sp.IsControl(id))
      t = kControl;
    else if (sp.IsUnused(id))
      t = kUnused;
    else if (sp.IsByte(id))
      t = kByte;
    v.types[id] = t;
  }
  std::vector<std::string> probe;
  if (sp.Encode("a", &probe).ok() && !probe.empty())
    v.add_dummy_prefix = probe.front().rfind(kSpmSpace, 0) == 0;
  SPW_ASSIGN_OR_RETURN(std::optional<json> added, read_json_if_present(dir / "added_tokens.json"));
  if (added && added->is_object()) {
    for (const auto& [text, id_json] : added->items()) {
      const int id = id_json.get<int>();
      if (id < 0 || id >= vocab) continue;
      v.tokens[id] = text;
      v.scores[id] = -1000.0f;
      v.types[id] = kUserDefined;
    }
  }
  const auto apply = [&](int id, std::string content, bool special, bool look) {
    if (id < 0 || id >= vocab) return;
    if (special || (look && looks_special(content))) {
      v.types[id] = kControl;
    } else {
      if (look)
        content = replace_all(content, kSpmSpace, " ");  // pre-normalized user-defined spaces
      v.types[id] = kUserDefined;
    }
    v.scores[id] = -1000.0f;
    v.tokens[id] = content;
  };
  if (tc && tc->contains("added_tokens_decoder") && (*tc)["added_tokens_decoder"].is_object()) {
    for (const auto& [key, data] : (*tc)["added_tokens_decoder"].items()) {
      if (!data.contains("content")) continue;
      apply(std::stoi(key), data["content"].get<std::string>(), data.value("special", false),
            !phi3);
    }
  }
  if (phi3 && tj && tj->contains("added_tokens")) {
    for (const json& data : (*tj)["added_tokens"])
      apply(data.at("id").get<int>(), data.at("content").get<std::string>(),
            data.value("special", false), false);
  }
  return v;
}

// get_vocab_base: the vocabulary of tokenizer.json with its added tokens, [PADn] for ids it lacks.
Result<std::pair<std::vector<std::string>, std::vector<int32_t>>> bpe_vocab(const json& tj,
                                                                            const json& hp) {
  std::map<int, std::string> by_id;
  if (!tj.contains("model") || !tj["model"].contains("vocab") || !tj["model"]["vocab"].is_object())
    return unsupported(
        "tokenizer.json has no model.vocab object; GGUF export reads BPE tokenizers");
  for (const auto& [tok, id] : tj["model"]["vocab"].items()) by_id[id.get<int>()] = tok;
  std::map<int, const json*> added;
  if (tj.contains("added_tokens"))
    for (const json& a : tj["added_tokens"]) {
      by_id[a.at("id").get<int>()] = a.at("content").get<std::string>();
      added[a.at("id").get<int>()] = &a;
    }
  int vocab = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
  if (hp.contains("vocab_size") && hp["vocab_size"].is_number()) {
    if (hp["vocab_size"].get<int>() < vocab)
      return invalid_argument("the tokenizer has ids up to " + std::to_string(vocab - 1) +
                              " but the model's vocab_size is " +
                              std::to_string(hp["vocab_size"].get<int>()));
    vocab = hp["vocab_size"].get<int>();
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int i = 0; i < vocab; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(kUnused);
      continue;
    }
    std::string token = it->second;
    int32_t type = kNormal;
    if (auto a = added.find(i); a != added.end()) {
      if (a->second->value("special", false) || looks_special(token)) {
        type = kControl;
      } else {
        token = replace_all(token, kSpmSpace, " ");
        type = kUserDefined;
      }
    }
    tokens.push_back(std::move(token));
    types.push_back(type);
  }
  return std::make_pair(std::move(tokens), std::move(types));
}

// gguf-py's SpecialVocab: merges, special token ids, add_*_token, chat template.
Status special_vocab(const std::optional<json>& tj, std::optional<json> tc, const json& hp,
                     const fs::path& dir, bool load_merges, std::optional<size_t> n_vocab,
                     GgufWriter& w, GgufVocabInfo& info, std::optional<int>* eos_id) {
  static const std::vector<std::pair<std::string, std::string>> kTypes = {
      {"bos", "bos_token_id"},       {"eos", "eos_token_id"},     {"unk", "unknown_token_id"},
      {"sep", "seperator_token_id"}, {"pad", "padding_token_id"}, {"cls", "cls_token_id"},
      {"mask", "mask_token_id"}};
  std::map<std::string, int> ids;
  std::map<std::string, bool> add;
  const auto set_id = [&](const std::string& typ, const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) return;
    if (n_vocab && static_cast<size_t>(v.get<int64_t>()) >= *n_vocab) return;
    ids.emplace(typ, v.get<int>());
  };
  if (tj) {
    if (load_merges && tj->contains("model") && (*tj)["model"].contains("merges")) {
      std::vector<std::string> merges;
      for (const json& m : (*tj)["model"]["merges"]) {
        if (m.is_string()) {
          merges.push_back(m.get<std::string>());
        } else if (m.is_array() && m.size() == 2) {
          // transformers >= 4.45 pairs; a space inside a part is written as U+0120.
          std::string joined;
          for (int k = 0; k < 2; ++k) {
            if (k) joined += ' ';
            joined += replace_all(m[k].get<std::string>(), " ", "\xc4\xa0");
          }
          merges.push_back(std::move(joined));
        }
      }
      if (!merges.empty()) w.set_string_array("tokenizer.ggml.merges", merges);
    }
    const json cfg = tc.value_or(json::object());
    std::optional<std::string> bos =
        cfg.contains("bos_token") ? token_content(cfg["bos_token"]) : std::nullopt;
    std::optional<std::string> eos =
        cfg.contains("eos_token") ? token_content(cfg["eos_token"]) : std::nullopt;
    if (tj->contains("post_processor") && (*tj)["post_processor"].is_object()) {
      const json& pp = (*tj)["post_processor"];
      std::vector<json> procs = pp.contains("processors")
                                    ? pp["processors"].get<std::vector<json>>()
                                    : std::vector<json>{pp};
      for (const json& p : procs) {
        const std::string type = p.value("type", "");
        if (type == "ByteLevel") {
          add.emplace("bos", false);
          add.emplace("eos", false);
        } else if (type == "RobertaProcessing") {
          add["bos"] = add["eos"] = add["sep"] = true;
        } else if (type == "TemplateProcessing" && p.contains("single") && p["single"].size() > 1) {
          const json& single = p["single"];
          const auto special = [](const json& e) -> std::optional<std::string> {
            if (e.contains("SpecialToken")) return e["SpecialToken"].value("id", "");
            return std::nullopt;
          };
          const std::optional<std::string> first = special(single.front());
          const std::optional<std::string> last = special(single.back());
          if (first) {
            if (!tc) {
              bos = first;
              tc = json::object();
              (*tc)["bos_token"] = *first;
            }
            add["bos"] = bos && *first == *bos;
          }
          if (last) {
            if (!eos) eos = last;
            add["eos"] = eos && *last == *eos;
          }
          // The pair template A [sep] B says whether a separator is added.
          if (p.contains("pair") && !p["pair"].empty()) {
            std::vector<json> pair = p["pair"].get<std::vector<json>>();
            if (first && special(pair.front()) == first) pair.erase(pair.begin());
            if (last && !pair.empty() && special(pair.back()) == last) pair.pop_back();
            const auto seq = [](const json& e) -> std::string {
              return e.contains("Sequence") ? e["Sequence"].value("id", "") : "";
            };
            if (pair.size() > 2 && seq(pair.front()) == "A" && seq(pair.back()) == "B") {
              std::optional<std::string> sep;
              if (cfg.contains("sep_token")) sep = token_content(cfg["sep_token"]);
              const auto is_sep = [&](const json& e) {
                auto id = special(e);
                return id && ((sep && *id == *sep) || (eos && *id == *eos));
              };
              bool add_sep = !last && is_sep(pair[1]);
              if (pair.size() == 4 && is_sep(pair[2])) add_sep = true;
              add["sep"] = add_sep;
            }
          }
        }
      }
    }
  }
  if (tc) {
    std::string tmpl;
    if (tc->contains("chat_template") && (*tc)["chat_template"].is_string()) {
      tmpl = (*tc)["chat_template"].get<std::string>();
    } else if (std::error_code ec; fs::is_regular_file(dir / "chat_template.jinja", ec)) {
      SPW_ASSIGN_OR_RETURN(tmpl, read_file((dir / "chat_template.jinja").string()));
    }
    if (!tmpl.empty()) {
      w.set_string("tokenizer.chat_template", tmpl);
      info.chat_template = tmpl;
    }
    for (const auto& [typ, key] : kTypes) {
      if (auto e = tc->find("add_" + typ + "_token"); e != tc->end() && e->is_boolean())
        add.emplace(typ, e->get<bool>());
      auto entry = tc->find(typ + "_token");
      if (entry == tc->end()) continue;
      std::optional<std::string> content = token_content(*entry);
      if (!content || !tj || !tj->contains("added_tokens")) continue;
      for (const json& a : (*tj)["added_tokens"])
        if (a.value("content", "") == *content) {
          set_id(typ, a["id"]);
          break;
        }
    }
  }
  for (const auto& [typ, key] : kTypes) {
    auto v = hp.find(typ + "_token_id");
    if (v != hp.end()) set_id(typ, *v);
  }
  for (const auto& [typ, key] : kTypes)
    if (auto it = ids.find(typ); it != ids.end())
      w.set_u32("tokenizer.ggml." + key, static_cast<uint32_t>(it->second));
  if (auto it = ids.find("eos"); it != ids.end()) *eos_id = it->second;
  for (const char* typ : {"bos", "eos", "sep"})
    if (auto it = add.find(typ); it != add.end())
      w.set_bool(std::string("tokenizer.ggml.add_") + typ + "_token", it->second);
  return {};
}

// The Modelfile's stops: EOS, and the end-of-turn control tokens the chat template writes.
void add_stops(const std::vector<std::string>& tokens, const std::vector<int32_t>& types,
               std::optional<int> eos, GgufVocabInfo& info) {
  if (eos && *eos < static_cast<int>(tokens.size())) info.stop.push_back(tokens[*eos]);
  for (const char* t :
       {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>"}) {
    if (info.chat_template.find(t) == std::string::npos) continue;
    if (std::find(info.stop.begin(), info.stop.end(), t) != info.stop.end()) continue;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t && types[i] == kControl) {
        info.stop.push_back(t);
        break;
      }
  }
}

}  // namespace

const std::string& gguf_pre_tokenizer_check_text() {
  static const std::string kText =
      "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\xf0\x9f\x9a\x80 (norm"
      "al) \xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f (multiple "
      "emojis concatenated) \xe2\x9c\x85 \xf0\x9f\xa6\x99\xf0\x9f\xa6\x99 3 33"
      " 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 "
      "\xe1\x9e\x80\xe1\x9e\xb6\xe1\x9e\x93\xe1\x9f\x8b\xe1\x9e\x8f\xe1\x9f\x82\xe1\x9e\x96\xe1\x9e"
      "\xb7\xe1\x9e\x9f\xe1\x9f\x81\xe1\x9e\x9f\xe1\x9e\xa2\xe1\x9e\xb6\xe1\x9e\x85\xf0\x9f\x98\x81"
      " "
      "?\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8"
      "apple\xe5\xb7\xa5\xe4\xbd\x9c"
      "1314151\xe5\xa4\xa9\xef\xbd\x9e ------======= \xd0\xbd\xd0\xb5\xd1\x89\xd0\xbe "
      "\xd0\xbd\xd0\xb0 \xd0\x91\xd1\x8a\xd0\xbb\xd0\xb3\xd0\xb0\xd1\x80\xd1\x81\xd0\xba\xd0\xb8 "
      "''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE"
      " you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL";
  return kText;
}

std::string gguf_pre_tokenizer_hash(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return sha256_hex(s + "]");
}

std::string gguf_pre_tokenizer_name(const std::string& hash) {
  // convert_hf_to_gguf.py's get_vocab_base_pre, the entries for the families Spillway trains
  // (and GPT-2's), with the model each hash was taken from.
  static const std::map<std::string, std::string> kKnown = {
      {"0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5",
       "llama-bpe"},  // Meta-Llama-3-8B
      {"c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d",
       "smaug-bpe"},  // Smaug-Llama-3-70B, Llama 3.x's current tokenizer.json
      {"d353350c764d8c3b39c763113960e4fb4919bea5fbf208a0e3b22e8469dc7406", "llama4"},
      {"e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea",
       "qwen2"},  // Qwen1.5 .. Qwen3
      {"d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c",
       "qwen2"},  // Qwen3-Embedding
      {"b3f499bb4255f8ca19fccd664443283318f2fd2414d5e0b040fbdd0cc195d6c5", "deepseek-r1-qwen"},
      {"d30d75d9059f1aa2c19359de71047b3ae408c70875e8a3ccf8c5fba56c9d8af4", "qwen35"},
      {"3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454", "gpt-2"},
      {"63b97e4253352e6f357cc59ea5b583e3a680eaeaf2632188c2b952de2588485e",
       "tekken"},  // Mistral Nemo
      {"0e9433cbbb161f89e264eb32e8e64bfe69e834973ffca5d41d3948a604a3e2a3", "pixtral"},
      {"855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249", "smollm"},
      {"fcace8b9cac38ce847670c970cd5892031a753a1ef381abd1d9af00f713da085", "phi-2"},
  };
  auto it = kKnown.find(hash);
  return it == kKnown.end() ? std::string() : it->second;
}

namespace {

Result<GgufVocabInfo> set_gguf_vocab_unchecked(const std::string& arch, const json& hp,
                                               const std::string& tokenizer_path, GgufWriter& w) {
  std::error_code ec;
  fs::path dir = tokenizer_path, tokenizer_json = dir / "tokenizer.json",
           tokenizer_model = dir / "tokenizer.model";
  if (!fs::is_directory(dir, ec)) {
    dir = fs::path(tokenizer_path).parent_path();
    const bool is_model = fs::path(tokenizer_path).extension() == ".model";
    tokenizer_json = is_model ? fs::path() : fs::path(tokenizer_path);
    tokenizer_model = is_model ? fs::path(tokenizer_path) : fs::path();
  }
  const bool has_json = !tokenizer_json.empty() && fs::is_regular_file(tokenizer_json, ec);
  const bool has_model = !tokenizer_model.empty() && fs::is_regular_file(tokenizer_model, ec);
  if (!has_json && !has_model)
    return not_found(
        "no tokenizer.json or tokenizer.model at " + tokenizer_path +
        "; a GGUF file carries its tokenizer: pass the one the model was trained with");
  SPW_ASSIGN_OR_RETURN(std::optional<json> tc, read_json_if_present(dir / "tokenizer_config.json"));
  std::optional<json> tj;
  if (has_json) {
    SPW_ASSIGN_OR_RETURN(tj, read_json_if_present(tokenizer_json));
  }
  GgufVocabInfo info;
  std::optional<int> eos;
  bool spm = has_model;
  if (arch == "phi3" && tc && tc->value("tokenizer_class", "") == "GPT2Tokenizer") spm = false;
  if (arch == "llama" && tc && tc->contains("add_prefix_space") &&
      (*tc)["add_prefix_space"].is_boolean())
    w.set_bool("tokenizer.ggml.add_space_prefix", (*tc)["add_prefix_space"].get<bool>());
  if (spm) {
    SPW_ASSIGN_OR_RETURN(SpmVocab v, spm_vocab(tokenizer_model, hp, tc, tj, dir, arch == "phi3"));
    info.model = "llama";
    info.pre = "default";
    w.set_string("tokenizer.ggml.model", info.model);
    w.set_string("tokenizer.ggml.pre", info.pre);
    w.set_string_array("tokenizer.ggml.tokens", v.tokens);
    w.set_f32_array("tokenizer.ggml.scores", v.scores);
    w.set_i32_array("tokenizer.ggml.token_type", v.types);
    SPW_RETURN_IF_ERROR(special_vocab(tj, tc, hp, dir, false, v.tokens.size(), w, info, &eos));
    add_stops(v.tokens, v.types, eos, info);
    // Gemma3Model.set_vocab writes false, which is what Gemma's own tokenizer.model says
    // (add_dummy_prefix false). A tokenizer.model that adds the prefix (Llama 2's on a Gemma
    // model) gets true: llama.cpp then tokenizes as Spillway and transformers do, not "Once" where
    // they give U+2581 "Once".
    if (arch == "gemma3") w.set_bool("tokenizer.ggml.add_space_prefix", v.add_dummy_prefix);
  } else {
    const json& model = tj->contains("model") ? (*tj)["model"] : json::object();
    if (arch == "llama" && model.value("type", "") == "BPE" && model.value("byte_fallback", false))
      return unsupported(
          tokenizer_json.string() +
          " is a SentencePiece-style BPE (byte fallback) without its tokenizer.model; "
          "llama.cpp's converter reads such a tokenizer through transformers, which Spillway "
          "does not: put the model's tokenizer.model beside it and export again");
    if (model.value("type", "") != "BPE")
      return unsupported(tokenizer_json.string() + " is a " + model.value("type", "?") +
                         " tokenizer; GGUF export writes SentencePiece (tokenizer.model) and "
                         "byte-level BPE tokenizers");
    SPW_ASSIGN_OR_RETURN(auto vocab, bpe_vocab(*tj, hp));
    SPW_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::load(tokenizer_json.string()));
    SPW_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                         tok->encode_with_special(gguf_pre_tokenizer_check_text()));
    const std::string hash = gguf_pre_tokenizer_hash(ids);
    info.model = "gpt2";
    info.pre = gguf_pre_tokenizer_name(hash);
    if (info.pre.empty()) {
      info.pre = "default";
      info.notes.push_back(
          "the tokenizer's pre-tokenizer is not one llama.cpp's converter knows (check hash " +
          hash +
          "); written as tokenizer.ggml.pre \"default\", so llama.cpp may split text "
          "differently from Hugging Face");
    }
    w.set_string("tokenizer.ggml.model", info.model);
    w.set_string("tokenizer.ggml.pre", info.pre);
    w.set_string_array("tokenizer.ggml.tokens", vocab.first);
    w.set_i32_array("tokenizer.ggml.token_type", vocab.second);
    SPW_RETURN_IF_ERROR(special_vocab(tj, tc, hp, dir, true, std::nullopt, w, info, &eos));
    add_stops(vocab.first, vocab.second, eos, info);
  }
  return info;
}

}  // namespace

Result<GgufVocabInfo> set_gguf_vocab(const std::string& arch, const json& hp,
                                     const std::string& tokenizer_path, GgufWriter& w) {
  // The tokenizer files loaded as the trainer reads them, but fields only GGUF reads (an
  // added_tokens_decoder key, an added token's id) may still have the wrong type or form.
  try {
    return set_gguf_vocab_unchecked(arch, hp, tokenizer_path, w);
  } catch (const std::exception& e) {
    return corrupt("the tokenizer at " + tokenizer_path + " has a field GGUF export cannot read (" +
                   e.what() + "); check its tokenizer.json and tokenizer_config.json");
  }
}

}  // namespace spillway
