// File helpers shared by every engine folder: whole-file reads, atomic writes and read-only
// memory maps.
//
// Atomic writes follow the temp-file, fsync, rename, fsync-directory sequence, so a crash or a
// full disk leaves either the old file or the new one, never a torn one. All functions are
// thread-safe for distinct paths. MappedFile is move-only and unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spillway {

// What a writer put in a file: its final path, its size and its CRC-32C (core/crc32c.h), taken
// from the bytes as they go out, so that a checkpoint's manifest needs no second read of files
// that can be tens of gigabytes.
struct FileDigest {
  std::string path;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};
using FileDigests = std::vector<FileDigest>;

// The digest of a whole file, read in 4 MiB pieces (path as given). kNotFound when it does not
// exist, kInvalidArgument when it is not a regular file, kIo otherwise.
Result<FileDigest> digest_file(const std::string& path);

// Reads a whole file. kNotFound when it does not exist, kIo otherwise.
Result<std::string> read_file(const std::string& path);

// Writes `data` to `path` atomically. kNoSpace on a full disk (the old file stays as it was).
// With `digests`, the file's digest is appended there once it is in place.
Status write_file_atomic(const std::string& path, std::string_view data,
                         FileDigests* digests = nullptr);

// Streams pieces into `path` atomically: `produce` is called with a writer that appends bytes;
// the file appears under `path` only when produce returns ok and every byte is on disk. With
// `digests`, the file's digest is appended there once it is in place.
Status write_file_atomic_stream(
    const std::string& path,
    const std::function<Status(const std::function<Status(const void*, size_t)>&)>& produce,
    FileDigests* digests = nullptr);

// Writes a whole folder atomically: `fill` writes its files into `dir.tmp-<pid>`; only when it
// returns ok does that folder replace `dir` (swapped in with renameat2 RENAME_EXCHANGE where `dir`
// exists, so `dir` is never missing, then fsync of the parent), so a crash or a full disk leaves
// the previous folder, never a half-written one and never none. On failure the temporary folder
// is removed and fill's error returned.
//
// Replacing `dir` removes everything in it, so a caller whose `dir` may hold files Spillway did
// not write (an export's --out) passes `may_replace`: called with `dir` before `fill` and again
// just before the swap when `dir` exists, its error is returned and nothing is replaced. (A
// checkpoint folder, named by its step inside the run's checkpoints/, needs none.)
//
// The temporary folder holds kPartialFolderMarker until the swap, and only `dir.tmp-<pid>`
// siblings that hold it, of writers that died, are removed: a folder of that name Spillway did
// not make is left alone.
inline constexpr const char* kPartialFolderMarker = ".spillway-partial";
Status write_folder_atomic(const std::string& dir,
                           const std::function<Status(const std::string& tmp)>& fill,
                           const std::function<Status(const std::string& dir)>& may_replace = {});
// Writes all `size` bytes to the open descriptor `fd`, retrying short writes and EINTR. On an
// error, errno's status (kNoSpace for ENOSPC) with "cannot write <path>".
Status write_all(int fd, const void* data, size_t size, const std::string& path);
// fsyncs a directory so that a rename inside it is durable.
Status fsync_directory(const std::string& dir);

// A read-only, private memory map of a whole file.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  // kNotFound when missing; an empty file maps to size() == 0 and data() == nullptr.
  static Result<MappedFile> open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace spillway
