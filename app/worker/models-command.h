// `spillway-worker models`: the models of the Hugging Face hub cache (engine/model/
// model-catalog.h), each with its family, size and whether the job fits this machine — what New
// run's model list shows.
#pragma once

#include "worker/commands.h"

namespace spillway::worker {

int run_models(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
