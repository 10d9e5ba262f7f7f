#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/file-util.h"
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

}  // namespace

Result<std::string> save_checkpoint(const std::string& checkpoints_dir, const ModelState& model,
                                    const TrainerState& trainer) {
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  if (ec) return io_error("cannot create " + checkpoints_dir + ": " + ec.message());
  const std::string final_dir = (fs::path(checkpoints_dir) / step_name(trainer.step)).string();
  const std::string tmp = final_dir + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return io_error("cannot create " + tmp + ": " + ec.message());
  auto fail = [&](Status st) {
    std::error_code ignore;
    fs::remove_all(tmp, ignore);
    return st.with_context("checkpoint at step " + std::to_string(trainer.step));
  };

  Status st = model.save_weights(tmp);
  if (!st.ok()) return fail(st);
  if (model.has_optimizer()) {
    std::vector<TensorToWrite> moments;
    auto& m = const_cast<ModelState&>(model);  // save only reads; the accessors are not const
    for (size_t b = 0; b < model.num_blocks(); ++b) {
      for (const ParamView& p : model.layout().blocks()[b].params) {
        moments.push_back({"exp_avg." + p.name, DType::kF32, p.shape, m.exp_avg(b) + p.offset});
        moments.push_back({"exp_avg_sq." + p.name, DType::kF32, p.shape, m.exp_avg_sq(b) + p.offset});
      }
    }
    st = write_safetensors((fs::path(tmp) / "optimizer.safetensors").string(), moments);
    if (!st.ok()) return fail(st);
  }
  nlohmann::json j = {{"format_version", kFormatVersion},
                      {"step", trainer.step},
                      {"optimizer_step", model.step},
                      {"tokens", trainer.tokens},
                      {"last_loss", trainer.last_loss},
                      {"data_cursor", trainer.data_cursor},
                      {"seed", trainer.seed},
                      {"elapsed_s", trainer.elapsed_s}};
  st = write_file_atomic((fs::path(tmp) / "trainer_state.json").string(), j.dump(2) + "\n");
  if (!st.ok()) return fail(st);
  st = write_file_atomic((fs::path(tmp) / "config.json").string(), model.config().to_json().dump(2) + "\n");
  if (!st.ok()) return fail(st);
  fs::remove_all(final_dir, ec);  // a checkpoint of the same step from an earlier attempt
  fs::rename(tmp, final_dir, ec);
  if (ec) return fail(io_error("cannot rename " + tmp + " to " + final_dir + ": " + ec.message()));
  SPW_RETURN_IF_ERROR(fsync_directory(checkpoints_dir));
  return final_dir;
}

Result<TrainerState> load_checkpoint(const std::string& dir, ModelState& model) {
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  auto text = read_file(state_path);
  if (!text.ok()) return text.status().with_context("checkpoint " + dir + " has no trainer_state.json");
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return corrupt(state_path + ": not a JSON object");
  TrainerState t;
  try {
    if (j.at("format_version").get<int>() != kFormatVersion)
      return unsupported(state_path + ": checkpoint format " + j["format_version"].dump() + " is not supported");
    t.step = j.at("step").get<int64_t>();
    t.tokens = j.value("tokens", int64_t{0});
    t.last_loss = j.value("last_loss", 0.0);
    t.data_cursor = j.value("data_cursor", nlohmann::json());
    t.seed = j.value("seed", uint64_t{0});
    t.elapsed_s = j.value("elapsed_s", 0.0);
    model.step = j.at("optimizer_step").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return corrupt(state_path + ": " + e.what());
  }
  SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open((fs::path(dir) / "model.safetensors").string()));
  SPW_RETURN_IF_ERROR(model.load_weights(weights));
  if (model.has_optimizer()) {
    const std::string opt_path = (fs::path(dir) / "optimizer.safetensors").string();
    SPW_ASSIGN_OR_RETURN(TensorStore moments, TensorStore::open(opt_path));
    for (size_t b = 0; b < model.num_blocks(); ++b) {
      for (const ParamView& p : model.layout().blocks()[b].params) {
        for (auto [prefix, dst] : {std::pair{"exp_avg.", model.exp_avg(b)}, std::pair{"exp_avg_sq.", model.exp_avg_sq(b)}}) {
          const TensorInfo* ti = moments.find(prefix + p.name);
          if (!ti) return corrupt(opt_path + ": missing tensor '" + prefix + p.name + "'");
          SPW_RETURN_IF_ERROR(moments.read_f32(*ti, dst + p.offset, p.numel));
        }
      }
    }
  }
  return t;
}

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.starts_with("step-") && n.find(".tmp") == std::string::npos) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void prune_checkpoints(const std::string& checkpoints_dir, int keep) {
  if (keep <= 0) return;
  auto all = list_checkpoints(checkpoints_dir);
  std::error_code ec;
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove_all(all[i], ec);
}

}  // namespace spillway
