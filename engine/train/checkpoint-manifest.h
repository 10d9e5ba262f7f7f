// A checkpoint's manifest: what ties the files of one checkpoint to each other, to its step and to
// its run (docs/architecture.md, "Checkpoints"). manifest.json is the last file written into the
// checkpoint's temporary folder, after every other file is on disk, so a folder with a manifest is
// whole:
//
//   {"format": "spillway-checkpoint", "format_version": 2, "step": 120, "run_id": "20261127-…",
//    "files": [{"path": "config.json", "bytes": 612, "crc32c": "1c2d3e4f"}, …]}
//
// `files` lists every other file of the checkpoint, paths relative to its folder ('/' separated,
// no "..", sorted), with its size in bytes and its CRC-32C (core/crc32c.h) as 8 lowercase hex
// digits, taken from the bytes as they were written. Before any byte of a checkpoint is used
// (resume, export, generate, eval, Try it), verify_checkpoint_files reads every listed file back
// and compares. Pure functions over the file system; thread-safe for distinct folders.
#pragma once

#include <cstdint>
#include <string>

#include "core/file-util.h"
#include "core/status.h"

namespace spillway {

inline constexpr const char* kCheckpointManifestFile = "manifest.json";
inline constexpr int kCheckpointFormatVersion = 2;  // 1: before the manifest (2026-11)

struct CheckpointManifest {
  int64_t step = 0;
  std::string run_id;  // the run that wrote it; "" for one saved outside a run
  FileDigests files;   // paths relative to the checkpoint's folder
};

// Writes `dir`/manifest.json atomically from `m`; `m.files` may hold paths under `dir` (absolute
// or relative to the working directory), which are written relative to `dir`. kInvalidArgument for
// a file outside `dir`; write_file_atomic's errors (kNoSpace on a full disk).
Status write_checkpoint_manifest(const std::string& dir, const CheckpointManifest& m);

// Reads `dir`/manifest.json without reading the files it lists. kNotFound when there is none;
// kCorrupt for one that is damaged; kUnsupported for a newer format.
Result<CheckpointManifest> read_checkpoint_manifest(const std::string& dir);

// Reads `dir`/manifest.json and checks each file it lists: present, a regular file, of the size and
// CRC-32C recorded. Also refuses a model, optimizer or state file in `dir` that the manifest does
// not list (a file copied in from another checkpoint would otherwise be read in place of a listed
// one). kNotFound when there is no manifest.json (a checkpoint of format 1, or not a checkpoint);
// kCorrupt naming the file and what does not match, with what to do ("resume from an earlier
// checkpoint").
Result<CheckpointManifest> verify_checkpoint_files(const std::string& dir);

// When `dir` is a checkpoint with a manifest (a folder a user passes as a model to generate, eval,
// Try it or a job's model.path), verify_checkpoint_files; ok for any other folder.
Status verify_if_checkpoint(const std::string& dir);

}  // namespace spillway
