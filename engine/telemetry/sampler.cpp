#include "telemetry/sampler.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <vector>

#include "core/file-util.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Calls fn(line) for every line of text.
template <typename Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    fn(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

bool in_diskstats(const std::string& name) {
  auto text = read_file("/proc/diskstats");
  return text.ok() && parse_diskstats(*text, name).has_value();
}

// /sys/dev/block/M:m -> "nvme0n1p2", and its parent disk ("nvme0n1") when it is a partition.
std::string device_from_devnum(unsigned maj, unsigned min) {
  std::error_code ec;
  fs::path link = "/sys/dev/block/" + std::to_string(maj) + ":" + std::to_string(min);
  fs::path real = fs::canonical(link, ec);
  if (ec) return {};
  std::string name = real.filename().string();
  if (in_diskstats(name)) return name;
  if (fs::exists(real / "partition", ec)) {
    std::string parent = real.parent_path().filename().string();
    if (in_diskstats(parent)) return parent;
  }
  return {};
}

// Undoes mountinfo's octal escapes (" " is "\040").
std::string unescape_mount(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        char c = s[i + k];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out += static_cast<char>(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// For a path on a filesystem with an anonymous st_dev: the /dev source of its mount, if any.
std::string device_from_mountinfo(const std::string& path) {
  std::error_code ec;
  std::string target = fs::weakly_canonical(path, ec).string();
  if (ec) return {};
  auto text = read_file("/proc/self/mountinfo");
  if (!text.ok()) return {};
  std::string best_mount, best_source;
  for_each_line(*text, [&](std::string_view line) {
    auto f = split_ws(line);
    // id parent M:m root mountpoint options [optional...] - fstype source superoptions
    if (f.size() < 7) return;
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 2 >= f.size()) return;
    std::string mount = unescape_mount(f[4]);
    std::string source = unescape_mount(f[dash + 2]);
    bool under = target == mount || mount == "/" ||
                 (target.size() > mount.size() && target.compare(0, mount.size(), mount) == 0 &&
                  target[mount.size()] == '/');
    // Later lines shadow earlier ones on the same mount point, so >= keeps the last.
    if (under && mount.size() >= best_mount.size()) {
      best_mount = mount;
      best_source = source;
    }
  });
  if (best_source.rfind("/dev/", 0) != 0) return {};
  struct stat st {};
  if (::stat(best_source.c_str(), &st) != 0 || !S_ISBLK(st.st_mode)) return {};
  return device_from_devnum(major(st.st_rdev), minor(st.st_rdev));
}

}  // namespace

MemInfo parse_meminfo(std::string_view text) {
  MemInfo m;
  for_each_line(text, [&](std::string_view line) {
    auto f = split_ws(line);
    if (f.size() < 2) return;
    auto v = parse_u64(f[1]);
    if (!v) return;
    // Values are in kB (really KiB) when the unit is given.
    std::uint64_t bytes = (f.size() >= 3 && f[2] == "kB") ? *v * 1024 : *v;
    if (f[0] == "MemTotal:") m.total_bytes = bytes;
    if (f[0] == "MemAvailable:") m.available_bytes = bytes;
  });
  return m;
}

MemInfo read_meminfo(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return {};
  return parse_meminfo(*text);
}

FsSpace read_fs_space(const std::string& path) {
  struct statvfs sv {};
  if (::statvfs(path.c_str(), &sv) != 0) return {};
  FsSpace s;
  std::uint64_t frag = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
  s.free_bytes = static_cast<std::uint64_t>(sv.f_bavail) * frag;
  s.total_bytes = static_cast<std::uint64_t>(sv.f_blocks) * frag;
  return s;
}

std::optional<std::uint64_t> read_process_rss_bytes() {
  auto text = read_file("/proc/self/statm");
  if (!text.ok()) return std::nullopt;
  auto f = split_ws(*text);
  if (f.size() < 2) return std::nullopt;
  std::string_view resident = f[1];
  while (!resident.empty() && (resident.back() == '\n')) resident.remove_suffix(1);
  auto pages = parse_u64(resident);
  long page = ::sysconf(_SC_PAGESIZE);
  if (!pages || page <= 0) return std::nullopt;
  return *pages * static_cast<std::uint64_t>(page);
}

std::optional<std::uint64_t> read_process_peak_rss_bytes() {
  auto text = read_file("/proc/self/status");
  if (!text.ok()) return std::nullopt;
  std::optional<std::uint64_t> out;
  for_each_line(*text, [&](std::string_view line) {
    auto f = split_ws(line);  // "VmHWM:", "123456", "kB"
    if (out || f.size() < 3 || f[0] != "VmHWM:" || f[2] != "kB") return;
    if (auto kib = parse_u64(f[1])) out = *kib * 1024;
  });
  return out;
}

std::optional<DiskIo> parse_diskstats(std::string_view text, std::string_view device) {
  std::optional<DiskIo> out;
  for_each_line(text, [&](std::string_view line) {
    if (out) return;
    auto f = split_ws(line);
    // major minor name reads reads_merged sectors_read ms_reading writes writes_merged
    // sectors_written ...
    if (f.size() < 10 || f[2] != device) return;
    auto rd = parse_u64(f[5]);
    auto wr = parse_u64(f[9]);
    if (!rd || !wr) return;
    out = DiskIo{*rd * 512, *wr * 512};
  });
  return out;
}

DiskStatsReader DiskStatsReader::for_path(const std::string& path) {
  DiskStatsReader r;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return r;
  unsigned maj = major(st.st_dev), min = minor(st.st_dev);
  if (maj != 0) r.device_ = device_from_devnum(maj, min);
  if (r.device_.empty()) r.device_ = device_from_mountinfo(path);
  return r;
}

std::optional<DiskIo> DiskStatsReader::read(const std::string& diskstats_path) const {
  if (device_.empty()) return std::nullopt;
  auto text = read_file(diskstats_path);
  if (!text.ok()) return std::nullopt;
  return parse_diskstats(*text, device_);
}

}  // namespace spillway
