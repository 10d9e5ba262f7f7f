// `spillway-worker plan JOB.json [--measure N] [--json]`: the plan (bytes per tier, whether the
// job fits, the predicted step), and with --measure the job's first N steps run and held against
// it.
#pragma once

#include "worker/commands.h"

namespace spillway::worker {

int run_plan(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
