// TrainJob: a fully resolved training job — what `spillway-worker train JOB.json` runs. The job
// file's keys, defaults and ranges live in one table, app/job/job-schema, and the worker's
// app/worker/job-file turns a job file into this plain struct for the trainer and the planner.
// The defaults below are the schema's (job_schema_tests checks them). Copyable value, no shared state.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "data/dataset-options.h"
#include "model/model-config.h"
#include "train/lr-schedule.h"

namespace spillway {

enum class TierChoice { kDram, kSsd, kAuto };

struct TrainJob {
  std::string name;
  // model: a Hugging Face folder, or random initialisation from a preset name or a config object.
  std::string model_path;
  std::string init_preset;
  nlohmann::json init_config;  // null unless "init" was a config.json object
  uint64_t init_seed = 0;
  std::string tokenizer_path;  // defaults to model_path

  // data
  std::string train_path;
  std::string eval_path;
  double eval_fraction = 0.0;  // held out from the end of train when eval_path is empty
  std::string format = "auto";
  std::string chat_template = "auto";
  int seq_len = 256;
  bool packing = false;  // instruction data packed into full sequences (InstructionLayout::kPacked)
  bool shuffle = true;
  uint64_t data_seed = 0;

  // train
  int64_t steps = 0;   // 0: from epochs
  double epochs = 1;   // used when steps == 0
  int micro_batch_size = 1;
  int grad_accum = 1;
  LrScheduleConfig schedule{LrSchedule::kConstant, 1e-4};  // kind, lr, warmup (total filled in from steps)
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip_grad_norm = 1.0;
  uint64_t seed = 0;
  int64_t eval_every = 0;
  int64_t eval_batches = 0;  // 0: the whole eval set
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 2;
  int64_t log_every = 1;

  // placement
  std::string backend = "auto";
  uint64_t device_memory_bytes = 0;  // 0: the backend's default (all of it on a GPU)
  int weight_slots = 2;
  TierChoice optimizer_tier = TierChoice::kDram;
  TierChoice master_tier = TierChoice::kDram;
  std::string ssd_dir;
  uint64_t dram_cap_bytes = 0;

  // output
  std::string run_dir;  // default: <runs dir>/<run id>
  std::string db_path;  // default: RunStore::default_db_path()
};

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
