#include "train/export.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/fail-point.h"
#include "core/file-util.h"
#include "history/owned-files.h"
#include "model/safetensors.h"

namespace spillway {
namespace fs = std::filesystem;

Status check_export_target(const std::string& out) {
  std::error_code ec;
  // A link is replaced itself, not what it points to: it is the user's, and so refused.
  if (fs::is_symlink(out, ec))
    return invalid_argument("that is a symbolic link: name the folder it points to, or a new one");
  if (!fs::exists(out, ec)) return {};
  if (!fs::is_directory(out, ec))
    return invalid_argument("that is a file, not a folder: name a new folder");
  // The marker an interrupted replacement can leave in the previous version is Spillway's too.
  std::vector<std::string> ours = export_owned_files(out);
  ours.push_back(kPartialFolderMarker);
  std::vector<std::string> foreign;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    bool listed = std::find(ours.begin(), ours.end(), name) != ours.end();
    std::error_code type_ec;
    if (e.symlink_status(type_ec).type() == fs::file_type::directory) {
      // A folder of the export (a sharded model's, none today) is its own only when each file
      // in it is listed; an empty one is not listed at all.
      const std::vector<std::string> inside = files_under(e.path().string());
      listed = !inside.empty() && std::all_of(inside.begin(), inside.end(), [&](const auto& f) {
        return std::find(ours.begin(), ours.end(), name + "/" + f) != ours.end();
      });
    }
    if (!listed) foreign.push_back(name);
  }
  if (ec) return io_error("cannot read " + out + ": " + ec.message());
  if (foreign.empty()) return {};
  std::sort(foreign.begin(), foreign.end());
  std::string names;
  for (size_t i = 0; i < foreign.size() && i < 5; ++i) names += (i ? ", " : "") + foreign[i];
  if (foreign.size() > 5) names += " and " + std::to_string(foreign.size() - 5) + " more";
  return invalid_argument(
      "the folder holds files Spillway did not write (" + names +
      "); an export replaces its whole folder, so nothing was written: name a new or empty "
      "folder (e.g. " +
      (fs::path(out) / "model").string() + "), or one that holds only an earlier export");
}

namespace {

// What an export holds beside the weights: config.json and the tokenizer's files.
Status write_model_files(const std::string& tmp, const ModelConfig& model,
                         const std::string& tokenizer_source) {
  if (fail_point("export.write")) return io_error("export.write: failed by SPILLWAY_FAIL_POINTS");
  nlohmann::json config = model.to_json();
  config["transformers_version"] = "4.40.0";
  SPW_RETURN_IF_ERROR(
      write_file_atomic((fs::path(tmp) / "config.json").string(), config.dump(2) + "\n"));
  if (tokenizer_source == kBuiltinBytesTokenizer) {
    // No tokenizer file exists for the built-in byte tokenizer; this marker lets eval/generate
    // find it.
    return write_file_atomic((fs::path(tmp) / kBuiltinTokenizerMarker).string(),
                             "{\"tokenizer\": \"builtin:bytes\"}\n");
  }
  if (tokenizer_source.empty()) return {};
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(tokenizer_source, ec)) {
    for (const char* name :
         {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
          "generation_config.json", "chat_template.jinja", kBuiltinTokenizerMarker}) {
      fs::path p = fs::path(tokenizer_source) / name;
      if (fs::exists(p, ec)) files.push_back(p);
    }
  } else if (fs::exists(tokenizer_source, ec)) {
    files.push_back(tokenizer_source);
  }
  if (files.empty()) {
    return not_found("no tokenizer at " + tokenizer_source +
                     " (looked for tokenizer.json and tokenizer.model); pass the tokenizer the "
                     "model was trained with");
  }
  for (const auto& f : files) {
    fs::copy_file(f, fs::path(tmp) / f.filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) return io_error("cannot copy " + f.string() + ": " + ec.message());
  }
  return {};
}

}  // namespace

Status export_model(const ModelState& state, const std::string& tokenizer_source,
                    const std::string& out) {
  return write_export_folder(out, [&](const std::string& tmp) -> Status {
    SPW_RETURN_IF_ERROR(state.save_weights(tmp));
    return write_model_files(tmp, state.config(), tokenizer_source);
  });
}

Status export_checkpoint(const std::string& checkpoint, const std::string& tokenizer_source,
                         const std::string& out) {
  SPW_ASSIGN_OR_RETURN(const ModelConfig config, ModelConfig::load(checkpoint));
  // The weights' files as the reader finds them (model.safetensors, or the index and the files it
  // names, each checked), and the index when there is one.
  SPW_ASSIGN_OR_RETURN(const TensorStore weights, TensorStore::open(checkpoint));
  std::vector<std::string> names;
  for (const TensorInfo* t : weights.tensors()) {
    const std::string name = fs::path(weights.file_of(*t)).filename().string();
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::error_code ec;
  if (!fs::exists(fs::path(checkpoint) / "model.safetensors", ec))
    names.push_back("model.safetensors.index.json");
  return write_export_folder(out, [&](const std::string& tmp) -> Status {
    for (const std::string& name : names) {
      // A hard link where the checkpoint's filesystem allows one (no copy of a 70B model, and
      // removing the checkpoint later leaves the export whole), else a copy.
      const fs::path from = fs::path(checkpoint) / name, to = fs::path(tmp) / name;
      std::error_code link_ec, copy_ec;
      fs::create_hard_link(from, to, link_ec);
      if (link_ec) fs::copy_file(from, to, fs::copy_options::overwrite_existing, copy_ec);
      if (copy_ec) return io_error("cannot copy " + from.string() + ": " + copy_ec.message());
    }
    return write_model_files(tmp, config, tokenizer_source);
  });
}

Status write_export_folder(const std::string& out,
                           const std::function<Status(const std::string& tmp)>& fill) {
  Status st = write_folder_atomic(
      out,
      [&](const std::string& tmp) -> Status {
        SPW_RETURN_IF_ERROR(fill(tmp));
        // Last: the manifest names every file the export wrote, the proof that a later export
        // (or History's Delete) may remove them.
        nlohmann::json files = nlohmann::json::array();
        for (const std::string& f : files_under(tmp))
          if (f != kPartialFolderMarker) files.push_back(f);
        return write_file_atomic(
            (fs::path(tmp) / kExportManifest).string(),
            nlohmann::json{{"written_by", "spillway"}, {"files", files}}.dump(2) + "\n");
      },
      check_export_target);
  return st.ok() ? st : st.with_context("export to " + out);
}

}  // namespace spillway
