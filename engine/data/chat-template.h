// Chat templates: turn a conversation (system / user / assistant / tool messages) into the text a
// chat model was trained on, split into segments that say which parts are trained.
//
// A model that ships a chat template (tokenizer_config.json `chat_template`, chat_template.jinja)
// is rendered with it, by Python's jinja2 as transformers does (chat-template-jinja.h): kind
// kModel. For models that ship none, five templates are written out in C++: llama-2 ("[INST]"),
// llama-3 ("<|start_header_id|>"), ChatML (Qwen, "<|im_start|>"), Stanford Alpaca
// ("### Instruction:") and plain (prompt, newline, response, EOS), picked from the model family
// (config.json `model_type`), else from a setting (choose_chat_template); the setting can also
// force one of them on a model that has its own.
//
// Rendering gives segments (text, trained) so that the tokens of prompts get label -100 and only
// the assistant's replies (and the token that ends them) are trained, as LLaMA-Factory and
// axolotl do. BOS and EOS are segments of their own carrying the tokenizer's ids, so a template
// works with tokenizers that do not parse "<s>" written in text (tokenizer.model).
//
// All functions are pure and thread-safe; results are plain values owned by the caller.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spillway {

class Tokenizer;

// Who speaks. ShareGPT's `function_call` is kToolCall (trained like the assistant, it is the
// model's output); `observation` is kToolResult (given to the model, never trained).
enum class ChatRole { kSystem, kUser, kAssistant, kToolCall, kToolResult };

const char* chat_role_name(ChatRole role);
// True for the roles whose content the model produces (kAssistant, kToolCall).
inline bool chat_role_is_trained(ChatRole role) {
  return role == ChatRole::kAssistant || role == ChatRole::kToolCall;
}

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
};

// kModel: the model's own Jinja template (rendered by chat-template-jinja.h, not render_chat).
enum class ChatTemplateKind { kAuto, kLlama2, kLlama3, kChatMl, kAlpaca, kPlain, kModel };

// "auto", "llama-2", "llama-3", "chatml", "alpaca", "plain", "model".
const char* chat_template_name(ChatTemplateKind kind);
// Accepts the names above and the aliases "llama2", "llama3", "qwen", "qwen2", "mistral"
// (llama-2 layout). "model" asks for the model's own template (as auto does when there is one).
// kInvalidArgument lists the accepted names.
Result<ChatTemplateKind> parse_chat_template_kind(std::string_view name);

// One piece of rendered text. `special` pieces carry no text: the tokenizer's BOS / EOS id is
// inserted instead (and dropped when the tokenizer has none).
struct ChatSegment {
  enum class Special { kNone, kBos, kEos };
  std::string text;
  bool trained = false;
  Special special = Special::kNone;
};

// Recognises a Jinja chat template by its distinctive substrings ("<|im_start|>" -> ChatML,
// "<|start_header_id|>" -> llama-3, "[INST]" -> llama-2, "### Instruction" -> Alpaca).
// kAuto when none matches (or the template is empty).
ChatTemplateKind detect_chat_template(std::string_view jinja_template);

struct ChatTemplateChoice {
  ChatTemplateKind kind = ChatTemplateKind::kPlain;
  std::string reason;  // for the log and the GUI: "tokenizer_config.json chat_template has ..."
  // The system message the Jinja template inserts when a conversation has none (Qwen2 and
  // Qwen2.5: "You are ... a helpful assistant."), empty when it inserts none. Hand-written
  // templates only: the model's own template inserts its default itself.
  std::string default_system;
  // kModel: the Jinja source and the special tokens it sees (bos_token, eos_token, ...).
  std::string jinja;
  std::map<std::string, std::string> special_tokens;
};

// The literal default system message of a ChatML Jinja template: the text between
// "<|im_start|>system\n" and "<|im_end|>" when it is a plain string literal. Empty otherwise.
std::string default_system_of_template(std::string_view jinja_template);

// The template to use, in this order: `requested` when it is a hand-written one; the tokenizer's
// own Jinja template (kModel) when it has one; the model family (`model_type` from config.json:
// qwen2/qwen3 -> ChatML, mistral/mixtral -> llama-2, llama -> llama-3 when the vocabulary has
// "<|start_header_id|>", else llama-2); else `fallback` (kAuto there means kPlain).
// `tokenizer` may be null.
ChatTemplateChoice choose_chat_template(ChatTemplateKind requested, const Tokenizer* tokenizer,
                                        std::string_view model_type,
                                        ChatTemplateKind fallback = ChatTemplateKind::kPlain);

// Renders `messages` with hand-written `kind` (not kAuto or kModel). A system message may only come
// first. kInvalidArgument for an empty conversation, a system message after the first, kAuto or
// kModel.
Result<std::vector<ChatSegment>> render_chat(ChatTemplateKind kind,
                                             std::span<const ChatMessage> messages);

}  // namespace spillway
