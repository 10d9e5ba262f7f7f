// `spillway-worker plan JOB.json [--measure N] [--json]`: the plan (bytes per tier, whether the
// job fits, the predicted step), and with --measure the job's first N steps run and held against
// it.
#pragma once

#include <ostream>

#include "events/plan.h"
#include "worker/commands.h"

namespace spillway::worker {

// `plan` without --json: the plan as a table (tiers, state, the GPUs of a data-parallel step,
// tokens per step, the step's parts, tokens/s, ETA, bottleneck), the suggested batch last.
void print_plan(std::ostream& out, const Plan& plan);

int run_plan(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
