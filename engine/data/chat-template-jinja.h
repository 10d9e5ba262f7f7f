// The model's own chat template, rendered by Python's jinja2 (the engine transformers uses) in a
// long-lived `python3 chat_template.py` subprocess: the same text as transformers'
// apply_chat_template, and the character spans of the assistant turns, which become the trained
// segments (ChatSegment) that the tokenizer and the label masking downstream take as they take the
// hand-written templates' (chat-template.h).
//
// The script (engine/data/chat_template.py) is installed as share/spillway/chat_template.py and
// found from the executable's location (build tree and installed tree alike); it needs the Debian
// packages python3 and python3-jinja2. It runs jinja2's ImmutableSandboxedEnvironment, reads only
// its stdin, writes only its stdout and opens no connection.
//
// A JinjaChatRenderer owns one process; it is not thread-safe (one caller at a time) and must not
// be used on a GUI's window thread (it waits on the process). Its destructor stops the process
// (SIGKILL: it writes no file, and a template caught in a long loop is not waited for) and reaps
// it.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "data/chat-template.h"

namespace spillway {

// One conversation to render, in transformers' format, as JSON text.
struct ChatRenderRequest {
  std::string messages;  // a JSON list of {role, content, tool_calls?, ...} messages
  std::string tools;     // a JSON list of tool schemas, or empty for none
  bool add_generation_prompt = false;
};

// What rendering one conversation gave: the text and the trained spans, or the template's error.
struct RenderedChat {
  std::string text;  // UTF-8
  // [start, end) of each trained span, in Unicode code points of `text` (Python string indices).
  std::vector<std::pair<size_t, size_t>> trained;
  std::string error;      // non-empty: the template raised (raise_exception's message) or failed
  int template_line = 0;  // the template's line of the error, 0 when unknown

  bool ok() const { return error.empty(); }
  // "the chat template failed at its line N: MESSAGE" (a template error), or "chat template:
  // MESSAGE" without a line (one the renderer found: "cannot tell the trained tokens: ...").
  std::string error_message() const;
};

class JinjaChatRenderer {
 public:
  // Starts the renderer for `source` (Jinja) with `variables` (bos_token, eos_token, ...: the
  // tokenizer's special_tokens_map). `script` empty: chat_template_script(). Errors:
  // kUnsupported naming the Debian package to install when python3 or jinja2 is missing;
  // kInvalidArgument "chat template line N: ..." when the template does not compile; kIo when the
  // process cannot be started.
  static Result<std::unique_ptr<JinjaChatRenderer>> start(
      const std::string& source, const std::map<std::string, std::string>& variables,
      const std::string& script = "");
  ~JinjaChatRenderer();
  JinjaChatRenderer(const JinjaChatRenderer&) = delete;
  JinjaChatRenderer& operator=(const JinjaChatRenderer&) = delete;

  // True when the template marks the assistant's text with {% generation %} blocks (the spans
  // are then those blocks, as transformers' return_assistant_tokens_mask).
  bool has_generation_blocks() const { return generation_; }

  // Renders every request, in order, in one exchange with the process. A template error is a
  // RenderedChat with `error` set; the Result fails only when the process does (kIo).
  Result<std::vector<RenderedChat>> render(std::span<const ChatRenderRequest> requests);

 private:
  JinjaChatRenderer() = default;
  // Sends `requests` and reads one reply each; with none, reads the setup reply.
  Result<std::vector<RenderedChat>> exchange(std::span<const ChatRenderRequest> requests);
  Status fail(const std::string& what);

  int pid_ = -1;
  int to_child_ = -1;    // the process's stdin (a socket: writes never raise SIGPIPE)
  int from_child_ = -1;  // its stdout
  std::string pending_;  // bytes read past the last whole line
  bool generation_ = false;
};

// The installed renderer script: share/spillway/chat_template.py beside the executable's bin/
// folder, looked for in the executable's folder and up to four folders above it (bin/ of an
// installed tree; app/ and tests/engine/data/ of a build tree). kNotFound names where it looked.
Result<std::string> chat_template_script();

// The rendered text cut into segments at the trained spans. Occurrences of `bos_token` and
// `eos_token` in the text become kBos / kEos segments (a tokenizer.model does not parse "<s>"
// written as text), so the tokenizer's encode adds no BOS of its own and none twice.
// kInvalidArgument when a span is out of order or past the text.
Result<std::vector<ChatSegment>> chat_segments(const RenderedChat& rendered,
                                               const std::string& bos_token,
                                               const std::string& eos_token);

// Byte offset in UTF-8 `text` of code point `index` (text.size() at or past the end).
size_t utf8_offset_of(std::string_view text, size_t index);

}  // namespace spillway
