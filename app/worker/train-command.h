// `spillway-worker train JOB.json [--resume CHECKPOINT] [--run-id ID] [--json]`. --run-id: the id
// the run is recorded under (the GUI picks it, and with it the run folder, before it launches the
// worker: history/run-folder.h); with --resume, the run to continue. A resume continues its run:
// one row in runs.db, one folder. A job that fails before its run begins is recorded as failed
// (train-command.cpp record_failure).
#pragma once

#include "worker/commands.h"

namespace spillway::worker {

int run_train(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
