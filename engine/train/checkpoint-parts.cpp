#include "train/checkpoint-parts.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/fail-point.h"
#include "core/file-util.h"
#include "history/run-folder.h"

namespace spillway {
namespace fs = std::filesystem;

namespace {

// One round: every process's `mine`, each an error (error_text) or a value. The group's own
// failure (a process left) is the round's error.
Result<std::vector<std::string>> round(compute::ProcessExchange& processes,
                                       const std::string& mine) {
  return processes.all_gather(mine, kCheckpointRoundTimeoutS);
}

// "!<code> process P: <message>": a process's error, its code kept (a full disk stays kNoSpace);
// without "process P: " for `process` < 0 (a message that names its process already).
std::string error_text(const Status& st, int process) {
  std::string text = "!";
  text += std::to_string(static_cast<int>(st.code()));
  text += ' ';
  if (process >= 0) text += "process " + std::to_string(process) + ": ";
  return text + st.message();
}

// The first error of a round's texts, or ok.
Status first_error(const std::vector<std::string>& all) {
  for (const std::string& s : all) {
    if (s.empty() || s[0] != '!') continue;
    const size_t space = s.find(' ');
    const int code = std::atoi(s.substr(1, space - 1).c_str());
    return Status(code > 0 && code <= static_cast<int>(ErrorCode::kInternal)
                      ? static_cast<ErrorCode>(code)
                      : ErrorCode::kInternal,
                  s.substr(space + 1));
  }
  return {};
}

// This process's part: its blocks' weights and moments into `dir`, as JSON for process 0 (the
// files with their digests, each tensor's file), or an error text.
std::string write_part(const std::string& dir, const ModelState& model, OptimizerStateStore* state,
                       int process) {
  std::string stem = "m";  // "m<P>" (built by append: GCC 12 warns falsely on "m" + to_string)
  stem += std::to_string(process);
  FileDigests digests;
  std::map<std::string, std::string> weights, moments;
  Status st = [&]() -> Status {
    SPW_RETURN_IF_ERROR(write_safetensors_part(dir, model.master_tensors(), 5ull << 30,
                                               "model-" + stem, &weights, &digests)
                            .status());
    if (!model.has_optimizer() && !state) return {};
    const std::string file = "optimizer-" + stem + ".safetensors";
    // Armed with `fail`: this machine's disk fills up here (as save_checkpoint's).
    if (fail_point("checkpoint.write"))
      return errno_status("cannot write " + (fs::path(dir) / file).string(), ENOSPC);
    SPW_RETURN_IF_ERROR(save_moments((fs::path(dir) / file).string(),
                                     const_cast<ModelState&>(model), state, &digests));
    for (size_t b = 0; b < model.num_blocks(); ++b) {
      if (!model.holds(b)) continue;
      for (const ParamView& p : model.layout().blocks()[b].params) {
        moments["exp_avg." + p.name] = file;
        moments["exp_avg_sq." + p.name] = file;
      }
    }
    return {};
  }();
  if (!st.ok()) return error_text(st, process);
  nlohmann::json files = nlohmann::json::array();
  for (const FileDigest& d : digests)
    files.push_back(
        {{"path", fs::path(d.path).filename().string()}, {"bytes", d.bytes}, {"crc32c", d.crc32c}});
  return nlohmann::json{{"files", files}, {"weights", weights}, {"moments", moments}}.dump();
}

// Process 0's indexes over every part, and the parts' digests into `manifest`.
Status bind_parts(const std::string& dir, const std::vector<std::string>& parts,
                  const ParameterLayout& layout, FileDigests* manifest) {
  std::map<std::string, std::string> weights, moments;
  for (const std::string& text : parts) {
    const nlohmann::json part = nlohmann::json::parse(text, nullptr, false);
    if (part.is_discarded() || !part.is_object())
      return internal_error("checkpoint: a process sent an unreadable part");
    for (const auto& f : part["files"])
      manifest->push_back({(fs::path(dir) / f["path"].get<std::string>()).string(),
                           f["bytes"].get<uint64_t>(), f["crc32c"].get<uint32_t>()});
    for (const auto& [k, v] : part["weights"].items()) weights[k] = v.get<std::string>();
    for (const auto& [k, v] : part["moments"].items()) moments[k] = v.get<std::string>();
  }
  const uint64_t bytes = layout.parameter_count() * sizeof(float);
  SPW_RETURN_IF_ERROR(write_safetensors_index(dir, "model", bytes, weights, manifest));
  if (moments.empty()) return {};
  return write_safetensors_index(dir, "optimizer", 2 * bytes, moments, manifest);
}

}  // namespace

Status check_shared_folder(const std::string& dir, compute::ProcessExchange& processes) {
  const int p = processes.process();
  std::string marker;
  Status mine;
  if (p == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::random_device rd;
    marker = (fs::absolute(dir, ec) /
              (".spillway-shared-" + std::to_string(::getpid()) + "-" + std::to_string(rd())))
                 .string();
    mine = write_file_atomic(marker, "");
  }
  SPW_ASSIGN_OR_RETURN(const auto first,
                       round(processes, mine.ok() ? marker : error_text(mine, 0)));
  Status st = first_error(first);
  std::string seen;
  if (st.ok() && p > 0) {
    std::error_code ec;
    if (!fs::exists(first[0], ec))
      seen = "process " + std::to_string(p) + " does not see " +
             fs::path(first[0]).parent_path().string();
  }
  SPW_ASSIGN_OR_RETURN(const auto second, round(processes, seen));
  if (p == 0 && !marker.empty()) {
    std::error_code ec;
    fs::remove(marker, ec);
  }
  SPW_RETURN_IF_ERROR(st);
  std::string missing;
  for (const std::string& s : second) {
    if (!s.empty()) missing += (missing.empty() ? "" : "; ") + s;
  }
  if (missing.empty()) return {};
  return invalid_argument(
      missing +
      ": with the host state sharded across machines each machine writes its part of every "
      "checkpoint into the run folder, which every machine must see: set the job's run_dir to a "
      "folder on a filesystem they share (NFS, Lustre, ...) under the same path on each");
}

Result<std::string> save_checkpoint_parts(const std::string& checkpoints_dir,
                                          const ModelState& model, const TrainerState& trainer,
                                          OptimizerStateStore* state,
                                          compute::ProcessExchange& processes) {
  const int p = processes.process();
  if (p > 0) {
    // 1: process 0's temporary folder, 2: the parts, 3: whether the folder was made.
    SPW_ASSIGN_OR_RETURN(const auto folder, round(processes, ""));
    Status st = first_error(folder);
    std::string part;
    if (st.ok()) {
      std::error_code ec;
      part = fs::is_directory(folder[0], ec)
                 ? write_part(folder[0], model, state, p)
                 : error_text(invalid_argument("does not see the checkpoint folder " + folder[0] +
                                               " (check_shared_folder)"),
                              p);
    }
    SPW_ASSIGN_OR_RETURN(const auto parts, round(processes, st.ok() ? part : ""));
    SPW_ASSIGN_OR_RETURN(const auto done, round(processes, ""));
    SPW_RETURN_IF_ERROR(first_error(done));
    return done[0];
  }
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  const std::string final_dir =
      fs::absolute(fs::path(checkpoints_dir) / checkpoint_folder_name(trainer.step), ec).string();
  int rounds = 0;  // of the two inside the folder's writing, those done
  Status st = ec ? io_error("cannot create " + checkpoints_dir + ": " + ec.message()) : Status();
  if (st.ok()) {
    remove_unfinished_checkpoints(checkpoints_dir, /*lock_held=*/false);
    st = write_folder_atomic(final_dir, [&](const std::string& tmp) -> Status {
      ++rounds;
      SPW_ASSIGN_OR_RETURN(const auto folder, round(processes, tmp));
      (void)folder;
      const std::string part = write_part(tmp, model, state, 0);
      ++rounds;
      SPW_ASSIGN_OR_RETURN(auto parts, round(processes, part));
      SPW_RETURN_IF_ERROR(first_error(parts));
      CheckpointManifest manifest{trainer.step, trainer.run_id, {}};
      SPW_RETURN_IF_ERROR(bind_parts(tmp, parts, model.layout(), &manifest.files));
      SPW_RETURN_IF_ERROR(write_checkpoint_state(tmp, model, trainer, &manifest.files));
      return write_checkpoint_manifest(tmp, manifest);
    });
  }
  // The rounds the others wait in, when the folder failed before them.
  for (; rounds < 2; ++rounds) (void)round(processes, error_text(st, 0));
  if (!st.ok()) st = checkpoint_not_saved(st, checkpoints_dir, trainer.step);
  SPW_ASSIGN_OR_RETURN(const auto done,
                       round(processes, st.ok() ? final_dir : error_text(st, /*process=*/-1)));
  (void)done;
  SPW_RETURN_IF_ERROR(st);
  return final_dir;
}

}  // namespace spillway
