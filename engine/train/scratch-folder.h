// ScratchFolder: a run's working folder on the SSD tier (`<parent>/<name>`, e.g. the AdamW state of
// one run under placement.ssd_dir), removed when the run ends — and, since a SIGKILLed or crashed
// run cannot remove its own, by the next run that finds it orphaned. Such folders hold gigabytes,
// so leaking one per crash would fill the disk.
//
// Liveness is an flock(2) on `<parent>/<name>.lock`, held for the object's lifetime: the kernel
// releases it when the owning process dies, so a lock another process can take marks an orphan.
// Spillway removes only what it wrote: a folder create() made (never one that was there) and
// marked with kScratchMarker — or whose lock file create() wrote its text into before making the
// folder, so that a kill between the two leaves no folder unclaimed — and in it only the SSD
// store's files (`*.blk`, `*.crc`); a folder that holds anything else keeps it, and stays with its
// lock file.
//
// Thread-safety: create() and remove_orphaned_scratch() may run concurrently in different processes
// over one parent. Ownership: the object owns its folder, lock file and descriptor; destruction
// removes the folder, then the lock file (errors there are ignored: a leftover is collected later).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace spillway {

inline constexpr const char* kScratchMarker = "spillway-scratch";

class ScratchFolder {
 public:
  // Creates `<parent>/<name>` (parent created if missing; `name` must not exist) and its lock,
  // after removing orphaned siblings whose name starts with `orphan_prefix` (empty: none are
  // looked for). kIo names the path that could not be made or locked, or that exists already;
  // kInvalidArgument when `name` is empty or has a '/'.
  static Result<std::unique_ptr<ScratchFolder>> create(const std::string& parent,
                                                       const std::string& name,
                                                       const std::string& orphan_prefix = "");
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  const std::string& path() const { return path_; }

 private:
  ScratchFolder(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_;
};

// Removes every `<parent>/<prefix>*` folder whose `.lock` no live process holds, with its lock
// file: the SSD store's files in it, then the folder and lock when nothing else is left. Returns
// how many folders went (0 when `parent` does not exist).
int remove_orphaned_scratch(const std::string& parent, const std::string& prefix);

}  // namespace spillway
