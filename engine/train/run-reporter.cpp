#include "train/run-reporter.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "core/file-util.h"
#include "telemetry/span.h"

namespace spillway {
namespace fs = std::filesystem;

namespace {

// FNV-1a over the file: a content hash so that "same data" can be checked between runs.
std::string file_hash(const std::string& path) {
  auto f = MappedFile::open(path);
  if (!f.ok()) return "";
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < f->size(); ++i) h = (h ^ f->data()[i]) * 1099511628211ull;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

nlohmann::json hardware_json() {
  nlohmann::json j;
  j["cpu_cores"] = std::thread::hardware_concurrency();
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.starts_with("model name")) {
      j["cpu"] = line.substr(line.find(':') + 2);
      break;
    }
  }
  if (auto total = read_meminfo().total_bytes) j["dram_bytes"] = *total;
  return j;
}

RunInfo run_info(const TrainJob& job, const RunAssembly& run, const TrainerHooks& hooks) {
  RunInfo info;
  info.name = job.name;
  info.job_json = hooks.job_json;
  info.model_name = !job.model_path.empty()
                        ? fs::path(job.model_path).filename().string()
                        : (!job.init_preset.empty() ? job.init_preset : "custom-init");
  info.model_path = job.model_path;
  info.dataset = job.train_path;
  info.dataset_hash = file_hash(job.train_path);
  info.hardware_json = hardware_json().dump();
  info.software_json =
      nlohmann::json{
          {"spillway", "0.1.0"}, {"compiler", __VERSION__}, {"backend", run.backend->name()}}
          .dump();
  info.run_dir = job.run_dir;
  info.id = hooks.run_id;
  return info;
}

}  // namespace

RunReporter::RunReporter(const TrainJob& job, RunAssembly& run, const TrainerHooks& hooks)
    : job_(job), run_(run), on_log_(hooks.on_log) {}

Result<std::unique_ptr<RunReporter>> RunReporter::create(const TrainJob& job, RunAssembly& run,
                                                         const TrainerHooks& hooks) {
  std::unique_ptr<RunReporter> r(new RunReporter(job, run, hooks));
  RunRecorderOptions ro;
  ro.db_path = job.db_path;
  ro.on_warning = hooks.on_warning;
  // A resume continues its run: one row, one folder (history/run-recorder.h).
  std::optional<ResumePoint> resume;
  if (!run.resumed_from.empty())
    resume = ResumePoint{run.resumed_from, run.start.step, run.start.run_id};
  SPW_ASSIGN_OR_RETURN(r->rec_,
                       RunRecorder::create(run_info(job, run, hooks), std::move(ro), resume));
  if (hooks.on_run_folder) SPW_RETURN_IF_ERROR(hooks.on_run_folder(r->run_dir()));
  TelemetrySamplerOptions so;
  so.ssd_path = !job.ssd_dir.empty() ? job.ssd_dir : r->run_dir();
  RunRecorder* rec = r->rec_.get();
  so.on_sample = [rec](double t, const nlohmann::json& sample) { rec->sample(t, sample); };
  if (run.backend->facts().gpu) {
    // Each GPU's own HBM use and NVML's utilisation, PCIe, power and temperature in each sample:
    // rank 0 is run.backend, ranks 1..N-1 run.peers, each named to NVML by its PCI address and in
    // the sample by its CUDA index (run.devices). The hbm tier's device figures are the sum over
    // the GPUs, as its counters and capacity are (run-assembly.cpp).
    std::vector<compute::Backend*> ranks = {run.backend.get()};
    for (const auto& peer : run.peers) ranks.push_back(peer.get());
    const auto memory_of = [](compute::Backend* b) -> std::optional<DeviceMemory> {
      size_t free_bytes = 0, total_bytes = 0;
      if (!b->device_memory_info(&free_bytes, &total_bytes).ok()) return std::nullopt;
      return DeviceMemory{total_bytes, free_bytes};
    };
    for (size_t r = 0; r < ranks.size(); ++r) {
      compute::Backend* b = ranks[r];
      const int index = r < run.devices.size() ? run.devices[r] : b->device().ordinal();
      so.gpus.push_back(
          {index, b->device_info().pci_bus_id, [b, memory_of] { return memory_of(b); }});
    }
    so.device_memory = [ranks, memory_of]() -> std::optional<DeviceMemory> {
      DeviceMemory sum;
      for (compute::Backend* b : ranks) {
        const std::optional<DeviceMemory> m = memory_of(b);
        if (!m) return std::nullopt;
        sum.total_bytes += m->total_bytes;
        sum.free_bytes += m->free_bytes;
      }
      return sum;
    };
  }
  r->sampler_ = std::make_unique<TelemetrySampler>(run.counters, rec->events(), so);
  if (!r->sampler_->gpu_status().ok()) r->log(LogLevel::kWarn, r->sampler_->gpu_status().message());
  if (hooks.on_started) hooks.on_started(r->run_id(), r->run_dir());
  r->attach_spans();
  return r;
}

void RunReporter::attach_spans() {
  const int L = run_.state->config().num_layers;
  // Called from every GPU's thread and the optimizer's at once: it reads an atomic and writes
  // through the recorder, whose span() is thread-safe (a line written whole under a lock).
  auto sink = [this, L](std::optional<int> device, size_t b, const char* phase, double start,
                        double end) {
    if (spans_on_.load(std::memory_order_relaxed))
      rec_->span(block_span(b, L, phase, start, end, device));
  };
  auto clock = [this] { return rec_->now_s(); };
  run_.engine->set_span_sink(sink, clock);
  run_.optimizer->set_span_sink(
      [sink](size_t b, const char* phase, double start, double end) {
        sink(std::nullopt, b, phase, start, end);  // the host's: no device
      },
      clock);
}

void RunReporter::log(LogLevel level, const std::string& message) {
  rec_->log(level, message);
  if (on_log_) on_log_(message);
}

Status RunReporter::training(int64_t step) {
  StateEvent training = StateEvent::at_step("training", step);
  training.run_id = run_id();
  training.total_steps = run_.total_steps;
  training.parameters = run_.parameters;
  training.device_bytes = run_.engine->memory_plan().capacity_bytes;
  // "dram+ssd": some blocks in each (the counts are in the plan's state).
  const BlockTiers& tiers = run_.placement.blocks;
  const size_t blocks = tiers.blocks();
  training.optimizer_tier = tiers.dram == blocks ? "dram" : tiers.dram == 0 ? "ssd" : "dram+ssd";
  training.master_tier = tiers.ssd == 0 ? "dram" : tiers.ssd == blocks ? "ssd" : "dram+ssd";
  training.ssd_folder = run_.ssd_folder;
  SPW_RETURN_IF_ERROR(rec_->state(training));
  plan_ = make_plan(run_.state->config(), job_, run_.machine, run_.total_steps, true,
                    data_shape(run_.train_ds));
  rec_->plan(plan_);
  return {};
}

StepMark RunReporter::begin_step() {
  StepMark m;
  m.t0 = std::chrono::steady_clock::now();
  m.h2d_bytes = run_.engine->h2d_bytes();
  m.d2h_bytes = run_.engine->d2h_bytes();
  m.start_s = rec_->now_s();
  const bool spans = m.start_s - last_span_step_ >= 1.0;
  spans_on_ = spans;
  if (spans) last_span_step_ = m.start_s;
  return m;
}

void RunReporter::end_step(const StepMark& mark, const StepReport& s) {
  const double dt =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - mark.t0).count();
  size_t free_bytes = 0, total_bytes = 0;
  uint64_t device_used = 0;  // the CPU backend's "device" is host memory: counted in DRAM
  if (run_.backend->facts().gpu && run_.backend->device_memory_info(&free_bytes, &total_bytes).ok())
    device_used = total_bytes - free_bytes;
  figures_.add_step(dt, s.step_tokens, device_used, run_.engine->h2d_bytes() - mark.h2d_bytes,
                    run_.engine->d2h_bytes() - mark.d2h_bytes);
  const double tps = s.step_tokens / std::max(dt, 1e-9);
  const double tflops = 6.0 * static_cast<double>(run_.parameters) * tps / 1e12;  // PaLM appendix B
  rec_->span({"step", std::nullopt, "compute", mark.start_s, mark.computed_s, std::nullopt});
  rec_->step(
      StepEvent{s.step, s.loss, s.lr, s.stats.grad_norm, s.tokens, tps, tflops, dt, s.total_steps,
                s.stats.prev_update_ssd_read_bytes, s.stats.prev_update_ssd_write_bytes},
      MetricRow{s.step, s.loss, s.lr, s.stats.grad_norm, s.tokens, tps, tflops, rec_->now_s()});
  if (job_.log_every > 0 && s.step % job_.log_every == 0) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "step %lld/%lld  loss %.5f  lr %.3g  grad_norm %.3f  %.0f tokens/s",
                  static_cast<long long>(s.step), static_cast<long long>(s.total_steps), s.loss,
                  s.lr, s.stats.grad_norm, tps);
    log(LogLevel::kInfo, line);
  }
}

void RunReporter::eval(int64_t step, double loss, double eval_s) {
  const double ppl = std::exp(loss);
  rec_->eval(EvalEvent{step, loss, ppl, eval_s}, EvalRow{step, loss, ppl, rec_->now_s()});
  log(LogLevel::kInfo, "eval at step " + std::to_string(step) + ": loss " + std::to_string(loss) +
                           ", perplexity " + std::to_string(ppl));
}

Status RunReporter::checkpointing(int64_t step) {
  return rec_->state(StateEvent::at_step("checkpointing", step));
}

Status RunReporter::checkpointed(int64_t step, const std::string& dir, uint64_t bytes,
                                 double write_s) {
  SPW_RETURN_IF_ERROR(rec_->checkpoint(step, dir, bytes, write_s));
  SPW_RETURN_IF_ERROR(rec_->state(StateEvent::at_step("training", step)));
  log(LogLevel::kInfo, "checkpoint " + dir);
  return {};
}

void RunReporter::exported(const std::string& dir, bool with_tokenizer) {
  rec_->exported(ExportEvent{dir, with_tokenizer});
  if (!with_tokenizer) {
    log(LogLevel::kWarn,
        "exported " + dir +
            " without a tokenizer: the model has none (it trained on pre-tokenized "
            "data); copy the tokenizer files into it before loading it with transformers");
  } else {
    log(LogLevel::kInfo, "exported " + dir);
  }
}

StepFigures RunReporter::report_figures() {
  const StepFigures measured = figures_.figures();
  if (figures_.steps() == 0) return measured;
  const StepFigures predicted = predicted_figures(plan_);
  rec_->measured(MeasuredEvent{figures_.steps(), measured, compare_figures(predicted, measured),
                               std::nullopt});
  rec_->step_figures(predicted, measured);
  return measured;
}

Status RunReporter::finish(RunStatus status, const FinalFigures& figures, StateEvent state_extra) {
  return rec_->finish(status, figures, std::move(state_extra));
}

Status RunReporter::fail(const Status& why, const FinalFigures& figures) {
  return rec_->fail(why, figures);
}

}  // namespace spillway
