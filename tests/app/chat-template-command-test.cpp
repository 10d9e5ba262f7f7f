// `spillway-worker chat-template`: the expected cases of tests/engine/data (transformers'
// apply_chat_template output, make_chat_expected.py) fed to the command, in-process through
// run_worker and once through the built binary (which finds share/spillway/chat_template.py from
// its own location).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test-data.h"
#include "worker-process.h"
#include "worker/commands.h"

namespace spillway::testing {
namespace {

using json = nlohmann::ordered_json;

struct RunResult {
  int code;
  std::string out, err;
};

RunResult run(const std::vector<std::string>& argv, const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = worker::run_worker(argv, {in, out, err});
  return {code, out.str(), err.str()};
}

// The expected cases of one shipped template (tokenizer folder), in file order.
std::vector<json> cases_of(const std::string& name) {
  std::ifstream in(SPILLWAY_CHAT_EXPECTED);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json c = json::parse(line);
    if (c["template"] == name && !c.contains("template_source")) out.push_back(std::move(c));
  }
  return out;
}

std::vector<json> lines_of(const std::string& out) {
  std::vector<json> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) rows.push_back(json::parse(line));
  return rows;
}

// Every case of every shipped template: the same text as transformers, the reviewed spans.
TEST(ChatTemplateCommand, MatchesTransformers) {
  SPILLWAY_REQUIRE_DATA();
  for (const std::string name : {"llama3", "qwen2.5", "qwen3"}) {
    SCOPED_TRACE(name);
    for (const bool agp : {false, true}) {
      std::string input;
      std::vector<json> want;
      for (const json& c : cases_of(name)) {
        if (c["add_generation_prompt"] != agp) continue;
        json line = {{"messages", c["messages"]}};
        if (!c["tools"].is_null()) line["tools"] = c["tools"];
        input += line.dump() + "\n";
        want.push_back(c);
      }
      ASSERT_FALSE(want.empty());
      std::vector<std::string> argv = {"chat-template", "--model", data_path("tokenizers/" + name)};
      if (agp) argv.push_back("--add-generation-prompt");
      RunResult r = run(argv, input);
      ASSERT_EQ(r.code, 0) << r.err;
      const std::vector<json> got = lines_of(r.out);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE(want[i]["case"].get<std::string>());
        EXPECT_EQ(got[i]["text"], want[i]["text"]);
        EXPECT_EQ(got[i]["trained"], want[i]["trained"]);
      }
    }
  }
}

TEST(ChatTemplateCommand, ToolsFileAndBadInput) {
  SPILLWAY_REQUIRE_DATA();
  const std::vector<json> cases = cases_of("qwen2.5");
  const json* tool_case = nullptr;
  for (const json& c : cases)
    if (c["case"] == "tool_calls_glaive_7") tool_case = &c;
  ASSERT_NE(tool_case, nullptr);
  // --tools FILE: the tools of every line that has none of its own.
  TempDir tmp;
  const std::string tools = tmp.path() + "/tools.json";
  std::ofstream(tools) << (*tool_case)["tools"].dump();
  const std::string model = data_path("tokenizers/qwen2.5");
  RunResult r = run({"chat-template", "--model", model, "--tools", tools},
                    json{{"messages", (*tool_case)["messages"]}}.dump() + "\n");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).at(0)["text"], (*tool_case)["text"]);

  // Bad input: exit 2, the line named; the lines before it written.
  const std::string ok = R"({"messages": [{"role": "user", "content": "hi"}]})";
  r = run({"chat-template", "--model", model}, ok + "\nnot json\n");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines_of(r.out).size(), 1u);
  EXPECT_NE(r.err.find("line 2: not JSON"), std::string::npos) << r.err;
  r = run({"chat-template", "--model", model}, R"({"conversations": []})"
                                               "\n");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("line 1: expected {\"messages\": [...]}"), std::string::npos) << r.err;
  r = run({"chat-template"}, "");
  EXPECT_EQ(r.code, 2);
  // A model that ships no template.
  r = run({"chat-template", "--model", data_path("tokenizers/llama2")}, ok + "\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("ships no chat template"), std::string::npos) << r.err;
}

// A template's raise_exception: {"error": its message}, exit 0, and the lines go on.
TEST(ChatTemplateCommand, TemplateErrorIsALine) {
  TempDir tmp;
  std::ofstream(tmp.path() + "/tokenizer_config.json") << json{
      {"chat_template",
       "{% for m in messages %}\n{% if m.role == 'system' %}\n"
       "{{ raise_exception('System role not supported') }}\n{% endif %}"
       "{{ m.content }}\n{% endfor %}"}}.dump();
  RunResult r = run({"chat-template", "--model", tmp.path()},
                    R"({"messages": [{"role": "system", "content": "s"}]})"
                    "\n"
                    R"({"messages": [{"role": "user", "content": "u"}]})"
                    "\n");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> got = lines_of(r.out);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (json{{"error", "System role not supported"}, {"template_line", 3}}));
  EXPECT_EQ(got[1], (json{{"text", "u\n"}, {"trained", json::array()}}));
}

// The built binary finds its renderer script from its own location (build/share/spillway, as
// share/spillway of an installed tree).
TEST(ChatTemplateCommand, TheBinaryFindsItsScript) {
  SPILLWAY_REQUIRE_DATA();
  TempDir tmp;
  const std::string in = tmp.path() + "/in.jsonl";
  std::ofstream(in) << R"({"messages": [{"role": "user", "content": "hi"}, )"
                       R"({"role": "assistant", "content": "Hello."}]})"
                    << "\n";
  // The worker with `in` as its stdin, through sh's redirection.
  const std::string out = tmp.path() + "/out.txt", err = tmp.path() + "/err.txt";
  const pid_t pid = spawn_process("/bin/sh",
                                  {"-c", "exec \"$0\" chat-template --model \"$1\" < \"$2\"",
                                   SPILLWAY_WORKER_BINARY, data_path("tokenizers/qwen2.5"), in},
                                  {}, out, err);
  ASSERT_EQ(wait_exit(pid), 0) << slurp(err);
  const json got = json::parse(slurp(out));
  const std::string text = got["text"];
  EXPECT_EQ(text.substr(got["trained"][0][0].get<size_t>(),
                        got["trained"][0][1].get<size_t>() - got["trained"][0][0].get<size_t>()),
            "Hello.<|im_end|>");
}

}  // namespace
}  // namespace spillway::testing

namespace spillway::testing {
namespace {

// generate --chat auto with a tokenizer that ships a template: the prompt rendered by it with
// add_generation_prompt, one BOS (the template writes bos_token as text; none is added).
TEST(ChatTemplateCommand, GenerateUsesTheModelsOwnTemplate) {
  SPILLWAY_REQUIRE_DATA();
  TempDir tmp;
  const std::string tok = tmp.path() + "/tokenizer";
  std::filesystem::create_directories(tok);
  std::filesystem::copy_file(data_path("models/stories260K/tokenizer.json"),
                             tok + "/tokenizer.json");
  json config = json::parse(slurp(data_path("models/stories260K/tokenizer_config.json")));
  config["chat_template"] =
      "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} "
      "[/INST]{% else %} {{ m.content }} {{ eos_token }}{% endif %}{% endfor %}";
  std::ofstream(tok + "/tokenizer_config.json") << config.dump();
  const std::string out = tmp.path() + "/out.txt", err = tmp.path() + "/err.txt";
  const pid_t pid =
      spawn_worker({"generate", "--model", data_path("models/stories260K"), "--tokenizer", tok,
                    "--prompt", "Once", "--chat", "auto", "--max-new-tokens", "3", "--json"},
                   {}, out, err);
  ASSERT_EQ(wait_exit(pid), 0) << slurp(err);
  const json g = json::parse(slurp(out));
  EXPECT_EQ(g["template"], "model");
  EXPECT_EQ(g["prompt_text"], "<s>[INST] Once [/INST]");
  EXPECT_EQ(g["ids"][0], 1);  // BOS, once
  EXPECT_NE(g["ids"][1], 1);
}

}  // namespace
}  // namespace spillway::testing
