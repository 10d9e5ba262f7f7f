// The worker's command-line commands. Each takes its arguments (after the command name) and the
// standard streams, returns the process exit code, and prints errors a person can act on.
// Registered in commands.cpp; main.cpp only dispatches.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/status.h"

namespace spillway::worker {

struct CommandIo {
  std::istream& in;
  std::ostream& out;
  std::ostream& err;
};

using CommandFn = int (*)(const std::vector<std::string>& args, CommandIo io);

struct Command {
  const char* name;
  const char* usage;    // one line: "tokenize --tokenizer PATH [--add-special-tokens] [--json]"
  const char* summary;  // one sentence
  CommandFn run;
};

// Reports a failed command: a {"error", "message"} line on stdout with `json`, the message on
// stderr always; returns the exit code (2 for bad input, 1 otherwise).
int report_failure(CommandIo io, bool json, const Status& status);

// Every command, in the order `spillway-worker --help` lists them.
const std::vector<Command>& commands();

// Runs `spillway-worker ARGS...` (argv without the program name); returns the exit code.
int run_worker(const std::vector<std::string>& argv, CommandIo io);

}  // namespace spillway::worker
