// Owned files: what Spillway may remove, told apart from what a user put beside it. Spillway
// deletes only files it can prove it wrote: those an export's manifest (spillway-export.json)
// lists, and in a run folder the names it writes there (job.json, events.jsonl, the worker's
// output, checkpoints/step-NNNNNN/ with a checkpoint's files, export/). A file of any other name,
// or a folder it did not make, stays where it is, with the folders that hold it.
//
// Free functions; thread-safe for distinct folders; they read (and the remove_ functions change)
// only the file system. Nothing here follows a symbolic link: a link is an entry of its own, kept
// unless its name is Spillway's, and removed as a link, never through it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace spillway {

// The manifest an export writes last into its folder: {"written_by": "spillway", "files": [...]}
// (paths relative to the folder, the manifest not among them).
inline constexpr const char* kExportManifest = "spillway-export.json";

// Every file under `dir` (symbolic links included, not followed), as sorted paths relative to it
// with '/' between folders ("config.json", "sub/a.txt"). Empty when `dir` cannot be read.
std::vector<std::string> files_under(const std::string& dir);

// The files of the export in `dir`, relative to it, the manifest included: those its manifest
// lists; for an export without one (written before 2026-11-27), those of `dir` whose names an
// export writes (config.json, model.safetensors and its shards and index, the tokenizer files).
// Empty when `dir` holds neither.
std::vector<std::string> export_owned_files(const std::string& dir);

// What of a folder is Spillway's. Paths are absolute.
struct OwnedFiles {
  std::vector<std::string> owned;    // files Spillway wrote (removed by the remove_ functions)
  std::vector<std::string> foreign;  // entries it did not write: files, links, folders; they stay
  uint64_t bytes = 0;                // the size of `owned`
};

// What remove_run_files and remove_throwaway_run could not remove.
struct Removal {
  std::vector<std::string> kept;    // entries Spillway did not write, left in place (absolute)
  std::vector<std::string> failed;  // its own files or folders it could not remove, with why
};

// The run folder `run_dir` (history/run-folder.h): job.json, events.jsonl, worker.out,
// worker.err; checkpoints/ with step-NNNNNN/ (and step-N.tmp-PID/, replaced-TIME/step-NNNNNN/)
// holding a checkpoint's files; export/ with its export_owned_files. Everything else is foreign.
OwnedFiles scan_run_folder(const std::string& run_dir);

// Removes what scan_run_folder finds owned, then each of the run's folders left empty, `run_dir`
// included. A folder that still holds a foreign entry stays, and `kept` names the entry.
Removal remove_run_files(const std::string& run_dir);

// plan --measure's throwaway run in `dir` (a folder it made with mkdtemp): runs.db with its -wal,
// -shm and -journal, the run folder `dir`/run (remove_run_files), then `dir` when left empty.
Removal remove_throwaway_run(const std::string& dir);

// The prefix of plan --measure's throwaway folders under $TMPDIR ("spillway-measure.XXXXXX").
inline constexpr const char* kThrowawayRunPrefix = "spillway-measure.";

}  // namespace spillway
