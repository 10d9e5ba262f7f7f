#include "worker/plan-command.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <utility>

#include "history/owned-files.h"
#include "history/run-folder.h"
#include "tiers/byte-size.h"
#include "train/planner.h"
#include "train/run-figures.h"
#include "train/trainer.h"
#include "worker/args.h"
#include "worker/job-file.h"
#include "worker/probe-command.h"
#include "worker/stop-signals.h"

namespace spillway::worker {
namespace {

// "layers 3-7", "layer 3".
std::string layers_text(int first, int last) {
  return first == last ? "layer " + std::to_string(first)
                       : "layers " + std::to_string(first) + "-" + std::to_string(last);
}

// What each layer's backward recomputes under the plan's saved activations, kept in `device`.
std::string recompute_text(const Plan& plan, const std::string& device) {
  const int L = plan.model.layers, whole = plan.state.saved_activation_layers,
            mlp = plan.state.mlp_recompute_layers;
  const int first_mlp = L - whole - mlp, first_whole = L - whole;
  std::vector<std::string> parts;
  if (first_mlp > 0)
    parts.push_back("the forward of " + layers_text(0, first_mlp - 1) + " from their checkpoints");
  if (mlp > 0)
    parts.push_back("the MLP of " + layers_text(first_mlp, first_whole - 1) +
                    " (their other activations saved in " + device + ")");
  if (whole > 0)
    parts.push_back("nothing of " + layers_text(first_whole, L - 1) +
                    " (every activation saved in " + device + ")");
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : "; ") + p;
  return text.empty() ? "nothing (no layers)" : text;
}
namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: plan JOB.json [--measure N] [--machines M [--network-gbps G]] [--json]";
constexpr int kMaxMeasureSteps = 1000;

std::string num(double v, const char* fmt) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// 12345.6 -> "12,346"
std::string thousands(double v) {
  const std::string digits = num(std::abs(v), "%.0f");
  std::string out = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// "28.1 GB", or below a GB in the unit that shows it ("18.6 MiB"): a small job's needs must not
// read "0.0 GB".
std::string gb(double bytes) {
  return bytes >= 1e9 ? num(bytes / 1e9, "%.1f GB") : format_bytes(static_cast<uint64_t>(bytes));
}

// "micro-batch 8 x 3 accumulation = 48K tokens/step: 9,843 tokens/s, step 4.99 s, 406 model
// TFLOPS"; over several GPUs "micro-batch 8 x 3 accumulation x 2 GPUs = 96K tokens/step: ..."
// (`devices`: " x 2 GPUs", " x 2 ranks", or empty).
std::string suggestion_line(const PlanSuggestion& s, const std::string& devices) {
  const int64_t tokens = s.tokens_per_step;
  return "micro-batch " + std::to_string(s.micro_batch_size) + " x " +
         std::to_string(s.grad_accum) + " accumulation" + devices + " = " +
         (tokens % 1024 == 0 ? std::to_string(tokens / 1024) + "K" : std::to_string(tokens)) +
         " tokens/step: " + thousands(s.tokens_per_s) + " tokens/s, step " +
         num(s.step_s, "%.2f s") + ", " + num(s.model_tflops, "%.3g model TFLOPS") +
         (s.same_as_job ? " (the job's own)" : "");
}

// "3.81 s", "23.2 GiB", "9,843": one figure of the comparison as the table shows it.
std::string figure_text(StepFigure figure, const std::optional<double>& v) {
  if (!v) return "-";
  if (figure == StepFigure::kStepS) return num(*v, "%.3g s");
  if (figure == StepFigure::kTokensPerS) return thousands(*v);
  return format_bytes(static_cast<uint64_t>(*v));
}

// `plan --measure N`: the job's first N steps in a throwaway run, held against the plan that run
// made with its own probe of this machine. The run's folder and database are in a temporary
// folder, removed afterwards: History does not list it. Nothing is evaluated, checkpointed or
// exported. Exit 3 when the job does not fit (the trainer refuses it as plan would).
// SIGTERM or SIGINT stops it as it stops `train` (at the next layer; one that comes while the model
// loads, once it is loaded), without a checkpoint: the folder is removed, one line says so, and the
// exit is 0 as for `train` stopped on request; --json prints {"status": "stopped", ...} instead of
// the figures.
int measure_plan(TrainJob job, int steps, bool json, CommandIo io) {
  // Made before the scratch folder, so that its removal below runs with the handlers in place: a
  // second Ctrl-C cannot cut it short.
  StopSignals signals(/*checkpoint_on_sigusr1=*/false);
  std::string scratch =
      (fs::temp_directory_path() / (std::string(kThrowawayRunPrefix) + "XXXXXX")).string();
  if (!::mkdtemp(scratch.data()))
    return report_failure(io, json,
                          io_error("plan --measure: cannot make a temporary folder " + scratch +
                                   ": " + std::strerror(errno)));
  struct Cleanup {
    std::string dir;
    // Only the throwaway run's own files: whatever else is in the folder stays (and with it the
    // folder).
    ~Cleanup() { (void)remove_throwaway_run(dir); }
  } cleanup{scratch};
  const TrainJob asked = job;  // the user's job, whose ETA the plan shows
  job.steps = steps;
  job.epochs = 0;
  job.eval_every = 0;
  job.checkpoint_every = 0;
  job.run_dir = scratch + "/run";
  job.db_path = scratch + "/runs.db";
  TrainerHooks hooks;
  hooks.on_log = [&](const std::string& line) {
    if (!json) io.out << line << std::endl;
  };
  hooks.on_warning = [&](const std::string& warning) {
    io.err << "spillway-worker: warning: " << warning << std::endl;
  };
  if (!json)
    io.out << "measuring " << steps << (steps == 1 ? " step" : " steps")
           << " of the job in a throwaway run" << std::endl;
  auto trainer = Trainer::create(job, "", hooks);
  if (!trainer.ok()) {
    const int code = report_failure(io, json, trainer.status());
    return trainer.status().code() == ErrorCode::kOutOfMemory ? 3 : code;
  }
  signals.attach(**trainer);
  auto measured = (*trainer)->measure();
  signals.detach();
  if (measured.status().code() == ErrorCode::kCancelled && signals.stop_signal() != 0) {
    const int64_t done = (*trainer)->step();
    const std::string message =
        std::string("plan --measure: stopped by ") + signal_name(signals.stop_signal()) +
        " after " + std::to_string(done) + " of " + std::to_string(steps) +
        (steps == 1 ? " step" : " steps") + ": nothing measured; the throwaway run is removed";
    if (json)
      io.out << nlohmann::json{{"status", "stopped"},
                               {"signal", signal_name(signals.stop_signal())},
                               {"step", done},
                               {"steps", steps},
                               {"message", message}}
                    .dump()
             << std::endl;
    io.err << "spillway-worker: " << message << std::endl;
    return 0;
  }
  if (!measured.ok()) return report_failure(io, json, measured.status());
  // The throwaway run planned its own N steps; the plan shown is for the user's job, whose steps
  // (from epochs, the same sequences) set its ETA.
  Plan plan = (*trainer)->plan();
  const int64_t job_steps =
      asked.steps > 0
          ? asked.steps
          : std::max<int64_t>(
                1, static_cast<int64_t>(std::ceil(asked.epochs * (*trainer)->batches_per_epoch())));
  plan.step.total_steps = job_steps;
  plan.step.eta_s = plan.step.step_s * static_cast<double>(job_steps);
  const FiguresVersusPlan versus = compare_figures(predicted_figures(plan), *measured);
  if (json) {
    // A measured event with the plan it was held against.
    io.out << to_json(MeasuredEvent{steps, *measured, versus, plan}).dump() << std::endl;
    return 0;
  }
  print_plan(io.out, plan);
  io.out << "measured over "
         << (steps > 1 ? std::to_string(steps - 1) + " steps after the first"
                       : std::string("1 step"))
         << ", against the plan:\n";
  char line[160];
  std::snprintf(line, sizeof(line), "  %-18s %14s %14s %10s\n", "", "predicted", "measured",
                "ratio");
  io.out << line;
  const std::pair<StepFigure, const char*> rows[] = {
      {StepFigure::kStepS, "step"},
      {StepFigure::kTokensPerS, "tokens/s"},
      {StepFigure::kPeakHbmBytes, plan.on_cpu() ? "peak arena (CPU)" : "peak HBM"},
      {StepFigure::kPeakDramBytes, "peak DRAM"},
      {StepFigure::kH2dBytes, "H2D per step"},
      {StepFigure::kD2hBytes, "D2H per step"}};
  for (const auto& [figure, name] : rows) {
    const FigureComparison& r = versus[figure];
    std::snprintf(line, sizeof(line), "  %-18s %14s %14s %10s\n", name,
                  figure_text(figure, r.predicted).c_str(), figure_text(figure, r.measured).c_str(),
                  r.ratio ? num(*r.ratio, "%.2f").c_str() : "-");
    io.out << line;
  }
  io.out << (plan.on_cpu()
                 ? "  (the CPU backend's arena is part of DRAM, not measured apart; "
                   "DRAM measured: the\n"
                 : "  (HBM measured: all device memory in use, CUDA context and libraries "
                   "included; DRAM measured: the\n")
         << "  process's peak resident set, data and libraries included; the plan counts the "
            "engine's own)\n";
  return 0;
}

}  // namespace

void print_plan(std::ostream& out, const Plan& plan) {
  auto row = [&](const std::string& name, const std::string& value) {
    out << "  " << name << std::string(name.size() < 18 ? 18 - name.size() : 0, ' ') << " " << value
        << "\n";
  };
  const PlanModel& model = plan.model;
  const double params = model.parameters;
  const std::string& device = plan.machine.device;
  out << model.architecture << " ("
      << (params >= 1e9 ? num(params / 1e9, "%.2f B") : num(params / 1e6, "%.1f M"))
      << " parameters, " << model.layers << " layers) on " << plan.backend
      << (device.empty()
              ? ""
              : " (" + device +
                    (plan.machine.attention.empty() ? std::string()
                                                    : ", attention on " + plan.machine.attention) +
                    ")")
      << ": " << (plan.fits ? "fits" : "does not fit") << "\n";
  // The CPU backend's device is an arena in DRAM (counted in DRAM's needs too), not HBM.
  const char* device_name = plan.on_cpu() ? "arena (CPU)" : "HBM";
  for (const auto& [tier, name] : {std::pair{&plan.hbm, device_name}, std::pair{&plan.dram, "DRAM"},
                                   std::pair{&plan.ssd, "SSD"}}) {
    const double needed = static_cast<double>(tier->needed_bytes),
                 free = static_cast<double>(tier->free_bytes),
                 total = static_cast<double>(tier->total_bytes),
                 runtime = static_cast<double>(tier->runtime_bytes.value_or(0));
    // What the process holds there whatever the job (libraries, CUDA context, the data) is
    // outside the free memory already, but part of the peak a user sees.
    row(name, "needs " + gb(needed) +
                  (runtime > 0 ? " + about " + gb(runtime) + " runtime = " + gb(needed + runtime)
                               : std::string()) +
                  ", free " + (free > 0 ? gb(free) : "unbounded") + ", total " +
                  (total > 0 ? gb(total) : "unbounded"));
  }
  // Where the blocks' master weights, gradients and AdamW moments live: "first 22 of 34 blocks in
  // HBM (70.1 GB): the embedding and layers 0-20, as many as fit ...".
  const PlanState& state = plan.state;
  if (state.blocks > 0) {
    row("state", state.hbm_blocks > 0
                     ? "first " + std::to_string(state.hbm_blocks) + " of " +
                           std::to_string(state.blocks) + " blocks in " + device_name + " (" +
                           gb(static_cast<double>(state.hbm_bytes)) + "): " + state.why
                     : state.why);
    // "blocks 0-4 (the embedding and layers 0-3) in DRAM; blocks 5-8 (...) with the master in
    // DRAM and the moments on the SSD: ...": where the host keeps each block's master and moments.
    if (!state.host_why.empty()) row("host state", state.host_why);
  }
  // The GPUs (or CPU ranks) of a data-parallel step: "2 (0, 1), NCCL 0.012 s a step exposed".
  const PlanDevices& devices = plan.devices;
  const int ranks = std::max(devices.count, 1);
  if (ranks > 1 && plan.on_cpu()) {
    row("CPU ranks", std::to_string(ranks) + ", sharing the host's cores");
  } else if (ranks > 1) {
    std::string ids;
    for (size_t i = 0; i < devices.indices.size(); ++i)
      ids += (i ? ", " : "") + std::to_string(devices.indices[i]);
    row("GPUs", std::to_string(ranks) + (ids.empty() ? "" : " (" + ids + ")") + ", NCCL " +
                    num(devices.nccl_s, "%.3f s") + " a step exposed (" + gb(devices.nccl_bytes) +
                    " reduce-scattered per GPU)");
  }
  // Past one machine: "4, each as this one holding a quarter of the host state; 0.210 s a step
  // exposed, 38.4 GB per machine over 12.5 GB/s of network (gradients reduced, weights
  // broadcast)".
  if (devices.machines > 1) {
    const std::string machines = std::to_string(devices.machines) +
                                 ", each as this one holding its blocks' host state (the plan's "
                                 "DRAM and SSD are the fullest machine's)";
    // On the CPU backend the collectives go through the rendezvous, which the plan does not time.
    row("machines", plan.machine.network_bytes_per_s > 0
                        ? machines + "; " + num(devices.nccl_s, "%.3f s") + " a step exposed (" +
                              gb(devices.network_bytes) + " per machine over " +
                              gb(plan.machine.network_bytes_per_s) +
                              "/s of network: gradients reduced, weights broadcast)"
                        : machines + "; gradients and weights through the rendezvous (not timed)");
  }
  const std::string per_device =
      (ranks > 1 ? " x " + std::to_string(ranks) + (plan.on_cpu() ? " ranks" : " GPUs") : "") +
      (devices.machines > 1 ? " x " + std::to_string(devices.machines) + " machines" : "");
  const PlanStep& s = plan.step;
  // "of 20 of 33 layers on the device, the rest in host memory": the planner's trade (planner.h).
  const int checkpoint_layers = plan.model.layers + 1;
  const bool split = plan.checkpoints_on_device && state.device_checkpoint_layers >= 0 &&
                     state.device_checkpoint_layers < checkpoint_layers;
  const std::string checkpoints = split ? "of " + std::to_string(state.device_checkpoint_layers) +
                                              " of " + std::to_string(checkpoint_layers) +
                                              " layers on the device, the rest in host memory"
                                  : plan.checkpoints_on_device ? "on the device"
                                                               : "in host memory";
  row("tokens per step", thousands(s.tokens) + " (" + std::to_string(plan.micro_batch_size) +
                             " x " + std::to_string(plan.grad_accum) + " x " +
                             std::to_string(plan.seq_len) + per_device + "), checkpoints " +
                             checkpoints);
  // What the backward recomputes (planner.h, saved activations): "the forward of layers 0-4 from
  // their checkpoints; the MLP of layers 5-31 (the rest of their activations saved in HBM)".
  if (!plan.on_cpu() || state.saved_activation_layers + state.mlp_recompute_layers > 0)
    row("recompute", recompute_text(plan, plan.on_cpu() ? "the arena" : "HBM"));
  row("step", num(s.step_s, "%.2f s") + ": compute " + num(s.compute_s, "%.2f s") + ", link " +
                  num(s.link_s, "%.2f s") + ", AdamW " + num(s.adamw_s, "%.2f s") +
                  (s.gpu_adamw_s > 0
                       ? " on the CPU, " + num(s.gpu_adamw_s, "%.2f s") + " on the GPU (in compute)"
                       : std::string()) +
                  ", optimizer visible " + num(s.optimizer_visible_s, "%.2f s") +
                  (s.ssd_s > 0 ? ", SSD " + num(s.ssd_s, "%.2f s") : "") +
                  (s.calibrated ? "" : " (uncalibrated: a rough estimate)"));
  row("tokens/s",
      thousands(s.tokens_per_s) + " (" + num(s.model_tflops, "%.3g model TFLOPS") + ")");
  if (s.total_steps > 0) {
    const double eta = s.eta_s;
    row("ETA", (eta >= 3600 ? num(eta / 3600, "%.1f h")
                : eta >= 60 ? num(eta / 60, "%.1f min")
                            : num(eta, "%.0f s")) +
                   " for " + std::to_string(s.total_steps) + " steps");
  }
  row("bottleneck", s.bottleneck);
  if (plan.suggestion) {
    const PlanSuggestion& g = *plan.suggestion;
    if (g.fits) row("suggested", suggestion_line(g, per_device));
    row(g.fits ? "" : "suggested", g.why);
  }
}

int run_plan(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--measure", "--machines", "--network-gbps"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool json = args->has("--json");
  if (args->positional.size() != 1) return report_failure(io, json, invalid_argument(kUsage));
  auto job = load_job(args->positional[0]);
  if (!job.ok()) return report_failure(io, json, job.status());
  // The run folder the job names may hold a killed writer's unfinished checkpoint: removed here
  // when no worker holds the folder, as the next run over it would.
  if (!job->run_dir.empty()) remove_unfinished_checkpoints_if_idle(job->run_dir);
  // Past one machine: M machines of this one's shape, and the network each has (Gb/s).
  auto machines = args->integer("--machines", 1, 1, 4096);
  if (!machines.ok()) return report_failure(io, json, machines.status().with_context("plan"));
  auto network = args->number("--network-gbps", 0);
  if (!network.ok() || *network < 0)
    return report_failure(io, json,
                          network.ok()
                              ? invalid_argument("plan: --network-gbps must not be negative")
                              : network.status().with_context("plan"));
  if (args->get("--network-gbps") && *machines == 1)
    return report_failure(io, json,
                          invalid_argument("plan: --network-gbps needs --machines 2 or more"));
  if (auto text = args->get("--measure")) {
    if (*machines > 1)
      return report_failure(io, json,
                            invalid_argument("plan: --measure runs on this machine alone; "
                                             "measure each machine's part with train"));
    const auto steps = parse_integer("--measure", *text, 1, kMaxMeasureSteps);
    if (!steps.ok()) return report_failure(io, json, steps.status().with_context("plan"));
    return measure_plan(*job, static_cast<int>(*steps), json, io);
  }
  Result<ModelConfig> config = !job->model_path.empty() ? ModelConfig::load(job->model_path)
                               : !job->init_preset.empty()
                                   ? model_preset(job->init_preset)
                                   : ModelConfig::from_json(job->init_config);
  if (!config.ok()) return report_failure(io, json, config.status());
  std::string reason;
  auto machine =
      probe_for_backend(job->ssd_dir.empty() ? "." : job->ssd_dir, job->backend, &reason);
  if (!machine.ok()) return report_failure(io, json, machine.status());
  // The CPU backend's GEMMs and attention at this job's shapes; without them (no memory for the
  // probe's buffers) the plan says its step time is uncalibrated.
  if (!machine->backend_facts().gpu)
    (void)probe_cpu_compute(*config, job->seq_len,
                            static_cast<int64_t>(job->micro_batch_size) * job->seq_len, &*machine);
  machine->machines = static_cast<int>(*machines);
  machine->network_bytes_per_s = *network * 1e9 / 8;
  // Steps from epochs need the dataset size; without reading it the plan assumes `steps`.
  const int64_t steps = job->steps > 0 ? job->steps : 0;
  Plan plan = make_plan(*config, *job, *machine, steps);
  plan.backend_reason = reason;
  if (json) {
    io.out << to_json(plan).dump() << std::endl;
  } else {
    print_plan(io.out, plan);
    io.out.flush();
  }
  // Exit 3 always comes with a line on stderr, --json or not (a script that reads only the exit
  // code and stderr learns why).
  if (!plan.fits)
    io.err << "spillway-worker: " << args->positional[0] << ": does not fit: " << plan.reason
           << "\n";
  return plan.fits ? 0 : 3;
}

}  // namespace spillway::worker
