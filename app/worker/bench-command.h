// `spillway-worker bench`: the training step's throughput on a real model shape, random-initialised
// (README, "GPU benchmark").
#pragma once

#include "worker/commands.h"

namespace spillway::worker {

int run_bench(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
