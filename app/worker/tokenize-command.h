// `spillway-worker tokenize --tokenizer PATH [--add-special-tokens]`: a filter from JSON lines
// {"text": ...} on stdin to {"ids": [...]} lines on stdout, one for one, in order. PATH is a
// tokenizer.json, a tokenizer.model or a model folder (Tokenizer::load). Blank lines are skipped.
// Exit codes: 0 done, 1 a tokenizer that does not load or a malformed line (the message names
// the line number; lines before it were already written), 2 bad arguments.
#pragma once

#include <string>
#include <vector>

#include "worker/commands.h"

namespace spillway::worker {

int run_tokenize(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
