// Fuzz target: a model folder's tokenizer_config.json beside a valid tokenizer.json (stories260K's,
// or a byte-level one when ../shared/data is absent), loaded as a model folder is
// (Tokenizer::load on the folder), then what is derived from it: the chat template recognised in
// its `chat_template` (detect_chat_template, default_system_of_template, choose_chat_template),
// a conversation rendered with it and tokenized, and the tokenizer exercised.
//
// Seeds: every tokenizer_config.json of ../shared/data (Llama 2 and 3, Mistral, Qwen 2.5 and 3,
// GPT-2, stories260K).
#include <cstdint>

#include "data/chat-template.h"
#include "fuzz-util.h"
#include "tokenizer-texts.h"

using namespace spillway;

namespace {

const std::string& folder() {
  static const std::string dir = [] {
    const std::string d = fuzz::fresh_dir("model");
    std::string tok = fuzz::slurp(fuzz::data_path("models/stories260K/tokenizer.json"));
    if (tok.empty())
      tok =
          R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<s>": 3, "</s>": 4}, "merges": ["a b"]},
               "added_tokens": [{"id": 3, "content": "<s>", "special": true}, {"id": 4, "content": "</s>", "special": true}]})";
    fuzz::spit(d + "/tokenizer.json", tok);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)folder();
  if (!fuzz::seeds_out()) return 0;
  for (const char* rel :
       {"tokenizers/gpt2", "tokenizers/llama2", "tokenizers/llama3", "tokenizers/qwen2.5",
        "tokenizers/qwen3", "tokenizers/mistral-7b-v0.1", "models/stories260K"}) {
    const std::string cfg =
        fuzz::slurp(fuzz::data_path(std::string(rel) + "/tokenizer_config.json"));
    std::string name = rel;
    if (!cfg.empty()) fuzz::add_seed("data-" + name.substr(name.find('/') + 1), cfg);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::write_input(folder(), "tokenizer_config.json", data, size);
  auto tok = Tokenizer::load(folder());
  if (!tok.ok()) return 0;
  const std::string& jinja = (*tok)->chat_template();
  (void)detect_chat_template(jinja);
  (void)default_system_of_template(jinja);
  for (const char* family : {"llama", "qwen2", "mistral", ""}) {
    const ChatTemplateChoice choice =
        choose_chat_template(ChatTemplateKind::kAuto, tok->get(), family);
    const ChatMessage messages[] = {{ChatRole::kSystem, choice.default_system},
                                    {ChatRole::kUser, "Hi <s> there"},
                                    {ChatRole::kAssistant, "Hello </s>"}};
    auto segments = render_chat(choice.kind, messages);
    if (!segments.ok()) continue;
    for (const ChatSegment& s : *segments) (void)(*tok)->encode(s.text);
  }
  fuzz::exercise_tokenizer(**tok);
  return 0;
}
