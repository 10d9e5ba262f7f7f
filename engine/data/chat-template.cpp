// Chat templates written out by hand. Each renderer follows the family's reference Jinja template
// (Hugging Face tokenizer_config.json of Llama-2-chat, Llama-3-Instruct, Qwen2.5-Instruct) and
// Stanford Alpaca's prompt; where the trained span is a choice, it follows LLaMA-Factory: the
// reply and the token that closes it are trained, the role headers and the user turns are not.
#include "data/chat-template.h"

#include <algorithm>
#include <cctype>

#include "core/json-file.h"
#include "data/tokenizer.h"

namespace spillway {
namespace {

using Special = ChatSegment::Special;

std::string_view trim(std::string_view s) {
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Appends text, merging with the previous segment when it has the same trained flag, so that
// the tokenizer later sees prompt text in as few pieces as the whole-string encoding would.
void add(std::vector<ChatSegment>& out, std::string_view text, bool trained) {
  if (text.empty()) return;
  if (!out.empty() && out.back().special == Special::kNone && out.back().trained == trained) {
    out.back().text.append(text);
    return;
  }
  out.push_back({std::string(text), trained, Special::kNone});
}

void add_special(std::vector<ChatSegment>& out, Special special, bool trained) {
  out.push_back({std::string(), trained, special});
}

// Llama-2-chat: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {reply} </s><s>[INST] ...
// (Meta's chat_completion and the HF template). The space before the reply is left to the
// tokenizer: SentencePiece prepends "▁" to the separately encoded reply, which gives the ids of
// the whole string; the space after it is part of the trained reply, as in Meta's format.
void render_llama2(std::span<const ChatMessage> msgs, std::string_view system,
                   std::vector<ChatSegment>& out) {
  bool system_pending = !system.empty();
  for (const ChatMessage& m : msgs) {
    if (chat_role_is_trained(m.role)) {
      add(out, std::string(trim(m.content)) + " ", true);
      add_special(out, Special::kEos, true);
      continue;
    }
    add_special(out, Special::kBos, false);
    std::string turn = "[INST] ";
    if (system_pending) {
      turn += "<<SYS>>\n" + std::string(trim(system)) + "\n<</SYS>>\n\n";
      system_pending = false;
    }
    turn += std::string(trim(m.content)) + " [/INST]";
    add(out, turn, false);
  }
}

// Llama-3-Instruct:
// <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
void render_llama3(std::span<const ChatMessage> msgs, std::string_view system,
                   std::vector<ChatSegment>& out) {
  add_special(out, Special::kBos, false);
  auto header = [](std::string_view role) {
    return "<|start_header_id|>" + std::string(role) + "<|end_header_id|>\n\n";
  };
  if (!system.empty()) add(out, header("system") + std::string(trim(system)) + "<|eot_id|>", false);
  for (const ChatMessage& m : msgs) {
    bool trained = chat_role_is_trained(m.role);
    const char* role = m.role == ChatRole::kToolResult ? "ipython" : trained ? "assistant" : "user";
    add(out, header(role), false);
    add(out, std::string(trim(m.content)) + "<|eot_id|>", trained);
  }
}

// ChatML (Qwen2/2.5): <|im_start|>{role}\n{content}<|im_end|>\n. Tool calls and results use
// Qwen2.5's <tool_call> / <tool_response> wrappers. The newline after a reply's <|im_end|> is
// prompt text of the next turn, so it is not trained.
void render_chatml(std::span<const ChatMessage> msgs, std::string_view system,
                   std::vector<ChatSegment>& out) {
  if (!system.empty())
    add(out, "<|im_start|>system\n" + std::string(system) + "<|im_end|>\n", false);
  for (const ChatMessage& m : msgs) {
    switch (m.role) {
      case ChatRole::kAssistant:
        add(out, "<|im_start|>assistant\n", false);
        add(out, m.content + "<|im_end|>", true);
        add(out, "\n", false);
        break;
      case ChatRole::kToolCall:
        add(out, "<|im_start|>assistant\n", false);
        add(out, "<tool_call>\n" + m.content + "\n</tool_call><|im_end|>", true);
        add(out, "\n", false);
        break;
      case ChatRole::kToolResult:
        add(out,
            "<|im_start|>user\n<tool_response>\n" + m.content + "\n</tool_response><|im_end|>\n",
            false);
        break;
      default:
        add(out, "<|im_start|>user\n" + m.content + "<|im_end|>\n", false);
        break;
    }
  }
}

// Stanford Alpaca: preamble, "### Instruction:\n{user}\n\n### Response:\n{reply}</s>"; further
// turns follow after a blank line. A system message replaces the preamble.
void render_alpaca(std::span<const ChatMessage> msgs, std::string_view system,
                   std::vector<ChatSegment>& out) {
  static constexpr std::string_view kPreamble =
      "Below is an instruction that describes a task. Write a response that appropriately "
      "completes the request.";
  add_special(out, Special::kBos, false);
  add(out, std::string(system.empty() ? kPreamble : trim(system)) + "\n\n", false);
  bool after_reply = false;
  for (const ChatMessage& m : msgs) {
    if (chat_role_is_trained(m.role)) {
      add(out, m.content, true);
      add_special(out, Special::kEos, true);
      after_reply = true;
      continue;
    }
    std::string turn = after_reply ? "\n\n" : "";
    turn += m.role == ChatRole::kToolResult ? "### Observation:\n" : "### Instruction:\n";
    turn += m.content + "\n\n### Response:\n";
    add(out, turn, false);
    after_reply = false;
  }
}

// Plain, for base models: "{system}\n\n{user}\n{reply}</s>{user}\n{reply}</s>".
void render_plain(std::span<const ChatMessage> msgs, std::string_view system,
                  std::vector<ChatSegment>& out) {
  add_special(out, Special::kBos, false);
  if (!system.empty()) add(out, std::string(system) + "\n\n", false);
  for (const ChatMessage& m : msgs) {
    if (chat_role_is_trained(m.role)) {
      add(out, m.content, true);
      add_special(out, Special::kEos, true);
    } else {
      add(out, m.content + "\n", false);
    }
  }
}

}  // namespace

const char* chat_role_name(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem:
      return "system";
    case ChatRole::kUser:
      return "user";
    case ChatRole::kAssistant:
      return "assistant";
    case ChatRole::kToolCall:
      return "tool_call";
    case ChatRole::kToolResult:
      return "tool_result";
  }
  return "?";
}

const char* chat_template_name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kAuto:
      return "auto";
    case ChatTemplateKind::kLlama2:
      return "llama-2";
    case ChatTemplateKind::kLlama3:
      return "llama-3";
    case ChatTemplateKind::kChatMl:
      return "chatml";
    case ChatTemplateKind::kAlpaca:
      return "alpaca";
    case ChatTemplateKind::kPlain:
      return "plain";
    case ChatTemplateKind::kModel:
      return "model";
  }
  return "?";
}

Result<ChatTemplateKind> parse_chat_template_kind(std::string_view name) {
  std::string n = lower(trim(name));
  if (n == "auto" || n.empty()) return ChatTemplateKind::kAuto;
  if (n == "llama-2" || n == "llama2" || n == "mistral") return ChatTemplateKind::kLlama2;
  if (n == "llama-3" || n == "llama3") return ChatTemplateKind::kLlama3;
  if (n == "chatml" || n == "qwen" || n == "qwen2") return ChatTemplateKind::kChatMl;
  if (n == "alpaca") return ChatTemplateKind::kAlpaca;
  if (n == "plain") return ChatTemplateKind::kPlain;
  if (n == "model") return ChatTemplateKind::kModel;
  return invalid_argument("unknown chat template " + quote_name(name) +
                          " (expected auto, model, llama-2, llama-3, chatml, alpaca or plain)");
}

ChatTemplateKind detect_chat_template(std::string_view jinja) {
  // Order matters: Qwen templates also mention tool formats, and some Llama-3 derivatives
  // keep an "[INST]" comment; the header tokens are the stronger evidence.
  if (jinja.find("<|im_start|>") != std::string_view::npos) return ChatTemplateKind::kChatMl;
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplateKind::kLlama3;
  if (jinja.find("[INST]") != std::string_view::npos) return ChatTemplateKind::kLlama2;
  if (jinja.find("### Instruction") != std::string_view::npos) return ChatTemplateKind::kAlpaca;
  return ChatTemplateKind::kAuto;
}

std::string default_system_of_template(std::string_view jinja) {
  static constexpr std::string_view kStart = "<|im_start|>system";
  static constexpr std::string_view kEnd = "<|im_end|>";
  for (size_t pos = jinja.find(kStart); pos != std::string_view::npos;
       pos = jinja.find(kStart, pos + 1)) {
    std::string_view rest = jinja.substr(pos + kStart.size());
    // The newline is an escape inside a Jinja string literal ("\\n") or, rarely, a real one.
    if (rest.substr(0, 2) == "\\n")
      rest.remove_prefix(2);
    else if (rest.substr(0, 1) == "\n")
      rest.remove_prefix(1);
    else
      continue;
    size_t end = rest.find(kEnd);
    if (end == std::string_view::npos || end == 0) continue;
    std::string_view text = rest.substr(0, end);
    // Only a literal: an expression (messages[0]['content'], a concatenation) is not a default.
    if (text.find_first_of("'\"{}+\\") != std::string_view::npos) continue;
    return std::string(text);
  }
  return "";
}

ChatTemplateChoice choose_chat_template(ChatTemplateKind requested, const Tokenizer* tokenizer,
                                        std::string_view model_type, ChatTemplateKind fallback) {
  if (requested != ChatTemplateKind::kAuto && requested != ChatTemplateKind::kModel) {
    // A hand-written ChatML forced on a model whose own template has a default system message
    // (Qwen2.5's) keeps that default.
    std::string system;
    if (requested == ChatTemplateKind::kChatMl && tokenizer)
      system = default_system_of_template(tokenizer->chat_template());
    return {requested, std::string("set to ") + chat_template_name(requested), system, "", {}};
  }
  if (tokenizer && !tokenizer->chat_template().empty()) {
    return {ChatTemplateKind::kModel,
            "the model's own chat template (tokenizer_config.json chat_template or "
            "chat_template.jinja), rendered by jinja2",
            "", tokenizer->chat_template(), tokenizer->special_tokens_map()};
  }
  std::string family = lower(model_type);
  auto has_token = [&](std::string_view t) {
    return tokenizer && tokenizer->token_to_id(t).has_value();
  };
  ChatTemplateKind k = ChatTemplateKind::kAuto;
  if (family.rfind("qwen", 0) == 0) {
    k = ChatTemplateKind::kChatMl;
  } else if (family == "mistral" || family == "mixtral") {
    k = ChatTemplateKind::kLlama2;
  } else if (family == "llama") {
    k = has_token("<|start_header_id|>") ? ChatTemplateKind::kLlama3 : ChatTemplateKind::kLlama2;
  }
  const std::string none =
      requested == ChatTemplateKind::kModel ? "the model ships no chat template; " : "";
  if (k != ChatTemplateKind::kAuto)
    return {k,
            none + "from model family '" + std::string(model_type) + "': " + chat_template_name(k),
            "",
            "",
            {}};
  if (fallback == ChatTemplateKind::kAuto || fallback == ChatTemplateKind::kModel)
    fallback = ChatTemplateKind::kPlain;
  return {fallback,
          none + std::string("no chat template recognised; using the default ") +
              chat_template_name(fallback),
          "",
          "",
          {}};
}

Result<std::vector<ChatSegment>> render_chat(ChatTemplateKind kind,
                                             std::span<const ChatMessage> messages) {
  if (messages.empty()) return invalid_argument("empty conversation");
  std::string_view system;
  if (messages.front().role == ChatRole::kSystem) {
    system = messages.front().content;
    messages = messages.subspan(1);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == ChatRole::kSystem)
      return invalid_argument("system message at position " + std::to_string(i + 1) +
                              " (only the first message may be a system message)");
  }
  if (messages.empty()) return invalid_argument("conversation has only a system message");
  std::vector<ChatSegment> out;
  switch (kind) {
    case ChatTemplateKind::kLlama2:
      render_llama2(messages, system, out);
      break;
    case ChatTemplateKind::kLlama3:
      render_llama3(messages, system, out);
      break;
    case ChatTemplateKind::kChatMl:
      render_chatml(messages, system, out);
      break;
    case ChatTemplateKind::kAlpaca:
      render_alpaca(messages, system, out);
      break;
    case ChatTemplateKind::kPlain:
      render_plain(messages, system, out);
      break;
    case ChatTemplateKind::kAuto:
      return invalid_argument("render_chat needs a concrete template, not auto");
    case ChatTemplateKind::kModel:
      return invalid_argument(
          "render_chat renders the hand-written templates; the model's own is rendered by "
          "JinjaChatRenderer");
  }
  return out;
}

}  // namespace spillway
