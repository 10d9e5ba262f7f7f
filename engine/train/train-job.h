// TrainJob: a fully resolved training job — what `spillway-worker train JOB.json` runs. The job
// file's keys, defaults and ranges live in one table, engine/job/job-schema; train_job_fields()
// below names the member each key sets, and that one list both parses a resolved job into this
// struct (train_job_from_resolved, the worker's app/worker/job-file) and gives a default-made
// TrainJob the schema's default of every key (its constructor): the struct has no defaults of its
// own that could disagree with the schema. Copyable value, no shared state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/dataset-options.h"
#include "job/device-selection.h"
#include "model/model-config.h"
#include "train/lr-schedule.h"

namespace spillway {

enum class TierChoice { kDram, kSsd, kAuto };

struct TrainJob {
  // Every field with a job key at that key's schema default (see above).
  TrainJob();

  std::string name;
  // model: a Hugging Face folder, or random initialisation from a preset name or a config object.
  std::string model_path;
  std::string init_preset;
  nlohmann::json init_config;  // null unless "init" was a config.json object
  uint64_t init_seed{};
  std::string tokenizer_path;  // defaults to model_path

  // data
  std::string train_path;
  std::string eval_path;
  double eval_fraction{};  // held out from the end of train when eval_path is empty
  std::string format;
  std::string chat_template;
  int seq_len{};
  bool packing = true;  // instruction data packed, whole conversations (InstructionLayout::kPacked)
  bool shuffle{};
  uint64_t data_seed{};

  // train
  int64_t steps{};  // 0: from epochs
  double epochs{};  // used when steps == 0
  int micro_batch_size{};
  int grad_accum{};
  LrScheduleConfig schedule;  // kind, lr, warmup, min_lr_ratio (total_steps filled in from steps)
  double weight_decay{};
  double beta1{}, beta2{}, eps{};
  double clip_grad_norm{};
  uint64_t seed{};
  int64_t eval_every{};
  int64_t eval_batches{};  // 0: the whole eval set
  int64_t checkpoint_every{};
  int keep_checkpoints{};
  int64_t log_every{};

  // placement
  std::string backend;
  job::DeviceSelection devices;    // the GPUs (data parallel over more than one)
  uint64_t device_memory_bytes{};  // 0: the backend's default (all of it on a GPU)
  int weight_slots{};
  int hbm_state_blocks{};  // -1: as many as fit (streaming-engine.h, hbm_state_blocks)
  // StreamingConfig::saved_activation_layers; -1 (the schema's default): the planner's choice
  // (planner.h).
  int saved_activation_layers{};
  // StreamingConfig::mlp_recompute_layers; -1 (the schema's default): the planner's choice.
  int mlp_recompute_layers{};
  TierChoice optimizer_tier = TierChoice::kDram;
  TierChoice master_tier = TierChoice::kDram;
  std::string ssd_dir;
  uint64_t dram_cap_bytes{};

  // output
  std::string run_dir;  // default: <runs dir>/<run id>
  std::string db_path;  // default: RunStore::default_db_path()

  bool operator==(const TrainJob&) const = default;
};

// One key of the job schema and the member of TrainJob it sets. `set` takes a value the schema
// accepts for the key (job::check_value; never null) and stores it; kInvalidArgument naming the
// key when the engine does not know it (a train.schedule that parse_lr_schedule refuses).
struct TrainJobField {
  const char* path;  // "train.lr"
  Status (*set)(TrainJob& job, const nlohmann::json& value);
};

// Every key of the job schema, each once, in the schema's order (job_schema_tests checks both).
const std::vector<TrainJobField>& train_job_fields();

// The engine's job from a resolved job (job::resolve_job: every key present, typed and in range):
// each key's value through its field, the keys left null keeping TrainJob's defaults.
// kInvalidArgument as TrainJobField::set.
Result<TrainJob> train_job_from_resolved(const nlohmann::json& resolved);

// What the job says about its data (data.format, data.template, data.seq_len, data.packing).
inline DataSettings data_settings(const TrainJob& job) {
  return {job.format, job.chat_template, job.seq_len, job.packing};
}

// The options training reads the job's data with, for `model`: make_dataset_options, shared with
// `eval` and the GUI's preview.
inline Result<DatasetOptions> dataset_options(const TrainJob& job, const ModelConfig& model) {
  return make_dataset_options(data_settings(job), model);
}

}  // namespace spillway
