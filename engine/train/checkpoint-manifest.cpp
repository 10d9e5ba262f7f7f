#include "train/checkpoint-manifest.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json-file.h"

namespace spillway {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormatName = "spillway-checkpoint";

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

// `path` relative to `dir`, '/' separated; "" when it is not inside `dir`.
std::string relative_inside(const std::string& dir, const std::string& path) {
  const fs::path rel =
      fs::path(path).lexically_normal().lexically_relative(fs::path(dir).lexically_normal());
  const std::string s = rel.generic_string();
  if (s.empty() || s == "." || s.starts_with("..") || rel.is_absolute()) return "";
  return s;
}

// A file the checkpoint's readers open: weights, moments, the trainer state and the config.
bool is_checkpoint_data(const fs::path& p) {
  const std::string n = p.filename().string();
  return n != kCheckpointManifestFile && (n.ends_with(".safetensors") || n.ends_with(".json"));
}

Status damaged(const std::string& dir, const std::string& what) {
  return corrupt("the checkpoint " + dir + " is damaged: " + what +
                 "; resume from an earlier checkpoint");
}

// A strict reading of one manifest entry; a value of another type or out of range is an error.
Result<FileDigest> entry_of(const nlohmann::json& e, const std::string& manifest_path) {
  const auto bad = [&](const std::string& why) { return corrupt(manifest_path + ": " + why); };
  if (!e.is_object()) return bad("a 'files' entry is not an object");
  const auto path = e.find("path"), bytes = e.find("bytes"), crc = e.find("crc32c");
  if (path == e.end() || !path->is_string() || bytes == e.end() || !bytes->is_number_unsigned() ||
      crc == e.end() || !crc->is_string())
    return bad("a 'files' entry needs 'path' (text), 'bytes' (a count) and 'crc32c' (hex)");
  FileDigest d;
  d.path = path->get<std::string>();
  const fs::path rel(d.path);
  if (d.path.empty() || rel.is_absolute() ||
      std::any_of(rel.begin(), rel.end(), [](const fs::path& c) { return c == ".."; }))
    return bad("the file '" + d.path + "' is not inside the checkpoint's folder");
  d.bytes = bytes->get<uint64_t>();
  const std::string& hex = crc->get_ref<const std::string&>();
  if (hex.size() != 8 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    return bad("the crc32c of '" + d.path + "' is not 8 hex digits");
  d.crc32c = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
  return d;
}

}  // namespace

Result<CheckpointManifest> read_checkpoint_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kCheckpointManifestFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(dir + " has no " + kCheckpointManifestFile);
  SPW_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(path, ErrorCode::kCorrupt));
  const auto bad = [&](const std::string& why) { return damaged(dir, path + ": " + why); };
  if (!j.is_object() || j.value("format", "") != kFormatName)
    return bad("not a Spillway checkpoint manifest");
  const auto version = j.find("format_version");
  if (version == j.end() || !version->is_number_integer())
    return bad("no integer 'format_version'");
  if (version->get<int64_t>() != kCheckpointFormatVersion)
    return unsupported(
        path + ": checkpoint format " + version->dump() + " is newer than this Spillway reads (" +
        std::to_string(kCheckpointFormatVersion) + "); open it with the Spillway that wrote it");
  CheckpointManifest m;
  const auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 0)
    return bad("'step' is not a non-negative integer");
  m.step = step->get<int64_t>();
  const auto run = j.find("run_id");
  if (run == j.end() || !run->is_string()) return bad("'run_id' is not text");
  m.run_id = run->get<std::string>();
  const auto files = j.find("files");
  if (files == j.end() || !files->is_array() || files->empty()) return bad("no 'files' list");
  for (const nlohmann::json& e : *files) {
    auto d = entry_of(e, path);
    if (!d.ok()) return damaged(dir, d.status().message());
    m.files.push_back(std::move(*d));
  }
  return m;
}

Status write_checkpoint_manifest(const std::string& dir, const CheckpointManifest& m) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  FileDigests sorted = m.files;
  for (FileDigest& f : sorted) {
    const std::string rel = relative_inside(dir, f.path);
    if (rel.empty())
      return invalid_argument("checkpoint manifest: " + f.path + " is not inside " + dir);
    f.path = rel;
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const FileDigest& a, const FileDigest& b) { return a.path < b.path; });
  for (const FileDigest& f : sorted)
    files.push_back({{"path", f.path}, {"bytes", f.bytes}, {"crc32c", hex32(f.crc32c)}});
  const nlohmann::ordered_json j = {{"format", kFormatName},
                                    {"format_version", kCheckpointFormatVersion},
                                    {"step", m.step},
                                    {"run_id", m.run_id},
                                    {"files", files}};
  return write_file_atomic((fs::path(dir) / kCheckpointManifestFile).string(), j.dump(2) + "\n");
}

Result<CheckpointManifest> verify_checkpoint_files(const std::string& dir) {
  SPW_ASSIGN_OR_RETURN(CheckpointManifest m, read_checkpoint_manifest(dir));
  std::set<std::string> listed;
  for (const FileDigest& f : m.files) {
    const std::string path = (fs::path(dir) / f.path).string();
    auto d = digest_file(path);
    if (!d.ok())
      return damaged(dir, f.path + " is listed in its manifest but cannot be read (" +
                              d.status().message() + ")");
    if (d->bytes != f.bytes)
      return damaged(dir, f.path + " does not match its manifest (" + std::to_string(d->bytes) +
                              " bytes, recorded " + std::to_string(f.bytes) +
                              "): it was cut off, edited, or copied from another checkpoint");
    if (d->crc32c != f.crc32c)
      return damaged(dir, f.path + " does not match its manifest (CRC-32C " + hex32(d->crc32c) +
                              ", recorded " + hex32(f.crc32c) +
                              "): its bytes changed since the checkpoint was written (a bad disk "
                              "block, an edit), or it was "
                              "copied from another checkpoint");
    listed.insert(f.path);
  }
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file(ec) || !is_checkpoint_data(it->path())) continue;
    const std::string rel = relative_inside(dir, it->path().string());
    if (!listed.contains(rel))
      return damaged(dir, rel +
                              " is not part of this checkpoint (its manifest does not list it): "
                              "it was added or copied in after the checkpoint was written; "
                              "remove it");
  }
  return m;
}

Status verify_if_checkpoint(const std::string& dir) {
  auto m = verify_checkpoint_files(dir);
  if (!m.ok() && m.status().code() == ErrorCode::kNotFound) return Status();
  return m.status();
}

}  // namespace spillway
