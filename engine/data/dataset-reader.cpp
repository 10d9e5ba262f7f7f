// Dataset reader. JSON records are located by a small scanner (strings, escapes and bracket
// depth) before nlohmann parses each one, so that a record of a .json list can be reported by
// the line where it starts and one broken record does not hide the rest of the file.
#include "data/dataset-reader.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "core/json-depth.h"
#include "core/json-file.h"
#include "data/text-check.h"

namespace spillway {
namespace {

using json = nlohmann::json;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  auto sp = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && sp(s.front())) s.remove_prefix(1);
  while (!s.empty() && sp(s.back())) s.remove_suffix(1);
  return s;
}

bool is_blank(std::string_view s) {
  return trim(s).empty();
}

std::string extension_of(const std::string& name) {
  size_t slash = name.find_last_of('/');
  size_t dot = name.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return lower(name.substr(dot + 1));
}

bool is_json_extension(const std::string& ext) {
  return ext == "json" || ext == "jsonl" || ext == "ndjson";
}

const char* json_type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an unknown value";
  }
}

// A record's JSON text and the 1-based line where it starts.
struct JsonSpan {
  int64_t line = 0;
  std::string_view text;
};

size_t count_newlines(std::string_view s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

// Splits a top-level JSON array into its elements without parsing them. Structural damage
// (unterminated array or string, text after the closing bracket) is fatal; an empty element
// ("[1,,2]", "[1,]") is returned with empty text so that the caller reports it by line.
Status split_json_array(std::string_view s, size_t open_pos, const std::string& file,
                        std::vector<JsonSpan>* out) {
  int64_t line = 1 + static_cast<int64_t>(count_newlines(s.substr(0, open_pos)));
  const int64_t open_line = line;
  size_t i = open_pos + 1;
  size_t start = i;
  int64_t start_line = line;
  int depth = 0;
  bool any = false;
  auto element = [&](size_t end) {
    std::string_view text = s.substr(start, end - start);
    // The record starts at its first non-blank character.
    size_t lead = 0;
    while (lead < text.size() && std::isspace(static_cast<unsigned char>(text[lead]))) {
      if (text[lead] == '\n') ++start_line;
      ++lead;
    }
    out->push_back({start_line, trim(text)});
  };
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\n') {
      ++line;
    } else if (c == '"') {
      int64_t string_line = line;
      for (++i; i < s.size() && s[i] != '"'; ++i) {
        if (s[i] == '\\')
          ++i;
        else if (s[i] == '\n')
          ++line;
      }
      if (i >= s.size())
        return invalid_argument(file + ":" + std::to_string(string_line) +
                                ": invalid JSON: unterminated string");
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (depth == 0) {
        if (c == '}')
          return invalid_argument(file + ":" + std::to_string(line) +
                                  ": invalid JSON: unexpected '}'");
        if (any || !is_blank(s.substr(start, i - start))) element(i);
        std::string_view rest = s.substr(i + 1);
        if (!is_blank(rest)) {
          size_t off = rest.find_first_not_of(" \t\r\n");
          int64_t l = line + static_cast<int64_t>(count_newlines(rest.substr(0, off)));
          return invalid_argument(file + ":" + std::to_string(l) +
                                  ": invalid JSON: text after the closing ']' of the list");
        }
        return Status();
      }
      --depth;
    } else if (c == ',' && depth == 0) {
      element(i);
      any = true;
      start = i + 1;
      start_line = line;
    }
  }
  return invalid_argument(file + ":" + std::to_string(open_line) +
                          ": invalid JSON: the list opened here is never closed");
}

// Parses one record. On failure sets *reason and *line (moved to the line of the error).
bool parse_record(const JsonSpan& span, json* out, std::string* reason, int64_t* line) {
  *line = span.line;
  if (span.text.empty()) {
    *reason = "invalid JSON: empty list element";
    return false;
  }
  if (const size_t depth = json_nesting_depth(span.text); depth > kMaxJsonDepth) {
    *reason = "JSON nested " + std::to_string(depth) + " levels deep (at most " +
              std::to_string(kMaxJsonDepth) + ")";
    return false;
  }
  // core/json-file: the reason without nlohmann's last token (a megabyte string was quoted whole),
  // the text at the error escaped and cut short; the line within the file.
  JsonSyntaxError syntax;
  auto parsed = parse_json(span.text, "record", ErrorCode::kInvalidArgument, &syntax);
  if (!parsed.ok()) {
    if (syntax.line > 0) *line = span.line + static_cast<int64_t>(syntax.line) - 1;
    *reason = "invalid JSON: " + (syntax.line > 0 ? syntax.reason : parsed.status().message());
    return false;
  }
  *out = std::move(*parsed);
  if (!out->is_object()) {
    *reason = std::string("expected a JSON object, got ") + json_type_name(*out);
    return false;
  }
  return true;
}

// Locates the records of a JSON / JSONL file.
Status json_spans(std::string_view s, const std::string& file, const std::string& ext,
                  std::vector<JsonSpan>* out) {
  size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return invalid_argument(file + ": the file is empty");
  if (s[first] == '[') return split_json_array(s, first, file, out);
  if (ext == "json" && s[first] == '{') {
    // One object for the whole file, or JSON lines in a .json file.
    auto probe = parse_json(s, file);
    if (probe.ok() && probe->is_object()) {
      out->push_back({1 + static_cast<int64_t>(count_newlines(s.substr(0, first))), trim(s)});
      return Status();
    }
  }
  int64_t line = 0;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t nl = s.find('\n', pos);
    std::string_view l = s.substr(pos, nl == std::string_view::npos ? s.size() - pos : nl - pos);
    ++line;
    if (!is_blank(l)) out->push_back({line, trim(l)});
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return Status();
}

// ---- field access with reasons -------------------------------------------------------------

// A string field. Missing or null: *present = false (not an error). Wrong type: reason.
bool optional_string(const json& obj, const char* key, std::string* out, bool* present,
                     std::string* reason) {
  auto it = obj.find(key);
  *present = false;
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_string()) {
    *reason = std::string("'") + key + "' must be a string, got " + json_type_name(*it);
    return false;
  }
  *out = it->get<std::string>();
  *present = true;
  return true;
}

bool required_string(const json& obj, const char* key, std::string* out, std::string* reason) {
  bool present = false;
  if (!optional_string(obj, key, out, &present, reason)) return false;
  if (!present) {
    *reason = std::string("missing key '") + key + "'";
    return false;
  }
  return true;
}

std::string keys_of(const json& obj) {
  std::string k;
  for (auto it = obj.begin(); it != obj.end(); ++it) k += (k.empty() ? "" : ", ") + it.key();
  return "[" + k + "]";
}

Result<ChatRole> role_from_name(const std::string& name) {
  std::string n = lower(name);
  if (n == "human" || n == "user") return ChatRole::kUser;
  if (n == "gpt" || n == "assistant" || n == "model" || n == "chatgpt" || n == "bard" ||
      n == "bing" || n == "bot")
    return ChatRole::kAssistant;
  if (n == "system") return ChatRole::kSystem;
  if (n == "function_call" || n == "tool_call" || n == "tool_calls") return ChatRole::kToolCall;
  if (n == "observation" || n == "tool" || n == "function" || n == "tool_response" ||
      n == "ipython")
    return ChatRole::kToolResult;
  return invalid_argument("unknown role " + quote_name(name));
}

// transformers' format keeps each object's keys in the order they were written (a template's
// tojson prints them so), hence ordered_json.
using ojson = nlohmann::ordered_json;

std::string dump_json(const ojson& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A message of a conversation read as ChatMessage, in transformers' format.
ojson hf_message(const ChatMessage& m) {
  switch (m.role) {
    case ChatRole::kSystem:
      return {{"role", "system"}, {"content", m.content}};
    case ChatRole::kUser:
      return {{"role", "user"}, {"content", m.content}};
    case ChatRole::kToolResult:
      return {{"role", "tool"}, {"content", m.content}};
    case ChatRole::kToolCall: {
      // ShareGPT's function_call value: {"name", "arguments"} or a list of them.
      ojson calls = ojson::parse(m.content, nullptr, false);
      if (calls.is_object()) calls = ojson::array({calls});
      ojson tool_calls = ojson::array();
      if (calls.is_array()) {
        for (const ojson& c : calls) {
          if (!c.is_object() || !c.contains("name")) {
            tool_calls = nullptr;
            break;
          }
          ojson f = {{"name", c["name"]}, {"arguments", c.value("arguments", ojson::object())}};
          tool_calls.push_back({{"type", "function"}, {"function", f}});
        }
      }
      if (calls.is_array() && tool_calls.is_array() && !tool_calls.empty())
        return {{"role", "assistant"}, {"content", ""}, {"tool_calls", tool_calls}};
      return {{"role", "assistant"}, {"content", m.content}};
    }
    case ChatRole::kAssistant:
      break;
  }
  return {{"role", "assistant"}, {"content", m.content}};
}

std::string hf_messages_of(const std::vector<ChatMessage>& messages) {
  ojson list = ojson::array();
  for (const ChatMessage& m : messages) list.push_back(hf_message(m));
  return dump_json(list);
}

// A record's tools (a list, or a JSON string of one, as glaive_toolcall writes them) as
// transformers' tool schemas: each {type: function, function: ...}. Empty when there are none.
std::string hf_tools_of(const ojson& tools) {
  ojson list = tools.is_string() ? ojson::parse(tools.get<std::string>(), nullptr, false) : tools;
  if (!list.is_array() || list.empty()) return "";
  for (ojson& t : list)
    if (t.is_object() && !t.contains("type")) t = {{"type", "function"}, {"function", t}};
  return dump_json(list);
}

// `content` as a string: a string, null (empty), or OpenAI's list of {type: "text", text} parts.
bool content_string(const json& v, const std::string& where, std::string* out,
                    std::string* reason) {
  if (v.is_null()) {
    out->clear();
    return true;
  }
  if (v.is_string()) {
    *out = v.get<std::string>();
    return true;
  }
  if (v.is_array()) {
    out->clear();
    for (const json& part : v) {
      if (part.is_string()) {
        *out += part.get<std::string>();
        continue;
      }
      auto type = part.is_object() ? part.find("type") : part.end();
      auto text = part.is_object() ? part.find("text") : part.end();
      if (!part.is_object() || text == part.end() || !text->is_string()) {
        std::string t = (part.is_object() && type != part.end() && type->is_string())
                            ? type->get<std::string>()
                            : json_type_name(part);
        *reason = where + " has a content part of unsupported type '" + t + "' (only text)";
        return false;
      }
      *out += text->get<std::string>();
    }
    return true;
  }
  *reason = where + " content must be a string, got " + json_type_name(v);
  return false;
}

// ---- per-format conversion -----------------------------------------------------------------

bool convert_text(const json& obj, DatasetRecord* r, std::string* reason) {
  if (!required_string(obj, "text", &r->text, reason)) return false;
  if (is_blank(r->text)) {
    *reason = "empty 'text'";
    return false;
  }
  return true;
}

// Alpaca: user = instruction + "\n\n" + input (when input is set), assistant = output;
// `history` ([[user, assistant], ...]) goes before, `system` first. Seed tasks with
// `instances` give one record per instance.
bool convert_alpaca(const json& obj, int64_t line, std::vector<DatasetRecord>* out,
                    std::string* reason) {
  std::string instruction, system;
  if (!required_string(obj, "instruction", &instruction, reason)) return false;
  bool has_system = false;
  if (!optional_string(obj, "system", &system, &has_system, reason)) return false;

  std::vector<ChatMessage> prefix;
  if (has_system && !system.empty()) prefix.push_back({ChatRole::kSystem, system});
  if (auto h = obj.find("history"); h != obj.end() && !h->is_null()) {
    if (!h->is_array()) {
      *reason = std::string("'history' must be a list of [user, assistant] pairs, got ") +
                json_type_name(*h);
      return false;
    }
    for (size_t i = 0; i < h->size(); ++i) {
      const json& pair = (*h)[i];
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
        *reason = "'history' entry " + std::to_string(i) + " must be [user, assistant] strings";
        return false;
      }
      prefix.push_back({ChatRole::kUser, pair[0].get<std::string>()});
      prefix.push_back({ChatRole::kAssistant, pair[1].get<std::string>()});
    }
  }

  auto make = [&](const std::string& input, const std::string& output) {
    if (is_blank(instruction) && is_blank(input)) {
      *reason = "empty 'instruction' and 'input'";
      return false;
    }
    DatasetRecord r;
    r.line = line;
    r.messages = prefix;
    std::string user = instruction;
    if (!is_blank(input)) user += (user.empty() ? "" : "\n\n") + input;
    r.messages.push_back({ChatRole::kUser, std::move(user)});
    r.messages.push_back({ChatRole::kAssistant, output});
    r.chat_messages_json = hf_messages_of(r.messages);
    out->push_back(std::move(r));
    return true;
  };

  auto inst = obj.find("instances");
  if (obj.find("output") == obj.end() && inst != obj.end()) {
    if (!inst->is_array() || inst->empty()) {
      *reason = "'instances' must be a non-empty list of {input, output}";
      return false;
    }
    for (size_t i = 0; i < inst->size(); ++i) {
      const json& o = (*inst)[i];
      if (!o.is_object()) {
        *reason = "'instances' entry " + std::to_string(i) + " must be an object";
        return false;
      }
      std::string input, output;
      bool has_input = false;
      if (!optional_string(o, "input", &input, &has_input, reason) ||
          !required_string(o, "output", &output, reason)) {
        *reason = "'instances' entry " + std::to_string(i) + ": " + *reason;
        return false;
      }
      if (!make(input, output)) return false;
    }
    return true;
  }
  std::string input, output;
  bool has_input = false;
  if (!optional_string(obj, "input", &input, &has_input, reason)) return false;
  if (!required_string(obj, "output", &output, reason)) return false;
  return make(input, output);
}

// ShareGPT and OpenAI share one reader: the list is `conversations` or `messages`, a message is
// {from, value} or {role, content}. OpenAI tool calls ({role: assistant, tool_calls: [...]})
// become kToolCall messages holding the calls as JSON.
bool convert_conversation(const json& obj, const ojson& ordered, DatasetFormat format,
                          DatasetRecord* r, std::string* reason) {
  const char* primary = format == DatasetFormat::kOpenAiMessages ? "messages" : "conversations";
  const char* secondary = format == DatasetFormat::kOpenAiMessages ? "conversations" : "messages";
  auto list = obj.find(primary);
  const char* key = primary;
  if (list == obj.end()) {
    list = obj.find(secondary);
    key = secondary;
  }
  if (list == obj.end()) {
    *reason = std::string("missing key '") + primary + "'";
    return false;
  }
  if (!list->is_array()) {
    *reason = std::string("'") + key + "' must be a list of messages, got " + json_type_name(*list);
    return false;
  }
  if (list->empty()) {
    *reason = "empty conversation";
    return false;
  }

  std::string system, tools;
  bool has = false;
  if (!optional_string(obj, "system", &system, &has, reason)) return false;
  const std::string plain_system = system;  // without the tools, which the template gets apart
  if (auto t = obj.find("tools"); t != obj.end() && !t->is_null()) {
    tools = t->is_string() ? t->get<std::string>() : t->dump();
    r->chat_tools_json = hf_tools_of(ordered["tools"]);
  }
  ojson hf = ojson::array();
  const ojson& ordered_list = ordered[key];
  if (!plain_system.empty()) hf.push_back({{"role", "system"}, {"content", plain_system}});
  if (!trim(tools).empty() && trim(tools) != "[]") {
    system += (system.empty() ? "" : "\n\n") +
              std::string("You have access to the following tools:\n") + tools;
  }
  if (!system.empty()) r->messages.push_back({ChatRole::kSystem, system});

  bool any_trained = false;
  for (size_t i = 0; i < list->size(); ++i) {
    const json& m = (*list)[i];
    std::string where = "message " + std::to_string(i + 1);
    if (!m.is_object()) {
      *reason = where + " must be an object, got " + json_type_name(m);
      return false;
    }
    auto role_it = m.find("from");
    auto content_it = m.find("value");
    if (role_it == m.end()) role_it = m.find("role");
    if (content_it == m.end()) content_it = m.find("content");
    if (role_it == m.end()) {
      *reason = where + " has no 'from' or 'role'";
      return false;
    }
    if (!role_it->is_string()) {
      *reason = where + " role must be a string, got " + json_type_name(*role_it);
      return false;
    }
    auto role = role_from_name(role_it->get<std::string>());
    if (!role.ok()) {
      *reason = where + ": " + role.status().message();
      return false;
    }
    ChatMessage msg{*role, ""};
    auto calls = m.find("tool_calls");
    if (*role == ChatRole::kAssistant && calls != m.end() && !calls->is_null()) {
      msg.role = ChatRole::kToolCall;
      msg.content = calls->dump();
    } else {
      if (content_it == m.end()) {
        *reason = where + " has no 'value' or 'content'";
        return false;
      }
      if (!content_string(*content_it, where, &msg.content, reason)) return false;
    }
    if (msg.role == ChatRole::kSystem && !r->messages.empty()) {
      if (i == 0 && r->messages.size() == 1 && r->messages[0].role == ChatRole::kSystem) {
        r->messages[0].content = msg.content + "\n\n" + r->messages[0].content;
        if (hf.empty())
          hf.push_back({{"role", "system"}, {"content", msg.content}});
        else
          hf[0]["content"] = msg.content + "\n\n" + plain_system;
        continue;
      }
      *reason = where + " is a system message after the start of the conversation";
      return false;
    }
    any_trained = any_trained || chat_role_is_trained(msg.role);
    // An OpenAI message under its own role name is passed as written (tool_calls, tool_call_id,
    // reasoning_content, content parts); ShareGPT's and aliases are converted.
    const std::string role_name = role_it->get<std::string>();
    const bool as_written = m.contains("role") && (role_name == "system" || role_name == "user" ||
                                                   role_name == "assistant" || role_name == "tool");
    hf.push_back(as_written ? ordered_list[i] : hf_message(msg));
    r->messages.push_back(std::move(msg));
  }
  r->chat_messages_json = dump_json(hf);
  if (!any_trained) {
    *reason = "conversation has no assistant turn (nothing to train)";
    return false;
  }
  return true;
}

bool int_list(const json& v, const char* key, std::vector<int32_t>* out, bool allow_ignore,
              std::string* reason) {
  if (!v.is_array()) {
    *reason = std::string("'") + key + "' must be a list of integers, got " + json_type_name(v);
    return false;
  }
  out->reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    if (!e.is_number_integer()) {
      *reason = std::string("'") + key + "' must be a list of integers (entry " +
                std::to_string(i) + " is " + json_type_name(e) + ")";
      return false;
    }
    int64_t x = e.get<int64_t>();
    if (x > std::numeric_limits<int32_t>::max() || (x < 0 && !(allow_ignore && x == -100))) {
      *reason = std::string("'") + key + "' entry " + std::to_string(i) + " = " +
                std::to_string(x) + " is not a token id";
      return false;
    }
    out->push_back(static_cast<int32_t>(x));
  }
  return true;
}

bool convert_pretokenized(const json& obj, DatasetRecord* r, std::string* reason) {
  auto ids = obj.find("input_ids");
  if (ids == obj.end()) {
    *reason = "missing key 'input_ids'";
    return false;
  }
  if (!int_list(*ids, "input_ids", &r->input_ids, false, reason)) return false;
  if (r->input_ids.size() < 2) {
    *reason = "'input_ids' has " + std::to_string(r->input_ids.size()) +
              " tokens; at least 2 are needed for one target";
    return false;
  }
  if (auto lab = obj.find("labels"); lab != obj.end() && !lab->is_null()) {
    if (!int_list(*lab, "labels", &r->labels, true, reason)) return false;
    if (r->labels.size() != r->input_ids.size()) {
      *reason = "'labels' has " + std::to_string(r->labels.size()) +
                " entries but 'input_ids' has " + std::to_string(r->input_ids.size());
      return false;
    }
  }
  return true;
}

Result<DatasetFormat> format_from_keys(const json& obj) {
  if (obj.contains("input_ids")) return DatasetFormat::kPreTokenized;
  if (obj.contains("conversations")) return DatasetFormat::kShareGpt;
  if (obj.contains("messages")) return DatasetFormat::kOpenAiMessages;
  if (obj.contains("instruction")) return DatasetFormat::kAlpaca;
  if (obj.contains("text")) return DatasetFormat::kJsonText;
  return invalid_argument("has keys " + keys_of(obj) +
                          "; expected 'text', 'instruction'/'output' (Alpaca), 'conversations' "
                          "(ShareGPT), 'messages' (OpenAI) or 'input_ids' (pre-tokenized)");
}

Status read_text(std::string_view content, const std::string& file, TextSplit split,
                 DatasetRecords* out) {
  static constexpr std::string_view kEot = "<|endoftext|>";
  if (split == TextSplit::kAuto)
    split = content.find(kEot) != std::string_view::npos ? TextSplit::kEndOfText
                                                         : TextSplit::kWholeFile;
  out->text_split = split;
  auto add = [&](std::string_view piece, size_t offset) {
    if (is_blank(piece)) return;
    DatasetRecord r;
    size_t lead = piece.find_first_not_of(" \t\r\n");
    r.line = 1 + static_cast<int64_t>(count_newlines(content.substr(0, offset + lead)));
    r.text = std::string(piece);
    out->records.push_back(std::move(r));
  };
  if (split == TextSplit::kWholeFile) {
    add(content, 0);
  } else if (split == TextSplit::kEndOfText) {
    size_t pos = 0;
    while (true) {
      size_t e = content.find(kEot, pos);
      std::string_view piece =
          content.substr(pos, e == std::string_view::npos ? content.size() - pos : e - pos);
      add(piece, pos);
      if (e == std::string_view::npos) break;
      pos = e + kEot.size();
    }
    // The separator usually sits on its own line; the newlines around it are not text.
    for (auto& r : out->records) r.text = std::string(trim(r.text));
  } else {
    // Lines or paragraphs (a paragraph ends at a blank line).
    size_t pos = 0, block_start = 0;
    bool in_block = false;
    while (pos <= content.size()) {
      size_t nl = content.find('\n', pos);
      size_t end = nl == std::string_view::npos ? content.size() : nl;
      std::string_view l = content.substr(pos, end - pos);
      if (split == TextSplit::kLines) {
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        add(l, pos);
      } else if (is_blank(l)) {
        if (in_block) add(content.substr(block_start, pos - block_start), block_start);
        in_block = false;
      } else if (!in_block) {
        in_block = true;
        block_start = pos;
      }
      if (nl == std::string_view::npos) break;
      pos = nl + 1;
    }
    if (in_block) add(content.substr(block_start), block_start);
    if (split == TextSplit::kParagraphs)
      for (auto& r : out->records) r.text = std::string(trim(r.text));
  }
  if (out->records.empty()) return invalid_argument(file + ": no text in the file");
  return Status();
}

}  // namespace

std::string chat_messages_json_of(const std::vector<ChatMessage>& messages) {
  return hf_messages_of(messages);
}

std::string RecordIssue::to_string() const {
  return file + ":" + std::to_string(line) + ": " + reason;
}

Status IssueLog::report(int64_t line, std::string reason) {
  RecordIssue issue{file_, line, std::move(reason)};
  if (!skip_) return invalid_argument(issue.to_string());
  ++count_;
  if (kept_.size() < max_kept_) kept_.push_back(std::move(issue));
  return Status();
}

const char* dataset_format_name(DatasetFormat format) {
  switch (format) {
    case DatasetFormat::kAuto:
      return "auto";
    case DatasetFormat::kText:
      return "text";
    case DatasetFormat::kJsonText:
      return "json-text";
    case DatasetFormat::kAlpaca:
      return "alpaca";
    case DatasetFormat::kShareGpt:
      return "sharegpt";
    case DatasetFormat::kOpenAiMessages:
      return "openai";
    case DatasetFormat::kPreTokenized:
      return "pretokenized";
  }
  return "?";
}

Result<DatasetFormat> parse_dataset_format(std::string_view name) {
  std::string n = lower(trim(name));
  if (n.empty() || n == "auto") return DatasetFormat::kAuto;
  if (n == "text" || n == "txt" || n == "plain") return DatasetFormat::kText;
  if (n == "json-text" || n == "jsonl" || n == "json" || n == "jsonl-text")
    return DatasetFormat::kJsonText;
  if (n == "alpaca") return DatasetFormat::kAlpaca;
  if (n == "sharegpt") return DatasetFormat::kShareGpt;
  if (n == "openai" || n == "messages") return DatasetFormat::kOpenAiMessages;
  if (n == "pretokenized" || n == "pre-tokenized" || n == "tokenized")
    return DatasetFormat::kPreTokenized;
  return invalid_argument(
      "unknown dataset format " + quote_name(name) +
      " (expected auto, text, json-text, alpaca, sharegpt, openai or pretokenized)");
}

const char* text_split_name(TextSplit split) {
  switch (split) {
    case TextSplit::kAuto:
      return "auto";
    case TextSplit::kWholeFile:
      return "file";
    case TextSplit::kLines:
      return "lines";
    case TextSplit::kParagraphs:
      return "paragraphs";
    case TextSplit::kEndOfText:
      return "endoftext";
  }
  return "?";
}

Result<TextSplit> parse_text_split(std::string_view name) {
  std::string n = lower(trim(name));
  if (n.empty() || n == "auto") return TextSplit::kAuto;
  if (n == "file" || n == "whole-file") return TextSplit::kWholeFile;
  if (n == "lines" || n == "line") return TextSplit::kLines;
  if (n == "paragraphs" || n == "paragraph") return TextSplit::kParagraphs;
  if (n == "endoftext" || n == "<|endoftext|>") return TextSplit::kEndOfText;
  return invalid_argument("unknown text split " + quote_name(name) +
                          " (expected auto, file, lines, paragraphs or endoftext)");
}

Result<DatasetRecords> parse_dataset_records(std::string_view content, const std::string& name,
                                             const ReadOptions& options) {
  if (content.size() >= 3 && content.substr(0, 3) == "\xEF\xBB\xBF") content.remove_prefix(3);
  DatasetRecords out;
  out.format = options.format;
  const std::string ext = extension_of(name);
  if (out.format == DatasetFormat::kAuto && !is_json_extension(ext))
    out.format = DatasetFormat::kText;
  if (out.format == DatasetFormat::kText) {
    SPW_RETURN_IF_ERROR(read_text(content, name, options.text_split, &out));
    return out;
  }

  std::vector<JsonSpan> spans;
  SPW_RETURN_IF_ERROR(json_spans(content, name, ext.empty() ? "json" : ext, &spans));
  IssueLog issues(name, options.skip_bad_records, options.max_reported_issues);
  for (const JsonSpan& span : spans) {
    json obj;
    std::string reason;
    int64_t line = span.line;
    if (!parse_record(span, &obj, &reason, &line)) {
      SPW_RETURN_IF_ERROR(issues.report(line, std::move(reason)));
      continue;
    }
    if (out.format == DatasetFormat::kAuto) {
      auto f = format_from_keys(obj);
      if (!f.ok())
        return invalid_argument(name + ":" + std::to_string(line) +
                                ": cannot detect the dataset format: the first record " +
                                f.status().message());
      out.format = *f;
    }
    bool ok = true;
    switch (out.format) {
      case DatasetFormat::kJsonText:
      case DatasetFormat::kText: {
        DatasetRecord r;
        r.line = line;
        ok = convert_text(obj, &r, &reason);
        if (ok) out.records.push_back(std::move(r));
        break;
      }
      case DatasetFormat::kAlpaca: {
        size_t before = out.records.size();
        ok = convert_alpaca(obj, line, &out.records, &reason);
        if (!ok) out.records.resize(before);
        break;
      }
      case DatasetFormat::kShareGpt:
      case DatasetFormat::kOpenAiMessages: {
        DatasetRecord r;
        r.line = line;
        // The record again, its keys in written order, for the transformers-format messages.
        const ojson ordered = ojson::parse(span.text, nullptr, false);
        ok = convert_conversation(obj, ordered, out.format, &r, &reason);
        if (ok) out.records.push_back(std::move(r));
        break;
      }
      case DatasetFormat::kPreTokenized: {
        DatasetRecord r;
        r.line = line;
        ok = convert_pretokenized(obj, &r, &reason);
        if (ok) out.records.push_back(std::move(r));
        break;
      }
      case DatasetFormat::kAuto:
        break;
    }
    if (!ok) SPW_RETURN_IF_ERROR(issues.report(line, std::move(reason)));
  }
  out.skipped = issues.count();
  out.issues = issues.kept();
  if (out.records.empty()) {
    std::string msg = name + ": no usable record";
    if (out.skipped > 0)
      msg += " (" + std::to_string(out.skipped) + " bad; first: " + out.issues.front().to_string() +
             ")";
    return invalid_argument(msg);
  }
  return out;
}

// A dataset file's content, refused when it is not text (a binary file read as text trained on
// garbage without a word).
Result<std::string> read_text_file(const std::string& path) {
  SPW_ASSIGN_OR_RETURN(std::string content, read_file(path));
  if (std::string why = not_text_reason(std::string_view(content).substr(0, kTextCheckBytes), path);
      !why.empty())
    return invalid_argument(why);
  return content;
}

Result<DatasetRecords> read_dataset_records(const std::string& path, const ReadOptions& options) {
  SPW_ASSIGN_OR_RETURN(std::string content, read_text_file(path));
  return parse_dataset_records(content, path, options);
}

Result<DatasetFormat> detect_dataset_format(const std::string& path) {
  const std::string ext = extension_of(path);
  SPW_ASSIGN_OR_RETURN(std::string content, read_text_file(path));
  if (!is_json_extension(ext)) return DatasetFormat::kText;
  std::string_view s = content;
  if (s.size() >= 3 && s.substr(0, 3) == "\xEF\xBB\xBF") s.remove_prefix(3);
  std::vector<JsonSpan> spans;
  SPW_RETURN_IF_ERROR(json_spans(s, path, ext, &spans));
  if (spans.empty()) return invalid_argument(path + ": no records");
  json obj;
  std::string reason;
  int64_t line = 0;
  if (!parse_record(spans.front(), &obj, &reason, &line))
    return invalid_argument(path + ":" + std::to_string(line) + ": " + reason);
  auto f = format_from_keys(obj);
  if (!f.ok())
    return invalid_argument(path + ":" + std::to_string(line) +
                            ": cannot detect the dataset format: the first record " +
                            f.status().message());
  return *f;
}

}  // namespace spillway
