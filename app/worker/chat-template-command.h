// `spillway-worker chat-template --model DIR [--add-generation-prompt] [--tools FILE]`: renders
// conversations with the model's own chat template as training does (jinja2, as transformers'
// apply_chat_template), so that anyone can compare from outside. Reads JSON lines
// {"messages": [...], "tools": [...]?} (transformers' / OpenAI's message format, tool calls
// included) on stdin and writes one line each: {"text": ..., "trained": [[start, end], ...]}
// with offsets in Unicode code points of text (Python string indices: text[start:end]), or
// {"error": ..., "template_line": N} with the template's own raise_exception message. A line's
// "tools" wins over --tools FILE (a JSON list of tool schemas). Blank lines are skipped.
// Exit codes: 0 done (rendered or refused by the template alike), 1 a model without a chat
// template or a renderer that cannot run (python3 / python3-jinja2 missing), 2 bad arguments or
// a line that is not JSON or has no "messages" list (lines before it were already written).
#pragma once

#include <string>
#include <vector>

#include "worker/commands.h"

namespace spillway::worker {

int run_chat_template(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
