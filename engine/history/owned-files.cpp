#include "history/owned-files.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/file-util.h"
#include "history/run-folder.h"

namespace spillway {
namespace fs = std::filesystem;

namespace {

// How a walk takes one entry, given its path relative to the walk's root and whether it is a
// folder (a link to one is not).
enum class Take { kOwnedFile, kOwnedFolder, kForeign };
using Rule = std::function<Take(const std::string& rel, bool folder)>;

bool is_folder(const fs::directory_entry& e) {
  std::error_code ec;
  return e.symlink_status(ec).type() == fs::file_type::directory;
}

// Adds `dir`'s entries to `out` by `rule`, descending into owned folders; `owned_folders` gets
// each of those, deepest last.
void walk(const fs::path& root, const fs::path& dir, const Rule& rule, OwnedFiles& out,
          std::vector<fs::path>* owned_folders) {
  std::error_code ec;
  std::vector<fs::directory_entry> entries;
  for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e);
  std::sort(entries.begin(), entries.end());
  for (const auto& e : entries) {
    const bool folder = is_folder(e);
    const std::string rel = fs::relative(e.path(), root, ec).generic_string();
    switch (rule(rel, folder)) {
      case Take::kOwnedFile:
        if (!folder) {
          out.owned.push_back(e.path().string());
          std::error_code size_ec;
          const auto size = e.is_symlink(size_ec) ? 0 : e.file_size(size_ec);
          out.bytes += size_ec ? 0 : size;
          break;
        }
        [[fallthrough]];  // a folder where Spillway writes a file is not its
      case Take::kForeign:
        out.foreign.push_back(e.path().string());
        break;
      case Take::kOwnedFolder:
        if (!folder) {
          out.foreign.push_back(e.path().string());
          break;
        }
        if (owned_folders) owned_folders->push_back(e.path());
        walk(root, e.path(), rule, out, owned_folders);
        break;
    }
  }
}

// `name.tmp.<pid>`: write_file_atomic's temporary beside a file of Spillway's name.
std::string without_tmp_suffix(const std::string& name) {
  static const std::regex tmp(R"((.*)\.tmp\.\d+)");
  std::smatch m;
  return std::regex_match(name, m, tmp) ? m[1].str() : name;
}

bool is_model_file_name(const std::string& n) {
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return n == "config.json" || n == "model.safetensors" || n == "model.safetensors.index.json" ||
         std::regex_match(n, shard);
}

bool is_tokenizer_file_name(const std::string& n) {
  return n == "tokenizer.json" || n == "tokenizer.model" || n == "tokenizer_config.json" ||
         n == "special_tokens_map.json" || n == "generation_config.json" ||
         n == "chat_template.jinja" || n == "spillway_tokenizer.json";
}

// The files of a checkpoint folder (train/checkpoint.h), relative to it.
bool is_checkpoint_file(const std::string& rel) {
  static const std::regex block(R"(optimizer/block-\d+\.safetensors)");
  const std::string n = without_tmp_suffix(rel);
  // manifest.json: train/checkpoint-manifest.h's kCheckpointManifestFile (engine/train is above
  // this library).
  return is_model_file_name(n) || n == "optimizer.safetensors" || n == "trainer_state.json" ||
         n == "manifest.json" || n == kPartialFolderMarker || std::regex_match(n, block);
}

// A checkpoints/ entry: step-NNNNNN, a writer's step-N.tmp-PID, replaced-TIME/step-NNNNNN.
Take checkpoints_rule(const std::string& rel, bool) {
  static const std::regex step(R"((step-\d+(\.tmp-\d+)?|replaced-[^/]+/step-\d+))");
  static const std::regex in_step(R"((step-\d+(\.tmp-\d+)?|replaced-[^/]+/step-\d+)/(.+))");
  std::smatch m;
  if (rel.find('/') == std::string::npos && rel.starts_with("replaced-")) return Take::kOwnedFolder;
  if (std::regex_match(rel, step)) return Take::kOwnedFolder;
  if (std::regex_match(rel, m, in_step)) {
    const std::string inner = m[3].str();
    if (inner == "optimizer") return Take::kOwnedFolder;
    return is_checkpoint_file(inner) ? Take::kOwnedFile : Take::kForeign;
  }
  return Take::kForeign;
}

std::vector<std::string> manifest_files(const std::string& dir) {
  auto text = read_file((fs::path(dir) / kExportManifest).string());
  if (!text.ok()) return {};
  const auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array()) return {};
  std::vector<std::string> files{kExportManifest};
  for (const auto& f : j["files"])
    if (f.is_string()) files.push_back(f.get<std::string>());
  return files;
}

// Removes `owned`, then `folders` deepest first and `root` last where each is left empty.
Removal remove_owned(const OwnedFiles& found, std::vector<fs::path> folders, const fs::path& root) {
  Removal r;
  r.kept = found.foreign;
  for (const std::string& f : found.owned) {
    std::error_code ec;
    if (!fs::remove(f, ec) && ec) r.failed.push_back(f + " (" + ec.message() + ")");
  }
  folders.push_back(root);
  std::sort(folders.begin(), folders.end(), [](const fs::path& a, const fs::path& b) {
    return a.string().size() > b.string().size();
  });
  for (const fs::path& d : folders) {
    std::error_code ec;
    if (fs::exists(d, ec) && fs::is_empty(d, ec)) {
      fs::remove(d, ec);
      if (ec) r.failed.push_back(d.string() + " (" + ec.message() + ")");
    }
  }
  return r;
}

Rule run_folder_rule(const std::string& run_dir) {
  const std::vector<std::string> exported =
      export_owned_files((fs::path(run_dir) / kRunExportDir).string());
  const std::string checkpoints = std::string(kRunCheckpointsDir) + "/";
  const std::string exports = std::string(kRunExportDir) + "/";
  return [exported, checkpoints, exports](const std::string& rel, bool folder) -> Take {
    if (rel == kRunCheckpointsDir || rel == kRunExportDir) return Take::kOwnedFolder;
    if (rel == kRunJobFile || rel == kRunEventsFile || rel == "worker.out" || rel == "worker.err")
      return Take::kOwnedFile;
    if (rel.starts_with(checkpoints))
      return checkpoints_rule(rel.substr(checkpoints.size()), folder);
    if (rel.starts_with(exports)) {
      const std::string inner = rel.substr(exports.size());
      if (std::find(exported.begin(), exported.end(), inner) != exported.end())
        return Take::kOwnedFile;
      // A folder of the export's (a listed file's parent).
      const bool parent = std::any_of(exported.begin(), exported.end(), [&](const std::string& f) {
        return f.starts_with(inner + "/");
      });
      return folder && parent ? Take::kOwnedFolder : Take::kForeign;
    }
    return Take::kForeign;
  };
}

}  // namespace

std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->symlink_status(ec).type() != fs::file_type::directory)
      out.push_back(fs::relative(it->path(), dir, ec).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> export_owned_files(const std::string& dir) {
  std::vector<std::string> listed = manifest_files(dir);
  if (!listed.empty()) return listed;
  // An export without a manifest: the names an export writes, at its top level only.
  std::vector<std::string> out;
  for (const std::string& f : files_under(dir)) {
    if (f.find('/') == std::string::npos && (is_model_file_name(f) || is_tokenizer_file_name(f)))
      out.push_back(f);
  }
  const bool has_model = std::any_of(out.begin(), out.end(), [](const std::string& f) {
    return f.ends_with(".safetensors") || f == "model.safetensors.index.json";
  });
  return has_model ? out : std::vector<std::string>{};
}

OwnedFiles scan_run_folder(const std::string& run_dir) {
  OwnedFiles out;
  walk(run_dir, run_dir, run_folder_rule(run_dir), out, nullptr);
  return out;
}

Removal remove_run_files(const std::string& run_dir) {
  OwnedFiles found;
  std::vector<fs::path> folders;
  walk(run_dir, run_dir, run_folder_rule(run_dir), found, &folders);
  return remove_owned(found, std::move(folders), run_dir);
}

Removal remove_throwaway_run(const std::string& dir) {
  OwnedFiles found;
  std::vector<fs::path> folders;
  Removal run;
  walk(
      dir, dir,
      [&](const std::string& rel, bool folder) {
        if (rel == "run" && folder) {
          run = remove_run_files((fs::path(dir) / "run").string());
          return Take::kForeign;  // taken care of: what it kept is in `run`
        }
        return rel == "runs.db" || rel == "runs.db-wal" || rel == "runs.db-shm" ||
                       rel == "runs.db-journal"
                   ? Take::kOwnedFile
                   : Take::kForeign;
      },
      found, &folders);
  std::erase(found.foreign, (fs::path(dir) / "run").string());
  Removal r = remove_owned(found, std::move(folders), dir);
  r.kept.insert(r.kept.end(), run.kept.begin(), run.kept.end());
  r.failed.insert(r.failed.end(), run.failed.begin(), run.failed.end());
  // `dir` again: the run folder is gone only now.
  std::error_code ec;
  if (fs::exists(dir, ec) && fs::is_empty(dir, ec)) fs::remove(dir, ec);
  return r;
}

}  // namespace spillway
