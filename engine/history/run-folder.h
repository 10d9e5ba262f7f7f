// The run folder: what a run keeps on disk beside its rows in runs.db — `<runs dir>/<run id>/`
// holding job.json (the job as resolved), events.jsonl, checkpoints/step-NNNNNN/ and export/.
// The names are here so that the worker, the trainer and the GUI (New run's Launch, History's
// Resume) agree on them: a run's folder is named by its run id (RunStore::new_run_id) whichever way
// it was launched, unless its job names one (output.run_dir). Folders of older releases
// (`runs/<stamp>-<name>`, the GUI's naming until 2026-11) are found through their runs.db row,
// which holds the folder, so they still open and resume. Free functions; thread-safe; they only
// read the file system (and the environment, for the default runs folder).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace spillway {

inline constexpr const char* kRunJobFile = "job.json";
inline constexpr const char* kRunEventsFile = "events.jsonl";
inline constexpr const char* kRunCheckpointsDir = "checkpoints";
inline constexpr const char* kRunExportDir = "export";

// The folder of run `run_id` under `runs_dir`: `<runs_dir>/<run_id>`. The one naming of run
// folders.
std::string run_folder(const std::string& runs_dir, const std::string& run_id);
// The folder of run `run_id` under RunStore::default_runs_dir() ($XDG_DATA_HOME/spillway/runs).
// kNotFound when no data folder is known (RunStore::default_runs_dir).
Result<std::string> default_run_folder(const std::string& run_id);

// The run folder a checkpoint folder belongs to: `<dir>` for `<dir>/checkpoints/step-NNNNNN` (a
// trailing slash allowed), absolute; "" for a checkpoint kept anywhere else (it names no run).
std::string run_folder_of_checkpoint(const std::string& checkpoint_dir);

// Whether two paths name the same folder: compared as canonical paths (symbolic links, "..", a
// trailing slash and a relative path resolved), so that a folder named two ways is one folder.
// Paths that do not exist compare by their lexically normal absolute form. False when either is
// empty.
bool same_folder(const std::string& a, const std::string& b);

// `run_dir`/checkpoints.
std::string run_checkpoints_dir(const std::string& run_dir);

// The checkpoint folders (`step-NNNNNN`) under `checkpoints_dir`, oldest first, without the
// unfinished ones of a writer that died (`step-N.tmp-<pid>`); empty when there are none or the
// folder cannot be read.
std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir);

// Removes `step-N.tmp-<pid>` folders under `checkpoints_dir`: the unfinished checkpoints of
// writers that died (SIGKILL, power loss) and the half-removed ones of a keep-N rotation cut
// short. With `lock_held` (the caller holds the run folder's RunFolderLock, so no other process
// writes there) every one goes, whatever its pid (a pid can be reused); without it, only those
// whose pid names no process. Returns how many it removed.
int remove_unfinished_checkpoints(const std::string& checkpoints_dir, bool lock_held);

// remove_unfinished_checkpoints for `run_dir` when no worker holds its lock (History and plan,
// which see run folders but train in none): 0 when a worker holds it or there is nothing to
// remove. The lock is held only while it removes.
int remove_unfinished_checkpoints_if_idle(const std::string& run_dir);

// An exclusive flock(2) on a run folder, held by the worker that writes the run in it, so that a
// second worker given the same folder (two jobs naming one output.run_dir, a resume started twice)
// is refused before it writes anything there: two writers interleave events.jsonl lines and
// checkpoints of different runs. The kernel drops the lock when its process dies (kill -9 leaves
// no stale lock), and nothing is added to the folder. Move-only; the destructor releases it.
class RunFolderLock {
 public:
  // Takes the lock on `run_dir` (an existing folder) without waiting. kInvalidArgument when another
  // process holds it (the message names the folder; the caller adds who); kIo when the folder
  // cannot be opened.
  static Result<RunFolderLock> acquire(const std::string& run_dir);
  RunFolderLock() = default;
  ~RunFolderLock();
  RunFolderLock(RunFolderLock&& o) noexcept;
  RunFolderLock& operator=(RunFolderLock&& o) noexcept;
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  explicit RunFolderLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// A resume from an earlier checkpoint trains the steps after it again: the run's checkpoints after
// `step` belong to the trajectory it leaves, and the keep-N rotation and History's Resume, which
// take the highest step for the newest, must not prefer them to the resumed run's own. They are
// moved, whole and kept, into `run_dir`/checkpoints/replaced-<UTC time>/ (out of list_checkpoints).
// Returns that folder, "" when there was nothing after `step`; kIo naming the checkpoint when a
// move fails (the ones moved before it stay moved).
Result<std::string> set_aside_checkpoints_after(const std::string& run_dir, long long step);

// The checkpoints of the run in `run_dir`, oldest first.
inline std::vector<std::string> list_run_checkpoints(const std::string& run_dir) {
  return list_checkpoints(run_checkpoints_dir(run_dir));
}

}  // namespace spillway
