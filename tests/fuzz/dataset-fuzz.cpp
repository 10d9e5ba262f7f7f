// Fuzz target, built once per dataset format (SPILLWAY_FUZZ_FORMAT: "auto", "text", "json-text",
// "alpaca", "sharegpt", "openai", "pretokenized"): a dataset file read as `train` reads one
// (read_dataset_records on the file, strict and then skipping bad records), its conversations
// rendered with every chat template, and the records tokenized and packed into sequences
// (Dataset::from_records, padded and packed layouts) with stories260K's tokenizer (or the
// built-in byte tokenizer when ../shared/data is absent).
//
// Seeds: the first records of each ../shared/data dataset of the format (a few KB each), and
// small generated files for the formats the data folder lacks (OpenAI messages, pre-tokenized).
#include <cstdint>
#include <nlohmann/json.hpp>

#include "data/byte-tokenizer.h"
#include "data/chat-template.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "fuzz-util.h"

using namespace spillway;
using nlohmann::ordered_json;

namespace {

const std::string kFormat = SPILLWAY_FUZZ_FORMAT;

// The file name the reader sees: the extension matters to detection.
std::string file_name() {
  if (kFormat == "text") return "data.txt";
  if (kFormat == "json-text" || kFormat == "openai" || kFormat == "pretokenized")
    return "data.jsonl";
  return "data.json";
}

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    auto t = Tokenizer::load(fuzz::data_path("models/stories260K/tokenizer.json"));
    return t.ok() ? std::move(t).value() : std::unique_ptr<Tokenizer>(new ByteTokenizer());
  }();
  return *tok;
}

std::string head_bytes(const std::string& path, size_t n) {
  std::string s = fuzz::slurp(path);
  if (s.size() <= n) return s;
  const size_t nl = s.rfind('\n', n);
  return s.substr(0, nl == std::string::npos || nl == 0 ? n : nl + 1);
}

std::string head_lines(const std::string& path, size_t first, size_t count) {
  const std::string s = fuzz::slurp(path);
  std::string out;
  for (size_t pos = 0, line = 0; pos < s.size() && line < first + count; ++line) {
    const size_t nl = s.find('\n', pos);
    const size_t end = nl == std::string::npos ? s.size() : nl + 1;
    if (line >= first) out.append(s, pos, end - pos);
    pos = end;
  }
  return out;
}

std::string head_list(const std::string& path, size_t first, size_t count) {
  const ordered_json j = ordered_json::parse(fuzz::slurp(path), nullptr, false);
  if (!j.is_array()) return {};
  ordered_json out = ordered_json::array();
  for (size_t i = first; i < j.size() && i < first + count; ++i) out.push_back(j[i]);
  return out.dump(2);
}

void add_seeds() {
  auto d = [](const char* rel) { return fuzz::data_path(std::string("datasets/") + rel); };
  auto seed = [](const std::string& name, const std::string& s) {
    if (!s.empty()) fuzz::add_seed(name, s);
  };
  const bool any = kFormat == "auto";
  if (kFormat == "text" || any) {
    seed("shakespeare", head_bytes(d("tinyshakespeare/input.txt"), 3000));
    seed("tinystories-sample", head_bytes(d("tinystories/tinystories_sample.txt"), 4000));
    seed("tinystories-valid", head_bytes(d("tinystories/TinyStories-valid.head30k.txt"), 3000));
    seed("wikitext", head_bytes(d("wikitext-2/valid.txt"), 3000));
    seed("wiki-demo", head_lines(d("pretrain-text/wiki_demo.txt"), 0, 2));
  }
  if (kFormat == "json-text" || any) {
    seed("c4-0", head_lines(d("pretrain-text/c4_demo.jsonl"), 0, 2));
    seed("c4-2", head_lines(d("pretrain-text/c4_demo.jsonl"), 2, 1));
  }
  if (kFormat == "alpaca" || any) {
    seed("alpaca-0", head_list(d("alpaca/alpaca_en_demo.json"), 0, 3));
    seed("alpaca-3", head_list(d("alpaca/alpaca_en_demo.json"), 3, 3));
    seed("identity", head_list(d("alpaca/identity.json"), 0, 3));
    seed("seed-tasks", head_lines(d("alpaca/stanford_alpaca_seed_tasks.jsonl"), 0, 3));
    seed("alpaca-history",
         R"([{"instruction": "And now?", "input": "", "output": "Done.", "system": "Be brief.",
                                "history": [["Hi", "Hello"], ["Count", "1 2 3"]]}])");
  }
  if (kFormat == "sharegpt" || any) {
    seed("fastchat", head_list(d("sharegpt/fastchat_dummy_conversation.json"), 0, 2));
    seed("glaive", head_list(d("sharegpt/glaive_toolcall_en_demo.json"), 0, 2));
  }
  if (kFormat == "openai" || any) {
    seed(
        "messages",
        R"({"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6"}]}
{"messages": [{"role": "user", "content": "weather?"}, {"role": "function_call", "content": "{\"name\": \"w\"}"}, {"role": "observation", "content": "sunny"}, {"role": "assistant", "content": "Sunny."}]}
)");
    // The ShareGPT conversations of the data folder in OpenAI form.
    const ordered_json g = ordered_json::parse(
        fuzz::slurp(d("sharegpt/fastchat_dummy_conversation.json")), nullptr, false);
    std::string lines;
    for (size_t i = 0; g.is_array() && i < g.size() && i < 2; ++i) {
      ordered_json msgs = ordered_json::array();
      for (const auto& turn : g[i].value("conversations", ordered_json::array()))
        msgs.push_back({{"role", turn.value("from", "") == "human" ? "user" : "assistant"},
                        {"content", turn.value("value", "")}});
      lines += ordered_json{{"messages", msgs}}.dump() + "\n";
    }
    seed("fastchat-as-messages", lines);
  }
  if (kFormat == "pretokenized" || any) {
    seed("ids",
         "{\"input_ids\": [1, 403, 407, 261, 2]}\n{\"input_ids\": [1, 5, 6], \"labels\": [-100, 5, "
         "6]}\n");
    seed(
        "long", "{\"input_ids\": [" + [] {
          std::string s;
          for (int i = 0; i < 300; ++i) s += (i ? ", " : "") + std::to_string(i % 512);
          return s;
        }() + "]}\n");
  }
}

void check_dataset(DatasetRecords records, bool packed) {
  DatasetOptions o;
  o.seq_len = 64;
  o.add_bos = packed;
  o.instruction_layout = packed ? InstructionLayout::kPacked : InstructionLayout::kPadded;
  o.chat_template = packed ? ChatTemplateKind::kChatMl : ChatTemplateKind::kAuto;
  o.model_type = "llama";
  o.read.skip_bad_records = packed;
  auto ds = Dataset::from_records(std::move(records), file_name(), tokenizer(), o);
  if (!ds.ok()) return;
  (void)ds->position_count();
  (void)ds->trained_count();
  (void)ds->split_tail(0.1);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  if (fuzz::seeds_out()) add_seeds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::fresh_dir("in");
  const std::string path = fuzz::write_input(dir, file_name(), data, size);
  ReadOptions ro;
  ro.format = *parse_dataset_format(kFormat);
  auto records = read_dataset_records(path, ro);
  if (!records.ok()) {
    ro.skip_bad_records = true;
    records = read_dataset_records(path, ro);
    if (!records.ok()) return 0;
  }
  // Every template on the first conversations: the renderer must answer any message sequence.
  size_t rendered = 0;
  for (const DatasetRecord& r : records->records) {
    if (r.messages.empty() || ++rendered > 8) continue;
    for (ChatTemplateKind k :
         {ChatTemplateKind::kLlama2, ChatTemplateKind::kLlama3, ChatTemplateKind::kChatMl,
          ChatTemplateKind::kAlpaca, ChatTemplateKind::kPlain})
      (void)render_chat(k, r.messages);
  }
  check_dataset(*records, false);
  check_dataset(std::move(records).value(), true);
  return 0;
}
