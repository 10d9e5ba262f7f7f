#include "train/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "core/fail-point.h"
#include "core/file-util.h"
#include "core/json-file.h"
#include "model/safetensors.h"

namespace spillway {
namespace fs = std::filesystem;

namespace {

constexpr int kFormatVersion = 1;

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%06lld", static_cast<long long>(step));
  return buf;
}

// Removes `step-*.tmp-<pid>` folders of checkpoint writers that died mid-write (SIGKILL, power
// loss): they are never complete, and each can be as big as a checkpoint.
void remove_dead_temporaries(const std::string& checkpoints_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string n = e.path().filename().string();
    const size_t at = n.find(".tmp-");
    if (!n.starts_with("step-") || at == std::string::npos) continue;
    const long pid = std::strtol(n.c_str() + at + 5, nullptr, 10);
    if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
      std::error_code ignore;
      fs::remove_all(e.path(), ignore);
    }
  }
}

}  // namespace

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

Result<std::string> save_checkpoint(const std::string& checkpoints_dir, const ModelState& model,
                                    const TrainerState& trainer, OptimizerStateStore* state) {
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  if (ec) return io_error("cannot create " + checkpoints_dir + ": " + ec.message());
  remove_dead_temporaries(checkpoints_dir);
  const std::string final_dir = (fs::path(checkpoints_dir) / step_name(trainer.step)).string();
  // A checkpoint of the same step from an earlier attempt is replaced.
  Status st = write_folder_atomic(final_dir, [&](const std::string& tmp) -> Status {
    SPW_RETURN_IF_ERROR(model.save_weights(tmp));
    // Armed with `fail`: the disk fills up here, as a full disk fails the optimizer state's write.
    if (fail_point("checkpoint.write"))
      return errno_status("cannot write " + (fs::path(tmp) / "optimizer.safetensors").string(),
                          ENOSPC);
    if (model.has_optimizer()) {
      std::vector<TensorToWrite> moments;
      auto& m = const_cast<ModelState&>(model);  // save only reads; the accessors are not const
      for (size_t b = 0; b < model.num_blocks(); ++b) {
        auto t = moment_tensors(model.layout().blocks()[b], m.exp_avg(b), m.exp_avg_sq(b));
        moments.insert(moments.end(), t.begin(), t.end());
      }
      SPW_RETURN_IF_ERROR(
          write_safetensors((fs::path(tmp) / "optimizer.safetensors").string(), moments));
    } else if (state) {
      // The moments live on the SSD: stream them out one block at a time. (The master weights are
      // saved from ModelState's compute copy, which on the CPU backend is the fp32 master itself.)
      std::error_code mk;
      fs::create_directories(fs::path(tmp) / "optimizer", mk);
      if (mk) return io_error("cannot create " + tmp + "/optimizer: " + mk.message());
      std::vector<float> mb(model.layout().max_block_numel()), vb(mb.size());
      for (size_t b = 0; b < model.num_blocks(); ++b) {
        SPW_RETURN_IF_ERROR(state->read_block(b, nullptr, mb.data(), vb.data()));
        SPW_RETURN_IF_ERROR(write_safetensors(
            (fs::path(tmp) / "optimizer" / ("block-" + std::to_string(b) + ".safetensors"))
                .string(),
            moment_tensors(model.layout().blocks()[b], mb.data(), vb.data())));
      }
    }
    nlohmann::json j = {{"format_version", kFormatVersion},
                        {"step", trainer.step},
                        {"optimizer_step", model.step},
                        {"tokens", trainer.tokens},
                        {"last_loss", trainer.last_loss},
                        {"data_cursor", trainer.data_cursor},
                        {"seed", trainer.seed},
                        {"elapsed_s", trainer.elapsed_s},
                        {"manual", trainer.manual}};
    SPW_RETURN_IF_ERROR(
        write_file_atomic((fs::path(tmp) / "trainer_state.json").string(), j.dump(2) + "\n"));
    return write_file_atomic((fs::path(tmp) / "config.json").string(),
                             model.config().to_json().dump(2) + "\n");
  });
  if (!st.ok()) {
    // Nothing of this checkpoint is left behind (write_folder_atomic); the ones before it are
    // whole.
    const std::vector<std::string> kept = list_checkpoints(checkpoints_dir);
    return Status(
        st.code(),
        "checkpoint at step " + std::to_string(trainer.step) + " not saved: " + st.message() +
            (kept.empty() ? std::string("; there is no earlier checkpoint")
                          : "; the last whole checkpoint, " + kept.back() +
                                ", is kept: resume from it (--resume) once that is fixed"));
  }
  return final_dir;
}

Result<TrainerState> load_checkpoint(const std::string& dir, ModelState& model,
                                     OptimizerStateStore* state) {
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  auto text = read_file(state_path);
  if (!text.ok())
    return text.status().with_context("checkpoint " + dir + " has no trainer_state.json");
  SPW_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(*text, state_path, ErrorCode::kCorrupt));
  if (!j.is_object()) return corrupt(state_path + ": not a JSON object");
  TrainerState t;
  try {
    if (j.at("format_version").get<int>() != kFormatVersion)
      return unsupported(state_path + ": checkpoint format " + j["format_version"].dump() +
                         " is not supported");
    t.step = j.at("step").get<int64_t>();
    t.tokens = j.value("tokens", int64_t{0});
    t.last_loss = j.value("last_loss", 0.0);
    t.data_cursor = j.value("data_cursor", nlohmann::json());
    t.seed = j.value("seed", uint64_t{0});
    t.elapsed_s = j.value("elapsed_s", 0.0);
    t.manual = j.value("manual", false);
    model.step = j.at("optimizer_step").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return corrupt(state_path + ": " + std::string(e.what()).substr(0, 200) +
                   "; the checkpoint is damaged: resume from an earlier one");
  }
  SPW_ASSIGN_OR_RETURN(TensorStore weights,
                       TensorStore::open((fs::path(dir) / "model.safetensors").string()));
  SPW_RETURN_IF_ERROR(model.load_weights(weights));
  if (!model.has_optimizer() && !state) return t;
  const std::string single = (fs::path(dir) / "optimizer.safetensors").string();
  std::optional<TensorStore> all;
  if (fs::exists(single)) {
    SPW_ASSIGN_OR_RETURN(all, TensorStore::open(single));
  }
  std::vector<float> mb(model.layout().max_block_numel()), vb(mb.size());
  for (size_t b = 0; b < model.num_blocks(); ++b) {
    const BlockLayout& block = model.layout().blocks()[b];
    float* m = model.has_optimizer() ? model.exp_avg(b) : mb.data();
    float* v = model.has_optimizer() ? model.exp_avg_sq(b) : vb.data();
    if (all) {
      SPW_RETURN_IF_ERROR(read_moments(*all, single, block, m, v));
    } else {
      const std::string path =
          (fs::path(dir) / "optimizer" / ("block-" + std::to_string(b) + ".safetensors")).string();
      SPW_ASSIGN_OR_RETURN(TensorStore one, TensorStore::open(path));
      SPW_RETURN_IF_ERROR(read_moments(one, path, block, m, v));
    }
    if (!model.has_optimizer()) SPW_RETURN_IF_ERROR(state->write_block(b, model.master(b), m, v));
  }
  return t;
}

void prune_checkpoints(const std::string& checkpoints_dir, int keep) {
  if (keep <= 0) return;
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
    // Renamed out of the list first: a kill in the middle of remove_all would otherwise leave a
    // half-deleted step-N folder that list_checkpoints (and History's Resume) offers as whole. As
    // step-N.tmp-<pid> it is never listed, and the next writer removes it once this process is
    // gone.
    const std::string doomed = scheduled[i] + ".tmp-" + std::to_string(::getpid());
    fs::rename(scheduled[i], doomed, ec);
    if (ec) continue;  // left in place, whole; the next prune tries again
    if (fail_point("checkpoint.prune")) continue;
    fs::remove_all(doomed, ec);
  }
}

}  // namespace spillway
