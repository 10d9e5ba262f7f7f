// `spillway-worker train JOB.json [--resume CHECKPOINT] [--json]`.
#pragma once

#include "worker/commands.h"

namespace spillway::worker {

int run_train(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
