#include "worker/models-command.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>

#include "model/model-catalog.h"
#include "model/model-config.h"
#include "model/parameter-layout.h"
#include "tiers/byte-size.h"
#include "train/planner.h"
#include "worker/args.h"
#include "worker/job-file.h"
#include "worker/probe-command.h"

namespace spillway::worker {
using nlohmann::json;

namespace {

constexpr const char* kUsage =
    "usage: models [--hub DIR] [--job FILE] [--backend auto|cpu|cuda] [--json]";

// One cached model as `models` reports it: its summary, or why it cannot be trained, and the
// planner's verdict for the job with this model.
json describe_model(const CachedModel& m, const TrainJob& job_template,
                    const std::optional<MachineProbe>& machine) {
  json out{{"repo", m.repo}, {"revision", m.revision}, {"path", m.path}};
  // The reason without the snapshot's path in front (the row names the model; "path" has it).
  auto fail = [&](const Status& st) {
    std::string why = st.message();
    for (const std::string& prefix : {m.path + "/config.json: ", m.path + ": "})
      if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    out["usable"] = false;
    out["fits"] = false;
    out["why"] = why;
    return out;
  };
  auto config = ModelConfig::load(m.path);
  if (!config.ok()) return fail(config.status());
  out["architecture"] = config->architecture;
  out["family"] = config->family();
  auto store = TensorStore::open(m.path);
  if (!store.ok()) return fail(store.status());
  const ParameterLayout layout = ParameterLayout::build(*config);
  if (Status st = layout.check(*store); !st.ok()) return fail(st);
  const ModelSummary s = summarize(layout, &*store);
  out["parameters"] = s.parameters;
  out["bytes_on_disk"] = s.bytes_on_disk;
  out["dtype"] = s.dtype;
  out["usable"] = true;
  if (!machine) return out;
  TrainJob job = job_template;
  job.model_path = m.path;
  job.init_preset.clear();
  job.init_config = nullptr;
  const Plan plan = make_plan(*config, job, *machine, 0);
  out["fits"] = plan.fits;
  out["state_on_ssd"] = plan.ssd.needed_bytes > 0;
  if (plan.fits) {
    out["tokens_per_s"] = plan.step.tokens_per_s;
    out["why"] = std::string(plan.ssd.needed_bytes > 0 ? "fits with AdamW state on the SSD"
                                                       : "fits in DRAM") +
                 " at " + std::to_string(plan.micro_batch_size) + " x " +
                 std::to_string(plan.seq_len) + " tokens a micro-batch";
  } else if (plan.suggestion && plan.suggestion->fits) {
    out["fits"] = true;
    out["why"] = "fits at micro-batch " + std::to_string(plan.suggestion->micro_batch_size) +
                 " x accumulation " + std::to_string(plan.suggestion->grad_accum) +
                 " (the job's own does not: " + plan.reason + ")";
  } else {
    out["why"] = plan.reason;
  }
  return out;
}

std::string count_text(double n) {
  char buf[32];
  std::snprintf(buf, sizeof buf,
                n >= 1e9   ? "%.2f B"
                : n >= 1e6 ? "%.1f M"
                           : "%.0f K",
                n >= 1e9   ? n / 1e9
                : n >= 1e6 ? n / 1e6
                           : n / 1e3);
  return buf;
}

}  // namespace

int run_models(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--hub", "--job", "--backend"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool as_json = args->has("--json");
  if (!args->positional.empty()) return report_failure(io, as_json, invalid_argument(kUsage));
  TrainJob job;
  if (auto path = args->get("--job")) {
    auto loaded = load_job(*path);
    if (!loaded.ok()) return report_failure(io, as_json, loaded.status());
    job = std::move(*loaded);
  }
  if (auto backend = args->get("--backend")) job.backend = *backend;
  const std::string hub = args->get("--hub").value_or(hugging_face_hub_dir());
  const std::vector<CachedModel> models = find_cached_models(hub);
  // One probe for every model: its memory figures decide what fits.
  std::optional<MachineProbe> machine;
  if (!models.empty()) {
    std::string reason;
    auto probed = probe_for_backend(job.ssd_dir.empty() ? "." : job.ssd_dir, job.backend, &reason);
    if (!probed.ok()) return report_failure(io, as_json, probed.status());
    machine = std::move(*probed);
  }
  if (!as_json)
    io.out << "Hugging Face cache " << (hub.empty() ? "(none: HOME is not set)" : hub) << ": "
           << models.size() << (models.size() == 1 ? " model" : " models") << "\n";
  for (const CachedModel& m : models) {
    const json d = describe_model(m, job, machine);
    if (as_json) {
      io.out << d.dump() << "\n";
      continue;
    }
    io.out << "  " << m.repo << "\n    ";
    if (d.value("usable", false))
      io.out << d.value("family", "") << ", " << count_text(d.value("parameters", 0.0))
             << " parameters, " << format_bytes(d.value("bytes_on_disk", uint64_t{0}))
             << " on disk: " << (d.value("fits", false) ? "" : "does not fit: ")
             << d.value("why", "") << "\n";
    else
      io.out << "cannot be trained: " << d.value("why", "") << "\n";
  }
  io.out.flush();
  return 0;
}

}  // namespace spillway::worker
