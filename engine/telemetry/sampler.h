// System samplers: host memory (/proc/meminfo), filesystem space (statvfs), block-device traffic
// (/proc/diskstats) and process RSS (/proc/self/statm).
//
// Each reader returns what it could read and leaves the rest absent (std::optional without a
// value): a metric the machine does not expose — no /proc in a sandbox, a path on tmpfs that has no
// block device — must show as "unavailable" in the GUI, never as 0 (nvtop's validity flags). The
// parse_* functions are pure and take the file text, so tests can feed them fixed inputs.
//
// Thread-safety: free functions are reentrant; a DiskStatsReader is immutable after construction
// and read() may be called from any thread. Ownership: plain values, nothing held open between
// calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace spillway {

// Host memory, bytes. available is the kernel's MemAvailable estimate (what can be allocated
// without swapping), not MemFree.
struct MemInfo {
  std::optional<std::uint64_t> total_bytes;
  std::optional<std::uint64_t> available_bytes;
};
MemInfo parse_meminfo(std::string_view text);
MemInfo read_meminfo(const std::string& path = "/proc/meminfo");

// Space of the filesystem holding `path`, bytes. free_bytes is what an unprivileged process can
// still write (f_bavail * f_frsize), total_bytes is f_blocks * f_frsize. Both absent when statvfs
// fails.
struct FsSpace {
  std::optional<std::uint64_t> free_bytes;
  std::optional<std::uint64_t> total_bytes;
};
FsSpace read_fs_space(const std::string& path);

// Resident set size of this process, bytes (/proc/self/statm field 2 times the page size).
std::optional<std::uint64_t> read_process_rss_bytes();
// The peak resident set size of this process so far, bytes (VmHWM of /proc/self/status).
std::optional<std::uint64_t> read_process_peak_rss_bytes();

// Cumulative traffic of one block device since boot, bytes (diskstats sectors are always 512 bytes,
// whatever the device's logical block size — Documentation/admin-guide/iostats.rst).
struct DiskIo {
  std::uint64_t read_bytes = 0;
  std::uint64_t written_bytes = 0;
};
// The line of `device` (e.g. "nvme0n1p2") in /proc/diskstats text; absent when not listed.
std::optional<DiskIo> parse_diskstats(std::string_view text, std::string_view device);

// Finds the block device under a path once, then reads its counters on demand.
// Resolution: stat(path).st_dev -> /sys/dev/block/MAJOR:MINOR -> device name; when that name is not
// in /proc/diskstats and the device is a partition, its parent disk is used. Filesystems with an
// anonymous device number (btrfs, overlay, zfs: major 0) are resolved through the mount source in
// /proc/self/mountinfo when it is a /dev node. tmpfs and network filesystems stay unresolved.
class DiskStatsReader {
 public:
  DiskStatsReader() = default;
  static DiskStatsReader for_path(const std::string& path);

  bool resolved() const { return !device_.empty(); }
  // Kernel name of the device ("nvme0n1p2", "sda", "dm-0"); empty when unresolved.
  const std::string& device() const { return device_; }
  // Absent when unresolved or when /proc/diskstats cannot be read.
  std::optional<DiskIo> read(const std::string& diskstats_path = "/proc/diskstats") const;

 private:
  std::string device_;
};

}  // namespace spillway
