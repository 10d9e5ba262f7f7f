#include "worker/commands.h"

#include <ostream>

#include "worker/tokenize-command.h"

namespace spillway::worker {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"tokenize", "tokenize --tokenizer PATH [--add-special-tokens]",
       "Reads JSON lines {\"text\": ...} on stdin and writes {\"ids\": [...]} lines.", run_tokenize},
  };
  return kCommands;
}

static void print_help(std::ostream& out) {
  out << "usage: spillway-worker COMMAND [ARGS]\n\ncommands:\n";
  for (const auto& c : commands()) out << "  " << c.usage << "\n      " << c.summary << "\n";
}

int run_worker(const std::vector<std::string>& argv, CommandIo io) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    print_help(argv.empty() ? io.err : io.out);
    return argv.empty() ? 2 : 0;
  }
  for (const auto& c : commands()) {
    if (argv[0] == c.name) return c.run({argv.begin() + 1, argv.end()}, io);
  }
  io.err << "spillway-worker: unknown command '" << argv[0] << "'\n";
  print_help(io.err);
  return 2;
}

}  // namespace spillway::worker
