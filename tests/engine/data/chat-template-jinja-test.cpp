// The model's own chat template, rendered by jinja2 (chat-template-jinja.h), against transformers:
// chat-template-expected.jsonl holds apply_chat_template's text (and the ids of that text) for the
// templates of ../shared/data/tokenizers on single and multi-turn conversations, a system message,
// tool calls (glaive_toolcall examples), an empty assistant turn, add_generation_prompt and a
// template that raises; make_chat_expected.py wrote it.
#include "data/chat-template-jinja.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/tokenizer-config.h"
#include "data/tokenizer.h"
#include "fake-tokenizer.h"
#include "test-data.h"

namespace spillway {
namespace {

using json = nlohmann::ordered_json;
using testing::data_path;
using Special = ChatSegment::Special;

std::vector<json> expected_cases() {
  std::ifstream in(SPILLWAY_CHAT_EXPECTED);
  EXPECT_TRUE(in) << SPILLWAY_CHAT_EXPECTED;
  std::vector<json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

std::string dump(const json& j) {
  return j.is_null() ? "" : j.dump();
}

// The renderer of a case's template: its own source, or its tokenizer folder's template.
std::unique_ptr<JinjaChatRenderer> renderer_for(const json& c, const Tokenizer& tok) {
  const std::string source =
      c.contains("template_source") ? c["template_source"].get<std::string>() : tok.chat_template();
  auto r = JinjaChatRenderer::start(source, tok.special_tokens_map());
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(*r) : nullptr;
}

TEST(ChatTemplateJinja, MatchesTransformersOnEveryCase) {
  SPILLWAY_REQUIRE_DATA();
  const std::vector<json> cases = expected_cases();
  ASSERT_EQ(cases.size(), 52u);
  std::map<std::string, std::vector<const json*>> by_template;
  for (const json& c : cases) by_template[c["template"]].push_back(&c);
  ASSERT_EQ(by_template.size(), 4u);
  for (const auto& [name, list] : by_template) {
    auto tok =
        Tokenizer::load(data_path("tokenizers/" + (*list.front())["tokenizer"].get<std::string>()));
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    auto renderer = renderer_for(*list.front(), **tok);
    ASSERT_NE(renderer, nullptr);
    std::vector<ChatRenderRequest> requests;
    for (const json* c : list)
      requests.push_back({(*c)["messages"].dump(), dump((*c)["tools"]),
                          (*c)["add_generation_prompt"].get<bool>()});
    auto rendered = renderer->render(requests);  // one exchange for the template's cases
    ASSERT_TRUE(rendered.ok()) << rendered.status().to_string();
    ASSERT_EQ(rendered->size(), list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const json& c = *list[i];
      const RenderedChat& r = (*rendered)[i];
      SCOPED_TRACE(name + " " + c["case"].get<std::string>());
      if (c.contains("error")) {
        EXPECT_EQ(r.error, c["error"].get<std::string>());
        EXPECT_GT(r.template_line, 0);  // raise_exception's line in the template
        continue;
      }
      ASSERT_TRUE(r.ok()) << r.error_message();
      EXPECT_EQ(r.text, c["text"].get<std::string>());
      std::vector<std::pair<size_t, size_t>> trained;
      for (const json& s : c["trained"]) trained.emplace_back(s[0], s[1]);
      EXPECT_EQ(r.trained, trained);
    }
  }
}

TEST(ChatTemplateJinja, RaiseExceptionMessageAndLine) {
  SPILLWAY_REQUIRE_DATA();
  for (const json& c : expected_cases()) {
    if (c["template"] != "llama2-alternating" || c["case"] != "raises_role_order") continue;
    ASSERT_EQ(c["error"], "Conversation roles must alternate user/assistant/user/assistant/...");
    auto tok = Tokenizer::load(data_path("tokenizers/llama2"));
    ASSERT_TRUE(tok.ok());
    auto renderer = renderer_for(c, **tok);
    ASSERT_NE(renderer, nullptr);
    auto r = renderer->render(std::vector<ChatRenderRequest>{{c["messages"].dump(), "", false}});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->front().template_line, 3);  // {{- raise_exception(...) }} is its line 3
    EXPECT_EQ(r->front().error_message(),
              "the chat template failed at its line 3: Conversation roles must alternate "
              "user/assistant/user/assistant/...");
  }
}

TEST(ChatTemplateJinja, SyntaxErrorNamesTheTemplateLine) {
  auto r = JinjaChatRenderer::start("{% for m in messages %}\n{{ m.content }\n{% endfor %}", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("chat template line 2: template syntax error: ", 0), 0u)
      << r.status().message();
}

TEST(ChatTemplateJinja, RuntimeErrorNamesTheTemplateLine) {
  auto r = JinjaChatRenderer::start(
      "{% for m in messages %}\n{{ m.role }}\n{{ m.content.nope() }}\n{% endfor %}", {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto out = (*r)->render(
      std::vector<ChatRenderRequest>{{R"([{"role": "user", "content": "hi"}])", "", false}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->front().template_line, 3);
  EXPECT_NE(out->front().error.find("nope"), std::string::npos) << out->front().error;
}

TEST(ChatTemplateJinja, TheSandboxRefusesPythonInternals) {
  auto r = JinjaChatRenderer::start("{{ messages.__class__.__mro__ }}", {});
  ASSERT_TRUE(r.ok());
  auto out = (*r)->render(std::vector<ChatRenderRequest>{{"[]", "", false}});
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->front().ok());
  EXPECT_NE(out->front().error.find("unsafe"), std::string::npos) << out->front().error;
}

TEST(ChatTemplateJinja, GenerationBlocksAreTheTrainedSpans) {
  auto r = JinjaChatRenderer::start(
      "{% for m in messages %}{% if m.role == 'assistant' %}A: {% generation %}{{ m.content }}"
      "<end>{% endgeneration %}\n{% else %}U: {{ m.content }}\n{% endif %}{% endfor %}",
      {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE((*r)->has_generation_blocks());
  auto out = (*r)->render(std::vector<ChatRenderRequest>{
      {R"([{"role":"user","content":"é?"},{"role":"assistant","content":"ü!"}])", "", false}});
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(out->front().ok()) << out->front().error;
  EXPECT_EQ(out->front().text, "U: é?\nA: ü!<end>");  // trim_blocks: no newline after a tag
  // Code points: "U: é?\nA: " is 9 of them (10 bytes).
  EXPECT_EQ(out->front().trained, (std::vector<std::pair<size_t, size_t>>{{9, 16}}));
}

TEST(ChatTemplateJinja, SegmentsCutAtBytesAndSplitOutBosEos) {
  RenderedChat r;
  r.text = "<s>[INST] é [/INST] ü </s>";
  r.trained = {{19, 26}};  // " ü </s>" in code points
  auto segs = chat_segments(r, "<s>", "</s>");
  ASSERT_TRUE(segs.ok()) << segs.status().to_string();
  ASSERT_EQ(segs->size(), 4u);
  EXPECT_EQ((*segs)[0].special, Special::kBos);
  EXPECT_FALSE((*segs)[0].trained);
  EXPECT_EQ((*segs)[1].text, "[INST] é [/INST]");
  EXPECT_EQ((*segs)[2].text, " ü ");
  EXPECT_TRUE((*segs)[2].trained);
  EXPECT_EQ((*segs)[3].special, Special::kEos);
  EXPECT_TRUE((*segs)[3].trained);
  r.trained = {{19, 40}};
  EXPECT_FALSE(chat_segments(r, "<s>", "</s>").ok());
}

// The whole pipeline: each case as an OpenAI-format record, read and tokenized by Dataset with
// the model's own template. The ids are transformers' for the rendered text (one BOS, written by
// the template, none added), and the trained ids are those of the trained spans.
TEST(ChatTemplateJinja, DatasetIdsMatchTransformers) {
  SPILLWAY_REQUIRE_DATA();
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers;
  for (const json& c : expected_cases()) {
    if (!c.contains("text") || c.contains("template_source") || c["add_generation_prompt"])
      continue;
    SCOPED_TRACE(c["template"].get<std::string>() + " " + c["case"].get<std::string>());
    std::unique_ptr<Tokenizer>& tok = tokenizers[c["tokenizer"]];
    if (!tok) {
      auto loaded = Tokenizer::load(data_path("tokenizers/" + c["tokenizer"].get<std::string>()));
      ASSERT_TRUE(loaded.ok());
      tok = std::move(*loaded);
    }
    json record = {{"messages", c["messages"]}};
    if (!c["tools"].is_null()) record["tools"] = c["tools"];
    auto records = parse_dataset_records(record.dump(), "case.jsonl", ReadOptions());
    ASSERT_TRUE(records.ok()) << records.status().to_string();
    DatasetOptions o;
    o.seq_len = 4096;
    auto ds = Dataset::from_records(std::move(*records), "case.jsonl", *tok, o);
    ASSERT_TRUE(ds.ok()) << ds.status().to_string();
    EXPECT_EQ(ds->chat_template().kind, ChatTemplateKind::kModel);
    const TokenSequence& s = (*ds)[0];
    std::vector<int32_t> ids = s.input_ids;
    // input_ids holds all but the last token; the last is the last label.
    ids.push_back(s.labels.back() >= 0 ? s.labels.back() : -1);
    const std::vector<int32_t> want = c["input_ids"].get<std::vector<int32_t>>();
    if (s.labels.back() < 0) ids.back() = want.back();  // an untrained last token
    EXPECT_EQ(ids, want);
    // The trained targets decode to the trained spans' text.
    std::vector<int32_t> trained;
    for (int32_t l : s.labels)
      if (l >= 0) trained.push_back(l);
    std::string want_trained;
    const std::string text = c["text"];
    for (const json& span : c["trained"]) {
      const size_t b = utf8_offset_of(text, span[0]), e = utf8_offset_of(text, span[1]);
      want_trained += text.substr(b, e - b);
    }
    auto got = tok->decode(trained);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, want_trained);
  }
}

}  // namespace
}  // namespace spillway

namespace spillway {
namespace {

// PATH set for the scope of a test, restored after.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& path) {
    const char* old = std::getenv("PATH");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("PATH", path.c_str(), 1);
  }
  ~ScopedPath() {
    if (had_)
      ::setenv("PATH", old_.c_str(), 1);
    else
      ::unsetenv("PATH");
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(ChatTemplateJinja, MissingPython3OrJinja2NamesTheDebianPackages) {
  testing::TempDir tmp;
  {
    ScopedPath path(tmp.path());  // no python3 on it
    auto r = JinjaChatRenderer::start("{{ messages }}", {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(r.status().message().find("needs python3"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("apt install python3 python3-jinja2"), std::string::npos);
  }
  // A python3 without its site-packages (-S) has no jinja2.
  std::string real;
  for (const char* dir : {"/usr/bin", "/bin", "/usr/local/bin"})
    if (std::filesystem::exists(std::string(dir) + "/python3"))
      real = std::string(dir) + "/python3";
  if (real.empty()) GTEST_SKIP() << "no python3 in /usr/bin";
  const std::string wrapper = tmp.path() + "/python3";
  std::ofstream(wrapper) << "#!/bin/sh\nexec " << real << " -S \"$@\"\n";
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  ScopedPath path(tmp.path());
  auto r = JinjaChatRenderer::start("{{ messages }}", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("needs Python's jinja2"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("python3-jinja2"), std::string::npos);
}

}  // namespace
}  // namespace spillway

namespace spillway {
namespace {

// A record made in memory (no reader: no transformers-format messages of its own) with the
// default system message setting: rendered by the model's template with the system message
// first, only the reply trained.
TEST(ChatTemplateJinja, RecordsMadeInMemoryAndTheDefaultSystemSetting) {
  testing::FakeByteTokenizer tok(
      "{% for m in messages %}{{ m.role }}:{{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}assistant:{% endif %}",
      /*has_bos=*/false, /*has_eos=*/false);
  DatasetRecords recs;
  recs.format = DatasetFormat::kAlpaca;
  DatasetRecord r;
  r.line = 1;
  r.messages = {{ChatRole::kUser, "q"}, {ChatRole::kAssistant, "a"}};
  recs.records.push_back(r);
  DatasetOptions o;
  o.seq_len = 64;
  o.default_system = "S";
  auto ds = Dataset::from_records(recs, "mem", tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->chat_template().kind, ChatTemplateKind::kModel);
  const TokenSequence& s = (*ds)[0];
  std::string text;
  for (int32_t id : s.input_ids) text += static_cast<char>(id - 3);  // FakeByteTokenizer: byte + 3
  // The inputs: all but the last token, the "\n" after the reply (an untrained last label).
  EXPECT_EQ(text, "system:S\nuser:q\nassistant:a");
  EXPECT_EQ(s.labels.back(), -100);
  std::string trained;
  for (int32_t l : s.labels)
    if (l >= 0) trained += static_cast<char>(l - 3);
  EXPECT_EQ(trained, "a");
}

}  // namespace
}  // namespace spillway

namespace spillway {
namespace {

// The model folder's chat_template.jinja wins over tokenizer_config.json's chat_template, as
// transformers loads them; the config's AddedToken form of a special token is its content.
TEST(ChatTemplateJinja, TheJinjaFileWinsAndSpecialTokensAreNamed) {
  testing::TempDir dir;
  std::ofstream(dir.path() + "/tokenizer_config.json")
      << R"({"chat_template": "old", "bos_token": {"content": "<s>", "__type": "AddedToken"},)"
         R"( "eos_token": "</s>", "mask_token": "<mask>", "pad_token": null})";
  std::ofstream(dir.path() + "/chat_template.jinja") << "new";
  auto config = load_tokenizer_config(dir.path());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->chat_template, "new");
  EXPECT_EQ(special_tokens_map(*config),
            (std::map<std::string, std::string>{
                {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"mask_token", "<mask>"}}));
}

}  // namespace
}  // namespace spillway
