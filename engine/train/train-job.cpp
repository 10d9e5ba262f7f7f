#include "train/train-job.h"

#include <type_traits>

#include "job/job-schema.h"

namespace spillway {
namespace {

using nlohmann::json;

// A key whose value is the member's own type.
template <auto Member>
Status assign(TrainJob& job, const json& v) {
  using T = std::remove_cvref_t<decltype(job.*Member)>;
  job.*Member = v.get<T>();
  return {};
}

// placement.optimizer and placement.master: "dram", "ssd" or "auto" (the schema's choices).
template <auto Member>
Status tier(TrainJob& job, const json& v) {
  const std::string s = v.get<std::string>();
  job.*Member = s == "ssd" ? TierChoice::kSsd : s == "auto" ? TierChoice::kAuto : TierChoice::kDram;
  return {};
}

// The schema's keys, each with the member it sets. Keys whose default is null (model.path,
// model.init, model.tokenizer, data.eval) leave their member empty when unset.
const std::vector<TrainJobField> kFields = {
    {"name", assign<&TrainJob::name>},
    {"model.path", assign<&TrainJob::model_path>},
    {"model.init",
     [](TrainJob& job, const json& v) -> Status {
       if (v.is_object())
         job.init_config = v;
       else
         job.init_preset = v.get<std::string>();
       return {};
     }},
    {"model.seed", assign<&TrainJob::init_seed>},
    {"model.tokenizer", assign<&TrainJob::tokenizer_path>},
    {"data.train", assign<&TrainJob::train_path>},
    {"data.eval", assign<&TrainJob::eval_path>},
    {"data.eval_fraction", assign<&TrainJob::eval_fraction>},
    {"data.format", assign<&TrainJob::format>},
    {"data.template", assign<&TrainJob::chat_template>},
    {"data.seq_len", assign<&TrainJob::seq_len>},
    {"data.packing", assign<&TrainJob::packing>},
    {"data.shuffle", assign<&TrainJob::shuffle>},
    {"data.seed", assign<&TrainJob::data_seed>},
    {"train.steps", assign<&TrainJob::steps>},
    {"train.epochs", assign<&TrainJob::epochs>},
    {"train.micro_batch_size", assign<&TrainJob::micro_batch_size>},
    {"train.grad_accum", assign<&TrainJob::grad_accum>},
    {"train.lr",
     [](TrainJob& job, const json& v) -> Status {
       return job.schedule.lr = v.get<double>(), Status();
     }},
    {"train.schedule",
     [](TrainJob& job, const json& v) -> Status {
       auto kind = parse_lr_schedule(v.get<std::string>());
       if (!kind.ok()) return kind.status().with_context("job.json: train.schedule");
       job.schedule.kind = *kind;
       return {};
     }},
    {"train.warmup_steps",
     [](TrainJob& job, const json& v) -> Status {
       return job.schedule.warmup_steps = v.get<int64_t>(), Status();
     }},
    {"train.min_lr_ratio",
     [](TrainJob& job, const json& v) -> Status {
       return job.schedule.min_lr_ratio = v.get<double>(), Status();
     }},
    {"train.weight_decay", assign<&TrainJob::weight_decay>},
    {"train.beta1", assign<&TrainJob::beta1>},
    {"train.beta2", assign<&TrainJob::beta2>},
    {"train.eps", assign<&TrainJob::eps>},
    {"train.clip_grad_norm", assign<&TrainJob::clip_grad_norm>},
    {"train.seed", assign<&TrainJob::seed>},
    {"train.eval_every", assign<&TrainJob::eval_every>},
    {"train.eval_batches", assign<&TrainJob::eval_batches>},
    {"train.checkpoint_every", assign<&TrainJob::checkpoint_every>},
    {"train.keep_checkpoints", assign<&TrainJob::keep_checkpoints>},
    {"train.log_every", assign<&TrainJob::log_every>},
    {"placement.backend", assign<&TrainJob::backend>},
    {"placement.devices",
     [](TrainJob& job, const json& v) -> Status {
       SPW_ASSIGN_OR_RETURN(job.devices, job::parse_device_selection(v));
       return {};
     }},
    {"placement.device_memory_bytes", assign<&TrainJob::device_memory_bytes>},
    {"placement.weight_slots", assign<&TrainJob::weight_slots>},
    {"placement.hbm_state_blocks", assign<&TrainJob::hbm_state_blocks>},
    {"placement.saved_activation_layers", assign<&TrainJob::saved_activation_layers>},
    {"placement.mlp_recompute_layers", assign<&TrainJob::mlp_recompute_layers>},
    {"placement.optimizer", tier<&TrainJob::optimizer_tier>},
    {"placement.master", tier<&TrainJob::master_tier>},
    {"placement.ssd_dir", assign<&TrainJob::ssd_dir>},
    {"placement.dram_cap_bytes", assign<&TrainJob::dram_cap_bytes>},
    {"output.run_dir", assign<&TrainJob::run_dir>},
    {"output.db", assign<&TrainJob::db_path>},
};

// A key's value in a resolved job: job[section][name], or job[name] for the top-level key.
const json* value_in(const json& job, const job::JobKey& k) {
  const json* at = &job;
  if (!k.section().empty()) {
    const auto s = job.find(k.section());
    if (s == job.end() || !s->is_object()) return nullptr;
    at = &*s;
  }
  const auto v = at->find(k.name());
  return v == at->end() ? nullptr : &*v;
}

}  // namespace

const std::vector<TrainJobField>& train_job_fields() {
  return kFields;
}

TrainJob::TrainJob() {
  for (const TrainJobField& f : kFields) {
    const job::JobKey* k = job::find_job_key(f.path);
    // The schema's defaults are valid values of their keys (job_schema_tests): never an error.
    if (k && !k->default_value.is_null()) (void)f.set(*this, k->default_value);
  }
}

Result<TrainJob> train_job_from_resolved(const json& resolved) {
  TrainJob job;
  for (const TrainJobField& f : kFields) {
    const job::JobKey* k = job::find_job_key(f.path);
    if (!k)
      return internal_error("TrainJob names " + std::string(f.path) +
                            ", which the job schema does not have");
    const json* v = value_in(resolved, *k);
    if (!v || v->is_null()) continue;
    SPW_RETURN_IF_ERROR(f.set(job, *v));
  }
  return job;
}

}  // namespace spillway
