// `spillway-worker train JOB.json [--resume CHECKPOINT] [--run-id ID] [--rank R --processes M
// --rendezvous HOST:PORT] [--json]`. --run-id: the id
// the run is recorded under (the GUI picks it, and with it the run folder, before it launches the
// worker: history/run-folder.h); with --resume, the run to continue. A resume continues its run:
// one row in runs.db, one folder. A job that fails before its run begins is recorded as failed
// (train-command.cpp record_failure).
#pragma once

#include "worker/commands.h"

namespace spillway::worker {

inline constexpr const char* kTrainUsage =
    "train JOB.json [--resume CHECKPOINT_DIR] [--run-id ID] [--rank R --processes M "
    "--rendezvous HOST:PORT] [--json]";
// Past one machine (the last three: compute/host-group.h, or the launcher's environment) the run
// is one worker per machine, process 0 writing the checkpoints and the export.
int run_train(const std::vector<std::string>& args, CommandIo io);

}  // namespace spillway::worker
