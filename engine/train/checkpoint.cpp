#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>

#include "core/checked-math.h"
#include "core/fail-point.h"
#include "core/file-util.h"
#include "core/json-file.h"
#include "data/data-cursor.h"
#include "model/safetensors.h"

namespace spillway {
namespace fs = std::filesystem;

std::string checkpoint_folder_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%06lld", static_cast<long long>(step));
  return buf;
}

// Tensors of one block's moments: exp_avg.<name> and exp_avg_sq.<name> at the block's offsets.
std::vector<TensorToWrite> moment_tensors(const BlockLayout& block, const float* m,
                                          const float* v) {
  std::vector<TensorToWrite> out;
  for (const ParamView& p : block.params) {
    out.push_back({"exp_avg." + p.name, DType::kF32, p.shape, m + p.offset});
    out.push_back({"exp_avg_sq." + p.name, DType::kF32, p.shape, v + p.offset});
  }
  return out;
}

// Reads one block's moments from `store` (any file holding them) into m, v.
Status read_moments(const TensorStore& store, const std::string& path, const BlockLayout& block,
                    float* m, float* v) {
  for (const ParamView& p : block.params) {
    for (auto [prefix, dst] : {std::pair{"exp_avg.", m}, std::pair{"exp_avg_sq.", v}}) {
      const TensorInfo* ti = store.find(prefix + p.name);
      if (!ti) return corrupt(path + ": missing tensor '" + prefix + p.name + "'");
      SPW_RETURN_IF_ERROR(store.read_f32(*ti, dst + p.offset, p.numel));
    }
  }
  return {};
}

DataSegment DataSegment::continued(int64_t step, int64_t consumed, int64_t per_step) const {
  if (per_step == sequences_per_step) return *this;
  return DataSegment{step, consumed, per_step};
}

// A block whose moments ModelState holds is written from there; the others are read through
// `state` into one staging block as the writer reaches their tensors (name order: every exp_avg,
// then every exp_avg_sq), one kind at a time, so the staging is one block whatever the model. A
// block whose tensors are not adjacent in name order (the head: lm_head.weight, then
// model.norm.weight after the layers) is read once more.
Status save_moments(const std::string& path, ModelState& model, OptimizerStateStore* state,
                    FileDigests* digests) {
  const size_t n = model.num_blocks();
  AlignedBuffer staging;
  if (!model.has_optimizer()) {
    SPW_ASSIGN_OR_RETURN(staging,
                         AlignedBuffer::allocate(model.layout().max_block_numel() * sizeof(float)));
  }
  std::vector<TensorToWrite> moments;
  std::vector<std::pair<size_t, bool>> source;  // per tensor: its block, and whether it is v
  for (size_t b = 0; b < n; ++b) {
    if (!model.holds(b)) continue;
    const bool here = model.exp_avg(b) != nullptr;
    float* m = here ? model.exp_avg(b) : staging.as<float>();
    float* v = here ? model.exp_avg_sq(b) : staging.as<float>();
    for (TensorToWrite& t : moment_tensors(model.layout().blocks()[b], m, v)) {
      source.emplace_back(b, t.name.starts_with("exp_avg_sq."));
      moments.push_back(std::move(t));
    }
  }
  std::pair<size_t, bool> staged{n, false};  // nothing yet
  auto fill = [&](size_t i) -> Status {
    const auto [b, is_v] = source[i];
    if (model.exp_avg(b) || staged == source[i]) return {};
    float* dst = staging.as<float>();
    SPW_RETURN_IF_ERROR(state->read_block(b, nullptr, is_v ? nullptr : dst, is_v ? dst : nullptr));
    staged = source[i];
    return {};
  };
  return write_safetensors(path, moments, {{"format", "pt"}}, digests, fill);
}

Status write_checkpoint_state(const std::string& dir, const ModelState& model,
                              const TrainerState& trainer, FileDigests* digests) {
  nlohmann::json j = {{"format_version", kCheckpointFormatVersion},
                      {"step", trainer.step},
                      {"optimizer_step", model.step},
                      {"tokens", trainer.tokens},
                      {"last_loss", trainer.last_loss},
                      {"data_cursor", trainer.data_cursor},
                      {"data_segment",
                       {{"since_step", trainer.data.since_step},
                        {"sequences_before", trainer.data.sequences_before},
                        {"sequences_per_step", trainer.data.sequences_per_step}}},
                      {"seed", trainer.seed},
                      {"elapsed_s", trainer.elapsed_s},
                      {"manual", trainer.manual},
                      {"run_id", trainer.run_id}};
  SPW_RETURN_IF_ERROR(write_file_atomic((fs::path(dir) / "trainer_state.json").string(),
                                        j.dump(2) + "\n", digests));
  return write_file_atomic((fs::path(dir) / "config.json").string(),
                           model.config().to_json().dump(2) + "\n", digests);
}

Status checkpoint_not_saved(const Status& st, const std::string& checkpoints_dir, int64_t step) {
  // Nothing of this checkpoint is left behind (write_folder_atomic); the ones before it are whole.
  const std::vector<std::string> kept = list_checkpoints(checkpoints_dir);
  return Status(st.code(),
                "checkpoint at step " + std::to_string(step) + " not saved: " + st.message() +
                    (kept.empty() ? std::string("; there is no earlier checkpoint")
                                  : "; the last whole checkpoint, " + kept.back() +
                                        ", is kept: resume from it (--resume) once that is fixed"));
}

Result<std::string> save_checkpoint(const std::string& checkpoints_dir, const ModelState& model,
                                    const TrainerState& trainer, OptimizerStateStore* state) {
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  if (ec) return io_error("cannot create " + checkpoints_dir + ": " + ec.message());
  // A writer of another process may be alive (no run folder lock here): only dead pids' go.
  remove_unfinished_checkpoints(checkpoints_dir, /*lock_held=*/false);
  const std::string final_dir =
      (fs::path(checkpoints_dir) / checkpoint_folder_name(trainer.step)).string();
  // A checkpoint of the same step from an earlier attempt is replaced.
  Status st = write_folder_atomic(final_dir, [&](const std::string& tmp) -> Status {
    CheckpointManifest manifest{trainer.step, trainer.run_id, {}};
    FileDigests* digests = &manifest.files;
    SPW_RETURN_IF_ERROR(model.save_weights(tmp, 5ull << 30, digests));
    // Armed with `fail`: the disk fills up here, as a full disk fails the optimizer state's write.
    if (fail_point("checkpoint.write"))
      return errno_status("cannot write " + (fs::path(tmp) / "optimizer.safetensors").string(),
                          ENOSPC);
    if (model.has_optimizer() || state) {
      SPW_RETURN_IF_ERROR(save_moments((fs::path(tmp) / "optimizer.safetensors").string(),
                                       const_cast<ModelState&>(model), state, digests));
    }
    SPW_RETURN_IF_ERROR(write_checkpoint_state(tmp, model, trainer, digests));
    // Last: the folder is a checkpoint only once its manifest is there.
    return write_checkpoint_manifest(tmp, manifest);
  });
  if (!st.ok()) return checkpoint_not_saved(st, checkpoints_dir, trainer.step);
  return final_dir;
}

namespace {

// Strict readings of trainer_state.json: a value of another type, or out of [lo, hi], is an
// error naming it (a JSON number such as 2^64 or 1e300 must not wrap into a valid-looking one).
struct StateReader {
  const nlohmann::json& j;
  const std::string& path;
  Status error;

  int64_t integer(const nlohmann::json& o, const char* key, int64_t lo, int64_t hi,
                  int64_t fallback = -1, bool required = true) {
    const auto it = o.find(key);
    if (it == o.end()) {
      if (required) fail(std::string("'") + key + "' is missing");
      return fallback;
    }
    const bool in_range =
        it->is_number_integer() &&
        (it->is_number_unsigned() ? it->get<uint64_t>() <= static_cast<uint64_t>(hi)
                                  : it->get<int64_t>() >= lo && it->get<int64_t>() <= hi);
    if (!in_range) {
      fail(std::string("'") + key + "' is " + describe_json(*it) + ", not an integer in [" +
           std::to_string(lo) + ", " + std::to_string(hi) + "]");
      return fallback;
    }
    return it->is_number_unsigned() ? static_cast<int64_t>(it->get<uint64_t>())
                                    : it->get<int64_t>();
  }
  double number(const char* key, double fallback) {
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_number() || !std::isfinite(it->get<double>()) ||
        (std::string_view(key) == "elapsed_s" && it->get<double>() < 0)) {
      fail(std::string("'") + key + "' is " + describe_json(*it) + ", not a finite number");
      return fallback;
    }
    return it->get<double>();
  }
  void fail(const std::string& why) {
    if (error.ok()) error = corrupt(path + ": " + why);
  }
};

// The step a checkpoint folder's name gives (`step-000120` → 120); nullopt for another name (a
// checkpoint copied elsewhere under a name of the user's).
std::optional<int64_t> folder_step(const std::string& dir) {
  std::string n = fs::path(dir).lexically_normal().filename().string();
  if (n.empty()) n = fs::path(dir).lexically_normal().parent_path().filename().string();
  if (!n.starts_with("step-") || n.size() < 6 || n.size() > 5 + 18 ||
      n.find_first_not_of("0123456789", 5) != std::string::npos)
    return std::nullopt;
  return std::stoll(n.substr(5));
}

}  // namespace

Status check_trainer_state(const std::string& dir, const TrainerState& t, int64_t optimizer_step,
                           const CheckpointManifest* manifest) {
  const auto refuse = [&](const std::string& why) {
    return corrupt("the checkpoint " + dir + " is damaged: " + why +
                   "; resume from an earlier checkpoint");
  };
  const std::string step = std::to_string(t.step);
  if (auto named = folder_step(dir); named && *named != t.step)
    return refuse("trainer_state.json says step " + step + " in the folder of step " +
                  std::to_string(*named));
  if (manifest && manifest->step != t.step)
    return refuse("trainer_state.json says step " + step + ", its manifest step " +
                  std::to_string(manifest->step));
  if (manifest && manifest->run_id != t.run_id)
    return refuse("trainer_state.json is of run '" + t.run_id + "', its manifest of run '" +
                  manifest->run_id + "'");
  if (optimizer_step != t.step)
    return refuse("the optimizer's step is " + std::to_string(optimizer_step) + " at step " + step +
                  " (AdamW takes one step per training step)");
  if (t.data_cursor.is_null()) return Status();  // saved outside a trainer: no data position
  auto cursor = DataCursor::from_json(t.data_cursor);
  if (!cursor.ok()) return refuse("trainer_state.json: " + cursor.status().message());
  uint64_t consumed = 0;
  if (!checked_mul(static_cast<uint64_t>(cursor->epoch),
                   static_cast<uint64_t>(cursor->dataset_size), &consumed) ||
      consumed > kSaturatedCount || static_cast<uint64_t>(cursor->index) > kSaturatedCount)
    return refuse("the data cursor's epoch " + std::to_string(cursor->epoch) +
                  " is beyond any run's");
  consumed += static_cast<uint64_t>(cursor->index);
  const DataSegment& d = t.data;
  if (d.sequences_per_step > 0) {
    uint64_t expected = 0;
    if (d.since_step > t.step ||
        !checked_mul(static_cast<uint64_t>(t.step - d.since_step),
                     static_cast<uint64_t>(d.sequences_per_step), &expected) ||
        __builtin_add_overflow(expected, static_cast<uint64_t>(d.sequences_before), &expected) ||
        expected != consumed)
      return refuse("the data cursor (epoch " + std::to_string(cursor->epoch) + ", index " +
                    std::to_string(cursor->index) + " of " + std::to_string(cursor->dataset_size) +
                    " sequences) is not where step " + step + " leaves it (" +
                    std::to_string(d.sequences_per_step) + " sequences per step since step " +
                    std::to_string(d.since_step) + ")");
  }
  return Status();
}

Result<TrainerState> load_checkpoint(const std::string& dir, ModelState& model,
                                     OptimizerStateStore* state, bool* legacy) {
  // The files first: none is read for its values until each matches the manifest.
  auto manifest = verify_checkpoint_files(dir);
  const bool unverified = !manifest.ok() && manifest.status().code() == ErrorCode::kNotFound;
  if (!manifest.ok() && !unverified) return manifest.status();
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  auto text = read_file(state_path);
  if (!text.ok())
    return text.status().with_context("checkpoint " + dir + " has no trainer_state.json");
  SPW_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(*text, state_path, ErrorCode::kCorrupt));
  if (!j.is_object()) return corrupt(state_path + ": not a JSON object");
  const std::string state_name = "trainer_state.json";  // StateReader keeps a reference
  StateReader r{j, state_name, {}};
  const int64_t version = r.integer(j, "format_version", 1, 1 << 20);
  SPW_RETURN_IF_ERROR(r.error);
  if (version > kCheckpointFormatVersion)
    return unsupported(state_path + ": checkpoint format " + std::to_string(version) +
                       " is newer than this Spillway reads (" +
                       std::to_string(kCheckpointFormatVersion) +
                       "); open it with the Spillway that wrote it");
  if (unverified && version != 1)
    return corrupt("the checkpoint " + dir + " is damaged: its " + kCheckpointManifestFile +
                   " is missing (the checkpoint was not finished, or the file was removed); "
                   "resume from an earlier checkpoint");
  if (legacy) *legacy = unverified;
  TrainerState t;
  t.step = r.integer(j, "step", 0, kMaxCheckpointStep);
  const int64_t optimizer_step = r.integer(j, "optimizer_step", 0, kMaxCheckpointStep);
  t.tokens = r.integer(j, "tokens", 0, static_cast<int64_t>(kSaturatedCount), 0, false);
  t.last_loss = r.number("last_loss", 0.0);
  t.elapsed_s = r.number("elapsed_s", 0.0);
  t.data_cursor = j.value("data_cursor", nlohmann::json());
  if (const auto seed = j.find("seed"); seed != j.end()) {
    if (!seed->is_number_integer() || (!seed->is_number_unsigned() && seed->get<int64_t>() < 0))
      r.fail("'seed' is " + describe_json(*seed) + ", not an unsigned integer");
    else
      t.seed = seed->get<uint64_t>();
  }
  if (const auto manual = j.find("manual"); manual != j.end()) {
    if (!manual->is_boolean())
      r.fail("'manual' is not true or false");
    else
      t.manual = manual->get<bool>();
  }
  if (version >= 2) {
    const auto run = j.find("run_id");
    if (run == j.end() || !run->is_string())
      r.fail("'run_id' is not text");
    else
      t.run_id = run->get<std::string>();
    const auto seg = j.find("data_segment");
    if (seg == j.end() || !seg->is_object()) {
      r.fail("'data_segment' is missing");
    } else {
      t.data.since_step = r.integer(*seg, "since_step", 0, kMaxCheckpointStep);
      t.data.sequences_before = r.integer(*seg, "sequences_before", 0, kSaturatedCount);
      t.data.sequences_per_step = r.integer(*seg, "sequences_per_step", 0, int64_t{1} << 31);
      // A trainer's checkpoint knows its data position's rate; 0 ("unknown") only without one.
      if (t.data.sequences_per_step == 0 && !t.data_cursor.is_null())
        r.fail("'data_segment.sequences_per_step' is 0 beside a data cursor");
    }
  }
  if (!r.error.ok())
    return corrupt("the checkpoint " + dir + " is damaged: " + r.error.message() +
                   "; resume from an earlier checkpoint");
  SPW_RETURN_IF_ERROR(
      check_trainer_state(dir, t, optimizer_step, manifest.ok() ? &*manifest : nullptr));
  model.step = optimizer_step;
  // The weights: model.safetensors, or its shards and index (save_weights shards above 5 GiB).
  SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(dir));
  SPW_RETURN_IF_ERROR(model.load_weights(weights));
  if (!model.has_optimizer() && !state) return t;
  // optimizer.safetensors, or each machine's part of it under an index (checkpoint-parts.h).
  std::string single = (fs::path(dir) / "optimizer.safetensors").string();
  if (const std::string index = single + ".index.json"; !fs::exists(single) && fs::exists(index))
    single = index;
  std::optional<TensorStore> all;
  if (fs::exists(single)) {
    SPW_ASSIGN_OR_RETURN(all, TensorStore::open(single));
  }
  std::vector<float> mb(model.layout().max_block_numel()), vb(mb.size());
  for (size_t b = 0; b < model.num_blocks(); ++b) {
    if (!model.holds(b)) continue;  // another machine's
    const BlockLayout& block = model.layout().blocks()[b];
    // Into ModelState's moments where it holds the block's, else through the store.
    const bool here = model.exp_avg(b) != nullptr;
    float* m = here ? model.exp_avg(b) : mb.data();
    float* v = here ? model.exp_avg_sq(b) : vb.data();
    if (all) {
      SPW_RETURN_IF_ERROR(read_moments(*all, single, block, m, v));
    } else {
      const std::string path =
          (fs::path(dir) / "optimizer" / ("block-" + std::to_string(b) + ".safetensors")).string();
      SPW_ASSIGN_OR_RETURN(TensorStore one, TensorStore::open(path));
      SPW_RETURN_IF_ERROR(read_moments(one, path, block, m, v));
    }
    if (!here) SPW_RETURN_IF_ERROR(state->write_block(b, model.master(b), m, v));
  }
  return t;
}

namespace {

// Files in `dir` that its manifest does not list (a user's notes beside the checkpoint), relative
// to `dir`. Without a readable manifest (format 1, or a damaged one), the reader's names
// (*.safetensors, *.json) count as the checkpoint's.
std::vector<std::string> foreign_files(const std::string& dir) {
  std::set<std::string> own = {kCheckpointManifestFile};
  const auto manifest = read_checkpoint_manifest(dir);
  if (manifest.ok())
    for (const FileDigest& f : manifest->files) own.insert(f.path);
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_directory(ec)) continue;
    const std::string rel = it->path().lexically_relative(dir).generic_string();
    const bool known =
        own.contains(rel) ||
        (!manifest.ok() && (rel.ends_with(".safetensors") || rel.ends_with(".json")));
    if (!known) out.push_back(rel);
  }
  return out;
}

}  // namespace

std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int keep) {
  std::vector<std::string> notes;
  if (keep <= 0) return notes;
  std::vector<std::string> scheduled;  // oldest first, as list_checkpoints gives them
  for (std::string& dir : list_checkpoints(checkpoints_dir)) {
    auto text = read_file((fs::path(dir) / "trainer_state.json").string());
    const auto parsed = text.ok() ? parse_json(*text, dir, ErrorCode::kCorrupt)
                                  : Result<nlohmann::json>(text.status());
    const nlohmann::json j = parsed.ok() ? *parsed : nlohmann::json();
    if (!(j.is_object() && j.value("manual", false))) scheduled.push_back(std::move(dir));
  }
  std::error_code ec;
  for (size_t i = 0; i + keep < scheduled.size(); ++i) {
    // Spillway removes only what it wrote: a checkpoint holding a file of the user's stays whole.
    if (const auto foreign = foreign_files(scheduled[i]); !foreign.empty()) {
      notes.push_back("kept " + scheduled[i] + " past the keep-" + std::to_string(keep) +
                      " rotation: it holds " + foreign.front() +
                      (foreign.size() > 1 ? " and " + std::to_string(foreign.size() - 1) + " more"
                                          : std::string()) +
                      ", which Spillway did not write; move it out and delete the folder yourself");
      continue;
    }
    // Renamed out of the list first: a kill in the middle of remove_all would otherwise leave a
    // half-deleted step-N folder that list_checkpoints (and History's Resume) offers as whole. As
    // step-N.tmp-<pid> it is never listed, and the next run over the folder removes it.
    const std::string doomed = scheduled[i] + ".tmp-" + std::to_string(::getpid());
    fs::rename(scheduled[i], doomed, ec);
    if (ec) continue;  // left in place, whole; the next prune tries again
    if (fail_point("checkpoint.prune")) continue;
    fs::remove_all(doomed, ec);
  }
  return notes;
}

}  // namespace spillway
