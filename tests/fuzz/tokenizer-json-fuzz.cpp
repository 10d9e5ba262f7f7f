// Fuzz target: a tokenizer.json (Hugging Face `tokenizers`), loaded as every command loads one
// (Tokenizer::load on the file), then used: encode, encode_with_special and decode of a fixed set
// of texts (tokenizer-texts.h), and the id lookups.
//
// Seeds: every real tokenizer.json of ../shared/data with its normalizer, pre-tokenizer, decoder,
// post-processor and added tokens kept as they are and its vocabulary and merges cut to a few
// hundred entries (so one input loads in milliseconds); and one small tokenizer per kind of
// normalizer, pre-tokenizer, decoder and post-processor the engine implements, and per BPE option.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "fuzz-util.h"
#include "tokenizer-texts.h"

using namespace spillway;
using nlohmann::ordered_json;

namespace {

// `full` with its vocabulary cut to ids below `max_id` and the merges whose parts and result all
// remain; added tokens are cut to the first 16. (nlohmann::json, not ordered_json: the real
// vocabularies have up to 150k keys, and ordered_json looks keys up one by one.)
std::string trimmed(const std::string& full, int64_t max_id) {
  nlohmann::json j = nlohmann::json::parse(full, nullptr, false);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return {};
  nlohmann::json& model = j["model"];
  if (!model["vocab"].is_object() || !model["merges"].is_array()) return {};
  nlohmann::json vocab = nlohmann::json::object();
  std::unordered_set<std::string> kept;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it)
    if (it->is_number_integer() && it->get<int64_t>() < max_id)
      vocab[it.key()] = *it, kept.insert(it.key());
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& m : model["merges"]) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) continue;
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      continue;
    }
    if (kept.count(a) && kept.count(b) && kept.count(a + b)) merges.push_back(m);
  }
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
  if (j.contains("added_tokens") && j["added_tokens"].is_array() && j["added_tokens"].size() > 16) {
    nlohmann::json a = nlohmann::json::array();
    for (size_t i = 0; i < 16; ++i) a.push_back(j["added_tokens"][i]);
    j["added_tokens"] = std::move(a);
  }
  return j.dump(1);
}

// A small byte-fallback BPE tokenizer with the given parts (null leaves a part out).
std::string tiny(const ordered_json& normalizer, const ordered_json& pre,
                 const ordered_json& decoder, const ordered_json& post,
                 const ordered_json& model_options = ordered_json::object()) {
  ordered_json vocab = ordered_json::object();
  int id = 0;
  for (const char* t : {"<unk>", "<s>", "</s>"}) vocab[t] = id++;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = id++;
  }
  const char* pieces[] = {"a",        "b",         "c",
                          "e",        "h",         "l",
                          "o",        " ",         "\xE2\x96\x81",
                          "ab",       "he",        "ll",
                          "llo",      "hello",     "\xE2\x96\x81h",
                          "\xC4\xA0", "\xC4\xA0h", "1",
                          "2",        "</w>",      "##a"};
  for (const char* p : pieces) vocab[p] = id++;
  ordered_json model = {
      {"type", "BPE"},
      {"unk_token", "<unk>"},
      {"byte_fallback", true},
      {"fuse_unk", true},
      {"vocab", vocab},
      {"merges", {"a b", "h e", "l l", "ll o", "he llo", "\xE2\x96\x81 h", "\xC4\xA0 h"}}};
  for (auto it = model_options.begin(); it != model_options.end(); ++it) model[it.key()] = *it;
  ordered_json j = {{"version", "1.0"},
                    {"added_tokens",
                     {{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                      {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
                      {{"id", id},
                       {"content", "<tool>"},
                       {"special", false},
                       {"normalized", true},
                       {"lstrip", true},
                       {"rstrip", true},
                       {"single_word", true}}}},
                    {"normalizer", normalizer},
                    {"pre_tokenizer", pre},
                    {"post_processor", post},
                    {"decoder", decoder},
                    {"model", model}};
  return j.dump(1);
}

void add_kind_seeds() {
  using J = ordered_json;
  const J null;
  const J meta = "\xE2\x96\x81";
  const J bytelevel_pre = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  const std::vector<std::pair<std::string, J>> normalizers = {
      {"nfc", {{"type", "NFC"}}},
      {"nfd", {{"type", "NFD"}}},
      {"nfkc", {{"type", "NFKC"}}},
      {"nfkd", {{"type", "NFKD"}}},
      {"lower", {{"type", "Lowercase"}}},
      {"prepend", {{"type", "Prepend"}, {"prepend", meta}}},
      {"replace-string", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}},
      {"replace-regex", {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}},
      {"strip", {{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}},
      {"sequence",
       {{"type", "Sequence"},
        {"normalizers",
         J::array({J{{"type", "Prepend"}, {"prepend", meta}},
                   J{{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}})}}}};
  for (const auto& [name, n] : normalizers)
    fuzz::add_seed("kind-normalizer-" + name, tiny(n, null, {{"type", "ByteFallback"}}, null));
  const std::vector<std::pair<std::string, J>> pres = {
      {"bytelevel", bytelevel_pre},
      {"bytelevel-noregex",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}},
      {"split-regex",
       {{"type", "Split"},
        {"pattern",
         {{"Regex",
           "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
           "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
        {"behavior", "Isolated"},
        {"invert", false}}},
      {"split-string",
       {{"type", "Split"},
        {"pattern", {{"String", " "}}},
        {"behavior", "MergedWithNext"},
        {"invert", false}}},
      {"split-removed",
       {{"type", "Split"},
        {"pattern", {{"Regex", "\\d"}}},
        {"behavior", "Removed"},
        {"invert", true}}},
      {"split-previous",
       {{"type", "Split"}, {"pattern", {{"String", "l"}}}, {"behavior", "MergedWithPrevious"}}},
      {"split-contiguous",
       {{"type", "Split"}, {"pattern", {{"Regex", "[a-z]"}}}, {"behavior", "Contiguous"}}},
      {"metaspace-first",
       {{"type", "Metaspace"},
        {"replacement", meta},
        {"prepend_scheme", "first"},
        {"split", false}}},
      {"metaspace-always",
       {{"type", "Metaspace"},
        {"replacement", meta},
        {"prepend_scheme", "always"},
        {"split", true}}},
      {"metaspace-legacy",
       {{"type", "Metaspace"}, {"replacement", meta}, {"add_prefix_space", false}}},
      {"digits", {{"type", "Digits"}, {"individual_digits", true}}},
      {"whitespace", {{"type", "Whitespace"}}},
      {"whitespacesplit", {{"type", "WhitespaceSplit"}}},
      {"sequence",
       {{"type", "Sequence"},
        {"pretokenizers",
         J::array({J{{"type", "Digits"}, {"individual_digits", false}}, bytelevel_pre})}}}};
  for (const auto& [name, p] : pres)
    fuzz::add_seed("kind-pre-" + name, tiny(null, p, {{"type", "ByteLevel"}}, null));
  const std::vector<std::pair<std::string, J>> decoders = {
      {"bytelevel", {{"type", "ByteLevel"}}},
      {"bytefallback", {{"type", "ByteFallback"}}},
      {"fuse", {{"type", "Fuse"}}},
      {"metaspace", {{"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", "always"}}},
      {"replace", {{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}}},
      {"replace-regex", {{"type", "Replace"}, {"pattern", {{"Regex", "l+"}}}, {"content", "L"}}},
      {"strip", {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}},
      {"bpedecoder", {{"type", "BPEDecoder"}, {"suffix", "</w>"}}},
      {"sequence",
       {{"type", "Sequence"},
        {"decoders",
         J::array({J{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
                   J{{"type", "ByteFallback"}}, J{{"type", "Fuse"}},
                   J{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}}};
  for (const auto& [name, d] : decoders)
    fuzz::add_seed("kind-decoder-" + name, tiny(null, null, d, null));
  const J tmpl = {
      {"type", "TemplateProcessing"},
      {"single", J::array({J{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                           J{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                           J{{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
      {"pair", J::array({J{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                         J{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", J::array({1})}, {"tokens", J::array({"<s>"})}}},
        {"</s>", {{"id", "</s>"}, {"ids", J::array({2})}, {"tokens", J::array({"</s>"})}}}}}};
  const std::vector<std::pair<std::string, J>> posts = {
      {"bytelevel",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", false},
        {"use_regex", true}}},
      {"roberta",
       {{"type", "RobertaProcessing"},
        {"sep", {"</s>", 2}},
        {"cls", {"<s>", 1}},
        {"trim_offsets", true}}},
      {"bert", {{"type", "BertProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 1}}}},
      {"template", tmpl},
      {"sequence",
       {{"type", "Sequence"}, {"processors", J::array({J{{"type", "ByteLevel"}}, tmpl})}}}};
  for (const auto& [name, p] : posts)
    fuzz::add_seed("kind-post-" + name, tiny(null, bytelevel_pre, {{"type", "ByteLevel"}}, p));
  const std::vector<std::pair<std::string, J>> models = {
      {"ignore-merges", {{"ignore_merges", true}}},
      {"no-fallback", {{"byte_fallback", false}, {"fuse_unk", false}}},
      {"null-unk", {{"unk_token", null}, {"byte_fallback", false}}},
      {"suffix",
       {{"continuing_subword_prefix", "##"}, {"end_of_word_suffix", "</w>"}, {"dropout", null}}},
      {"merge-pairs", {{"merges", J::array({J::array({"a", "b"}), J::array({"h", "e"})})}}}};
  for (const auto& [name, m] : models)
    fuzz::add_seed(
        "kind-model-" + name,
        tiny(null, {{"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", "first"}},
             {{"type", "Metaspace"}, {"replacement", meta}}, null, m));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!fuzz::seeds_out()) return 0;
  for (const char* rel :
       {"tokenizers/gpt2", "tokenizers/llama2", "tokenizers/llama3", "tokenizers/qwen2.5",
        "tokenizers/qwen3", "tokenizers/mistral-7b-v0.1", "models/stories260K"}) {
    const std::string full = fuzz::slurp(fuzz::data_path(std::string(rel) + "/tokenizer.json"));
    if (full.empty()) continue;
    std::string name = rel;
    name = name.substr(name.find('/') + 1);
    fuzz::add_seed("data-" + name + "-300", trimmed(full, 300));
    fuzz::add_seed("data-" + name + "-1000", trimmed(full, 1000));
  }
  add_kind_seeds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::fresh_dir("in");
  const std::string path = fuzz::write_input(dir, "tokenizer.json", data, size);
  auto tok = Tokenizer::load(path);
  if (tok.ok()) fuzz::exercise_tokenizer(**tok);
  return 0;
}
