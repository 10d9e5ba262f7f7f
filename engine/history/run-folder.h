// The run folder: what a run keeps on disk beside its rows in runs.db — `<runs dir>/<run id>/`
// holding job.json (the job as resolved), events.jsonl, checkpoints/step-NNNNNN/ and export/.
// The names are here so that the worker, the trainer and the GUI (History's Resume) agree on them.
// Free functions; thread-safe; they only read the file system.
#pragma once

#include <string>
#include <vector>

namespace spillway {

inline constexpr const char* kRunJobFile = "job.json";
inline constexpr const char* kRunEventsFile = "events.jsonl";
inline constexpr const char* kRunCheckpointsDir = "checkpoints";
inline constexpr const char* kRunExportDir = "export";

// `run_dir`/checkpoints.
std::string run_checkpoints_dir(const std::string& run_dir);

// The checkpoint folders (`step-NNNNNN`) under `checkpoints_dir`, oldest first, without the
// unfinished ones of a writer that died (`step-N.tmp-<pid>`); empty when there are none or the
// folder cannot be read.
std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir);

// The checkpoints of the run in `run_dir`, oldest first.
inline std::vector<std::string> list_run_checkpoints(const std::string& run_dir) {
  return list_checkpoints(run_checkpoints_dir(run_dir));
}

}  // namespace spillway
