#include "worker/chat-template-command.h"

#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/file-util.h"
#include "core/json-file.h"
#include "data/chat-template-jinja.h"
#include "data/tokenizer-config.h"
#include "worker/args.h"

namespace spillway::worker {

namespace {

// Keys stay in the order they were written: a template's tojson prints them so.
using json = nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage: spillway-worker chat-template --model DIR [--add-generation-prompt] [--tools FILE]\n";

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

int bad_input(CommandIo io, const std::string& why) {
  io.err << "spillway-worker chat-template: " << why << "\n";
  return 2;
}

}  // namespace

int run_chat_template(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--model", "--tools"}, {"--add-generation-prompt"});
  if (args.ok() && !args->positional.empty())
    args = invalid_argument("unexpected argument " + quote_name(args->positional.front()));
  if (args.ok() && args->get("--model").value_or("").empty())
    args = invalid_argument("--model DIR is required");
  if (!args.ok()) {
    io.err << "spillway-worker chat-template: " << args.status().message() << "\n" << kUsage;
    return 2;
  }
  const std::string model = *args->get("--model");
  const bool add_generation_prompt = args->has("--add-generation-prompt");
  std::string tools;
  if (auto path = args->get("--tools")) {
    auto text = read_file(*path);
    if (!text.ok()) return bad_input(io, "--tools: " + text.status().message());
    const json list = json::parse(*text, nullptr, false);
    if (!list.is_array())
      return bad_input(io, "--tools " + *path + ": expected a JSON list of tool schemas");
    tools = dump(list);
  }
  auto config = load_tokenizer_config(model);
  if (!config.ok()) {
    io.err << "spillway-worker chat-template: " << config.status().to_string() << "\n";
    return 1;
  }
  if (config->chat_template.empty()) {
    io.err << "spillway-worker chat-template: " << model
           << " ships no chat template (tokenizer_config.json \"chat_template\" or "
              "chat_template.jinja)\n";
    return 1;
  }
  auto renderer = JinjaChatRenderer::start(config->chat_template, special_tokens_map(*config));
  if (!renderer.ok()) {
    io.err << "spillway-worker chat-template: " << renderer.status().message() << "\n";
    return 1;
  }

  std::string line;
  size_t line_no = 0;
  while (std::getline(io.in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = "line " + std::to_string(line_no);
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) return bad_input(io, where + ": not JSON");
    if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
      return bad_input(io, where + ": expected {\"messages\": [...]} (a list of messages)");
    ChatRenderRequest q{dump(j["messages"]), tools, add_generation_prompt};
    if (auto t = j.find("tools"); t != j.end()) {
      if (!t->is_array() && !t->is_null())
        return bad_input(io, where + ": \"tools\" must be a list of tool schemas");
      q.tools = t->is_null() ? std::string() : dump(*t);
    }
    auto rendered = (*renderer)->render(std::span<const ChatRenderRequest>(&q, 1));
    if (!rendered.ok()) {
      io.err << "spillway-worker chat-template: " << rendered.status().message() << "\n";
      return 1;
    }
    const RenderedChat& r = rendered->front();
    json out;
    if (!r.ok()) {
      out["error"] = r.error;
      if (r.template_line > 0) out["template_line"] = r.template_line;
    } else {
      out["text"] = r.text;
      json spans = json::array();
      for (const auto& [start, end] : r.trained) spans.push_back({start, end});
      out["trained"] = spans;
    }
    io.out << dump(out) << "\n";
    io.out.flush();
  }
  return 0;
}

}  // namespace spillway::worker
