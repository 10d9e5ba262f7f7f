// `spillway-worker job-keys [--markdown | --json]`: the job file's keys from the schema
// (engine/job/job-schema) — path, default, unit, allowed values and what each does — as text (for a
// terminal and the man page), as the README's Markdown table, or as JSON for tools.
#pragma once

#include <string>
#include <vector>

#include "worker/commands.h"

namespace spillway::worker {

int run_job_keys(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
