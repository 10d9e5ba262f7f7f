// The worker's model commands: eval, generate, export, inspect.
#pragma once

#include "worker/commands.h"

namespace spillway::worker {

int run_eval(const std::vector<std::string>& args, CommandIo io);
int run_generate(const std::vector<std::string>& args, CommandIo io);
int run_export(const std::vector<std::string>& args, CommandIo io);
int run_inspect(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
