#include "train/trainer.h"


#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "compute/backend-loader.h"
#include "core/file-util.h"
#include "core/thread-pool.h"
#include "data/batch-iterator.h"
#include "data/dataset.h"
#include "data/dataset-reader.h"
#include "data/tokenizer.h"
#include "history/run-recorder.h"
#include "model/safetensors.h"
#include "telemetry/sampler.h"
#include "telemetry/telemetry-sampler.h"
#include "train/checkpoint.h"
#include "train/export.h"
#include "train/inference.h"
#include "train/machine-probe.h"
#include "train/model-state.h"
#include "train/optimizer.h"
#include "train/optimizer-state.h"
#include "train/planner.h"
#include "train/run-figures.h"
#include "train/scratch-folder.h"
#include "train/streaming-engine.h"

namespace spillway {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

}  // namespace

struct Trainer::Impl {
  TrainJob job;
  TrainerHooks hooks;
  Trainer* owner = nullptr;
  std::string run_id, run_dir;
  std::unique_ptr<RunRecorder> rec;  // the run's id, folder, events.jsonl and runs.db rows
  std::unique_ptr<TelemetrySampler> sampler;
  TierCounters counters;
  std::unique_ptr<Tokenizer> tokenizer;  // null: the model has none, the data is pre-tokenized
  std::string tokenizer_source;          // what export copies the tokenizer from; empty for none
  std::unique_ptr<compute::Backend> backend;
  std::string backend_reason;  // which backend and why, for the log
  std::unique_ptr<ModelState> state;
  std::unique_ptr<StreamingEngine> engine;
  std::unique_ptr<OptimizerStateStore> opt_state;
  std::unique_ptr<Optimizer> optimizer;
  TierPlacement placement;
  std::string ssd_folder;
  std::unique_ptr<ScratchFolder> scratch;  // ssd_folder, removed when the run ends

  ~Impl() {
    sampler.reset();  // its thread reads counters and the backend, declared after it
    optimizer.reset();
    opt_state.reset();
    scratch.reset();
  }
  Dataset train_ds, eval_ds;
  std::optional<BatchIterator> iter;
  TrainerState progress;
  int64_t total_steps = 0;
  double last_eval = std::nan("");
  uint64_t parameters = 0;
  Plan plan;                    // this run's plan, made when training starts
  StepFigureRecorder figures;  // what the steps measured, to hold against the plan
  Clock::time_point started = Clock::now();
  double resumed_elapsed_s = 0;  // the elapsed_s of the checkpoint this run resumed from
  std::string resumed_from;      // the checkpoint folder it resumed from ("" for a fresh run)
  bool measuring = false;        // measure(): a throwaway run, so a stop writes no checkpoint

  // The run's training time so far: this process's, plus that of the runs it resumed from.
  double elapsed_s() const { return resumed_elapsed_s + seconds_since(started); }

  void log(LogLevel level, const std::string& msg) {
    if (rec) rec->log(level, msg);
    if (hooks.on_log) hooks.on_log(msg);
  }

  FinalFigures final_figures() const {
    FinalFigures f;
    f.final_loss = progress.last_loss;
    f.final_step = progress.step;
    f.tokens = progress.tokens;
    return f;
  }

  // Records the failure (before the run is recorded there is nothing to record it in).
  Status fail(const Status& st) {
    if (!rec) return st;
    FinalFigures f = final_figures();
    f.final_loss.reset();
    return rec->fail(st, f);
  }

  // What `plan` refuses, refused before anything is allocated: a job that does not fit would
  // otherwise grow until the machine runs out of memory, and a seq_len past the model's positions
  // would train without a word. Only the memory and the job are checked here (the figures that
  // predict the step come later, with the GPU's probe).
  Status check_fits(const ModelConfig& config, const MemInfo& mem) const {
    SPW_RETURN_IF_ERROR(check_positions(config, job));
    MachineProbe m;
    m.backend = backend->name();
    m.dram_total_bytes = mem.total_bytes.value_or(0);
    m.dram_available_bytes = mem.available_bytes.value_or(UINT64_MAX);  // unknown: not the limit
    if (m.backend != "cpu") {
      size_t free_bytes = 0, total_bytes = 0;
      if (backend->device_memory_info(&free_bytes, &total_bytes).ok()) {
        m.device_total_bytes = total_bytes;
        m.device_free_bytes = free_bytes;
      }
    }
    if (!job.ssd_dir.empty()) {
      const FsSpace space = read_fs_space(job.ssd_dir);  // a folder not made yet: not the limit
      m.ssd_total_bytes = space.total_bytes.value_or(UINT64_MAX);
      m.ssd_free_bytes = space.free_bytes.value_or(UINT64_MAX);
    }
    const Plan plan = make_plan(config, job, m, 1, /*with_suggestion=*/false);
    if (plan.fits) return {};
    return out_of_memory("the job does not fit: " + plan.reason +
                         " (spillway-worker plan shows the whole plan)");
  }

  Status load_model() {
    ModelConfig config;
    if (!job.model_path.empty()) {
      SPW_ASSIGN_OR_RETURN(config, ModelConfig::load(job.model_path));
    } else if (!job.init_preset.empty()) {
      SPW_ASSIGN_OR_RETURN(config, model_preset(job.init_preset));
    } else {
      auto c = ModelConfig::from_json(job.init_config);
      if (!c.ok()) return c.status().with_context("job.json: model.init");
      config = *c;
    }
    const MemInfo mem = mem_at_start = read_meminfo();  // one reading for the fit check, the placement and the plan
    SPW_RETURN_IF_ERROR(check_fits(config, mem));
    ParameterLayout layout = ParameterLayout::build(config);
    parameters = layout.parameter_count();
    placement = place_tiers(config, job, mem.available_bytes.value_or(0));
    if (placement.optimizer_on_ssd && job.ssd_dir.empty())
      return invalid_argument("the optimizer state does not fit in DRAM: set placement.ssd_dir to a folder on an SSD");
    SPW_ASSIGN_OR_RETURN(state, ModelState::create(layout, !placement.optimizer_on_ssd));
    if (!job.model_path.empty()) {
      SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(job.model_path));
      SPW_RETURN_IF_ERROR(state->load_weights(weights));
    } else {
      state->init_random(job.init_seed);
    }
    // With the master on the SSD, ModelState's master buffer is the compute copy of the weights.
    counters.set(Tier::kDram, placement.master_on_ssd ? Category::kWeights : Category::kMaster,
                 static_cast<int64_t>(state->weight_bytes() / 2));
    counters.set(Tier::kDram, Category::kGradients, static_cast<int64_t>(state->weight_bytes() / 2));
    counters.set(Tier::kDram, Category::kOptimizer, static_cast<int64_t>(state->optimizer_bytes()));
    if (placement.optimizer_on_ssd) {
      // Working state, not a checkpoint: a scratch folder per run, removed when the run ends (or,
      // after a SIGKILL, by the next run over the same ssd_dir).
      SPW_ASSIGN_OR_RETURN(scratch, ScratchFolder::create(job.ssd_dir, "spillway-state-" + RunStore::new_run_id(), "spillway-state-"));
      SsdConfig sc;
      sc.folder = ssd_folder = scratch->path();
      SPW_ASSIGN_OR_RETURN(opt_state, make_ssd_state(*state, sc, placement.master_on_ssd, &counters));
    } else {
      opt_state = make_dram_state(*state);
    }
    return {};
  }

  // model.tokenizer, else the model folder's own. A model folder without tokenizer files (or an
  // "init" model that names none) has no tokenizer: it trains on pre-tokenized data only.
  Status load_tokenizer() {
    tokenizer_source = !job.tokenizer_path.empty() ? job.tokenizer_path : job.model_path;
    if (job.tokenizer_path.empty() && !tokenizer_source.empty() && !has_tokenizer_files(tokenizer_source))
      tokenizer_source.clear();
    if (tokenizer_source.empty()) return {};
    SPW_ASSIGN_OR_RETURN(tokenizer, load_model_tokenizer(tokenizer_source));
    if (tokenizer->vocab_size() > state->config().vocab_size)
      return invalid_argument("the tokenizer has " + std::to_string(tokenizer->vocab_size()) + " tokens but the model only " +
                              std::to_string(state->config().vocab_size) + "; pick a matching tokenizer or model");
    return {};
  }

  // Dataset::load with the tokenizer, or without one: pre-tokenized data only.
  Result<Dataset> load_dataset(const std::string& path, const DatasetOptions& opts) const {
    if (tokenizer) return Dataset::load(path, *tokenizer, opts);
    SPW_ASSIGN_OR_RETURN(DatasetRecords records, read_dataset_records(path, opts.read));
    if (records.format != DatasetFormat::kPreTokenized) {
      const std::string why = !job.model_path.empty()
                                  ? "the model folder " + job.model_path + " has no tokenizer files (tokenizer.json or tokenizer.model)"
                                  : "a model made with \"init\" has no tokenizer unless model.tokenizer names one";
      return invalid_argument(path + ": " + dataset_format_name(records.format) + " data needs a tokenizer, and " + why +
                              "; set model.tokenizer (a tokenizer.json, tokenizer.model, a model folder, or \"builtin:bytes\") "
                              "or train on pre-tokenized data (data.format \"pretokenized\": JSONL with input_ids)");
    }
    return Dataset::from_records(std::move(records), path, opts);
  }

  Status load_data() {
    SPW_RETURN_IF_ERROR(load_tokenizer());
    // The options `eval` and the GUI's preview read data with too (train-job.h).
    SPW_ASSIGN_OR_RETURN(const DatasetOptions opts, dataset_options(job, state->config()));
    SPW_ASSIGN_OR_RETURN(Dataset all, load_dataset(job.train_path, opts));
    if (!job.eval_path.empty()) {
      train_ds = all;
      SPW_ASSIGN_OR_RETURN(eval_ds, load_dataset(job.eval_path, opts));
    } else if (job.eval_fraction > 0) {
      auto split = all.split_tail(job.eval_fraction);
      if (!split.ok()) return split.status().with_context(job.train_path);
      train_ds = split->first;
      eval_ds = split->second;
    } else {
      train_ds = all;
    }
    if (train_ds.empty()) return invalid_argument(job.train_path + ": no training sequences (is the file empty?)");
    const int rows = job.micro_batch_size * job.grad_accum;
    SPW_ASSIGN_OR_RETURN(BatchIterator it, BatchIterator::create(train_ds, rows, job.data_seed, job.shuffle));
    iter.emplace(std::move(it));
    total_steps = job.steps > 0 ? job.steps
                                : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(job.epochs * iter->batches_per_epoch())));
    return {};
  }

  Status setup_run() {
    RunInfo info;
    info.name = job.name;
    info.job_json = hooks.job_json;
    info.model_name = !job.model_path.empty() ? fs::path(job.model_path).filename().string()
                                              : (!job.init_preset.empty() ? job.init_preset : "custom-init");
    info.model_path = job.model_path;
    info.dataset = job.train_path;
    info.dataset_hash = file_hash(job.train_path);
    info.hardware_json = hardware_json().dump();
    info.software_json = nlohmann::json{{"spillway", "0.1.0"}, {"compiler", __VERSION__}, {"backend", backend->name()}}.dump();
    info.run_dir = job.run_dir;
    info.id = hooks.run_id;
    RunRecorderOptions ro;
    ro.db_path = job.db_path;
    ro.on_warning = hooks.on_warning;
    // A resume continues its run: one row, one folder (history/run-recorder.h).
    std::optional<ResumePoint> resume;
    if (!resumed_from.empty()) resume = ResumePoint{resumed_from, progress.step};
    SPW_ASSIGN_OR_RETURN(rec, RunRecorder::create(std::move(info), std::move(ro), resume));
    run_id = rec->id();
    run_dir = rec->dir();
    if (hooks.on_run_folder) SPW_RETURN_IF_ERROR(hooks.on_run_folder(run_dir));
    TelemetrySamplerOptions so;
    so.ssd_path = !job.ssd_dir.empty() ? job.ssd_dir : run_dir;
    RunRecorder* r = rec.get();
    so.on_sample = [r](double t, const nlohmann::json& sample) { r->sample(t, sample); };
    if (backend->name() != "cpu") {
      // The GPU's own HBM use and NVML's utilisation, PCIe, power and temperature in each sample.
      so.gpu_pci_bus_id = backend->device_info().pci_bus_id;
      compute::Backend* b = backend.get();
      so.device_memory = [b]() -> std::optional<DeviceMemory> {
        size_t free_bytes = 0, total_bytes = 0;
        if (!b->device_memory_info(&free_bytes, &total_bytes).ok()) return std::nullopt;
        return DeviceMemory{total_bytes, free_bytes};
      };
    }
    sampler = std::make_unique<TelemetrySampler>(counters, rec->events(), so);
    if (!sampler->gpu_status().ok()) log(LogLevel::kWarn, sampler->gpu_status().message());
    if (hooks.on_started) hooks.on_started(run_id, run_dir);
    return {};
  }

  Status create_backend() {
    compute::BackendOptions options;
    options.kind = job.backend;
    options.device_memory_bytes = job.device_memory_bytes;
    auto choice = compute::make_backend(options);
    if (!choice.ok()) return choice.status().with_context("placement.backend \"" + job.backend + "\"");
    backend = std::move(choice->backend);
    backend_reason = std::move(choice->reason);
    // The HBM tier's capacity: the GPU's memory; the CPU backend's "device" only when capped
    // (uncapped, it is DRAM).
    counters.set_capacity(Tier::kHbm, backend->name() == "cpu" ? job.device_memory_bytes : backend->device_info().total_bytes);
    return {};
  }

  // What the run's plan is made with (train_loop emits it): the host's figures, and on a GPU the
  // GPU's own, measured before build_engine because probe_device borrows the backend's workspace
  // and about 1 GiB of device memory that the engine's arena would otherwise hold. The plan is
  // advice, so a failed GPU probe does not fail the run: the plan falls back to the host's
  // figures and probe_note says why.
  MachineProbe machine;
  std::string probe_note;
  MemInfo mem_at_start;  // read before the model state was allocated
  void probe_for_plan() {
    machine = probe_machine(job.ssd_dir);  // the disk is probed only when the run uses one
    // The DRAM the job had before it allocated its own state: read now, the plan would count that
    // state as taken, find the job too big for what is left and place the tiers differently.
    if (mem_at_start.available_bytes) machine.dram_available_bytes = *mem_at_start.available_bytes;
    machine.backend = backend->name();
    if (machine.backend == "cpu") return;  // its compute and link are the host's, measured above
    // 64 Mi parameters (1 GiB of AdamW state): far beyond the caches, as in a step, yet small
    // next to the model's own state, which is in DRAM already.
    constexpr size_t kAdamwProbeParams = size_t{64} << 20;
    Status st = probe_device(*backend, &machine);
    if (st.ok()) {
      auto rate = measure_adamw(kAdamwProbeParams);
      if (rate.ok()) machine.adamw_params_per_s = *rate;
      else st = rate.status();
    }
    if (!st.ok()) probe_note = "the plan uses estimated figures: probing the GPU failed: " + st.to_string();
  }

  Status build_engine() {
    StreamingConfig sc;
    sc.weight_slots = job.weight_slots;
    sc.micro_batch_size = job.micro_batch_size;
    sc.max_micro_batches = job.grad_accum;
    sc.seq_len = job.seq_len;
    SPW_ASSIGN_OR_RETURN(engine, StreamingEngine::create(*backend, *state, sc, &counters));
    AdamWConfig ac;
    ac.beta1 = job.beta1;
    ac.beta2 = job.beta2;
    ac.eps = job.eps;
    ac.weight_decay = job.weight_decay;
    optimizer = std::make_unique<Optimizer>(*state, ac, job.clip_grad_norm, opt_state.get());
    Optimizer* opt = optimizer.get();
    engine->set_weight_gate([opt](size_t b) { opt->wait_block(b); });
    return {};
  }

  // Timeline spans for the GUI, for about one step per second (a span per block and phase would
  // flood events.jsonl for small models that take many steps a second).
  std::atomic<bool> spans_on{false};
  double last_span_step = -1e9;
  void attach_spans() {
    const int L = state->config().num_layers;
    auto sink = [this, L](size_t b, const char* phase, double start, double end) {
      if (spans_on.load(std::memory_order_relaxed)) rec->span(block_span(b, L, phase, start, end));
    };
    auto clock = [this] { return rec->now_s(); };
    engine->set_span_sink(sink, clock);
    optimizer->set_span_sink(sink, clock);
  }

  StepBatch step_batch(const Batch& b) const {
    StepBatch s;
    s.micro_batches = job.grad_accum;
    s.micro_batch_size = job.micro_batch_size;
    s.seq_len = b.seq_len;
    s.input_ids = b.input_ids;
    s.labels = b.labels;
    return s;
  }

  Result<double> evaluate() {
    if (eval_ds.empty()) return std::nan("");
    SPW_ASSIGN_OR_RETURN(EvalResult r,
                         evaluate_dataset(*engine, eval_ds, job.grad_accum, job.micro_batch_size, job.eval_batches));
    return r.targets ? r.loss : std::nan("");
  }

  // A stop request that interrupted a step or an evaluation: checkpoint the last finished step
  // (after its optimizer update), then stop as the loop's own check does. A measuring run is
  // thrown away: it stops at once (a 7B checkpoint would take minutes to write and be deleted).
  Status stop_at_step() {
    if (!measuring) SPW_RETURN_IF_ERROR(checkpoint());
    return cancelled("stopped on request at step " + std::to_string(progress.step));
  }

  // run_eval, and when a stop request cuts the evaluation short, stop_at_step.
  Status eval_or_stop() {
    Status st = run_eval();
    return st.code() == ErrorCode::kCancelled ? stop_at_step() : st;
  }

  Status run_eval() {
    const auto t0 = Clock::now();
    SPW_ASSIGN_OR_RETURN(double loss, evaluate());
    if (std::isnan(loss)) return {};
    last_eval = loss;
    const double ppl = std::exp(loss);
    rec->eval(EvalEvent{progress.step, loss, ppl, seconds_since(t0)},
              EvalRow{progress.step, loss, ppl, rec->now_s()});
    log(LogLevel::kInfo, "eval at step " + std::to_string(progress.step) + ": loss " + std::to_string(loss) +
                             ", perplexity " + std::to_string(ppl));
    return {};
  }

  // `manual`: asked for (SIGUSR1, the app's Save checkpoint), kept by the keep-N rotation.
  Status checkpoint(bool manual = false) {
    optimizer->wait_all();
    SPW_RETURN_IF_ERROR(rec->state(StateEvent::at_step("checkpointing", progress.step)));
    const auto t0 = Clock::now();
    progress.data_cursor = iter->cursor().to_json();
    progress.elapsed_s = elapsed_s();
    SPW_RETURN_IF_ERROR(optimizer->status());
    progress.manual = manual;
    auto saved = save_checkpoint((fs::path(run_dir) / "checkpoints").string(), *state, progress, opt_state.get());
    progress.manual = false;
    SPW_ASSIGN_OR_RETURN(std::string dir, std::move(saved));
    prune_checkpoints((fs::path(run_dir) / "checkpoints").string(), job.keep_checkpoints);
    uint64_t bytes = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) bytes += e.is_regular_file() ? e.file_size() : 0;
    SPW_RETURN_IF_ERROR(rec->checkpoint(progress.step, dir, bytes, seconds_since(t0)));
    SPW_RETURN_IF_ERROR(rec->state(StateEvent::at_step("training", progress.step)));
    log(LogLevel::kInfo, "checkpoint " + dir);
    return {};
  }

  // A step whose loss or gradients are not finite has diverged: the run stops before the optimizer
  // spreads NaN through the weights (a learning rate of 1e300 trained on and exported a NaN model).
  // The weights in memory are the previous step's; the last checkpoint stays as it was.
  Status check_finite(const StepResult& r) const {
    double sumsq = 0;
    for (double s : r.grad_sumsq) sumsq += s;
    if (std::isfinite(r.loss()) && std::isfinite(sumsq)) return {};
    auto number = [](double v) {  // "nan", never "-nan"
      char b[32];
      std::snprintf(b, sizeof(b), "%g", std::isnan(v) ? std::fabs(v) : v);
      return std::string(b);
    };
    char lr[32];
    std::snprintf(lr, sizeof(lr), "%g", job.schedule.lr);
    return invalid_argument("step " + std::to_string(progress.step + 1) + " diverged: loss " + number(r.loss()) +
                            ", gradient norm " + number(std::sqrt(sumsq)) + "; lower train.lr (" + lr +
                            ") or raise train.warmup_steps, and resume from the last checkpoint");
  }

  // `h2d0`, `d2h0`: the engine's copy counters when the step began.
  void record_step(double step_s, int64_t tokens, uint64_t h2d0, uint64_t d2h0) {
    size_t free_bytes = 0, total_bytes = 0;
    uint64_t device_used = 0;  // the CPU backend's "device" is host memory: counted in DRAM
    if (backend->name() != "cpu" && backend->device_memory_info(&free_bytes, &total_bytes).ok())
      device_used = total_bytes - free_bytes;
    figures.add_step(step_s, tokens, device_used, engine->h2d_bytes() - h2d0, engine->d2h_bytes() - d2h0);
  }

  // The figures measured against the plan's, as the "measured" event and in runs.db.
  StepFigures report_figures() {
    const StepFigures measured = figures.figures();
    if (figures.steps() == 0) return measured;
    const StepFigures predicted = predicted_figures(plan);
    rec->measured(MeasuredEvent{figures.steps(), measured, compare_figures(predicted, measured), std::nullopt});
    rec->step_figures(predicted, measured);
    return measured;
  }

  Status train_loop() {
    StateEvent training = StateEvent::at_step("training", progress.step);
    training.run_id = run_id;
    training.total_steps = total_steps;
    training.parameters = parameters;
    training.device_bytes = engine->memory_plan().capacity_bytes;
    training.optimizer_tier = placement.optimizer_on_ssd ? "ssd" : "dram";
    training.master_tier = placement.master_on_ssd ? "ssd" : "dram";
    training.ssd_folder = ssd_folder;
    SPW_RETURN_IF_ERROR(rec->state(training));
    // The plan for this run, so that the GUI and History show predicted against measured figures.
    plan = make_plan(state->config(), job, machine, total_steps);
    rec->plan(plan);
    if (progress.step == 0 && job.eval_every > 0) SPW_RETURN_IF_ERROR(run_eval());  // the baseline
    LrScheduleConfig sched = job.schedule;
    sched.total_steps = total_steps;
    while (progress.step < total_steps) {
      const auto t0 = Clock::now();
      const uint64_t h2d0 = engine->h2d_bytes(), d2h0 = engine->d2h_bytes();
      const double t_start = rec->now_s();
      spans_on = t_start - last_span_step >= 1.0;
      if (spans_on) last_span_step = t_start;
      const DataCursor before = iter->cursor();
      Batch b = iter->next();
      auto stepped = engine->forward_backward(step_batch(b));
      if (stepped.status().code() == ErrorCode::kCancelled) {
        // SIGTERM inside a long step (the engine checks between micro-batches and layers): the
        // step is dropped unapplied, its batch read again on resume, and the run stops at the last
        // finished step.
        SPW_RETURN_IF_ERROR(iter->seek(before));
        return stop_at_step();
      }
      SPW_ASSIGN_OR_RETURN(StepResult r, std::move(stepped));
      SPW_RETURN_IF_ERROR(check_finite(r));
      const double t_compute = rec->now_s();
      const double lr = lr_at(sched, progress.step + 1);
      StepStats st = optimizer->begin_step(lr, r.grad_sumsq);  // the norm from the engine's device sums
      SPW_RETURN_IF_ERROR(optimizer->status());  // an SSD failure in the previous step's update
      ++progress.step;
      int64_t step_tokens = 0;
      for (int32_t len : b.lengths) step_tokens += len;
      progress.tokens += step_tokens;
      progress.last_loss = r.loss();
      const double dt = seconds_since(t0);
      record_step(dt, step_tokens, h2d0, d2h0);
      const double tps = step_tokens / std::max(dt, 1e-9);
      const double tflops = 6.0 * static_cast<double>(parameters) * tps / 1e12;  // PaLM appendix B
      rec->span({"step", std::nullopt, "compute", t_start, t_compute});
      rec->step(StepEvent{progress.step, r.loss(), lr, st.grad_norm, progress.tokens, tps, tflops, dt, total_steps,
                          st.prev_update_ssd_read_bytes, st.prev_update_ssd_write_bytes},
                MetricRow{progress.step, r.loss(), lr, st.grad_norm, progress.tokens, tps, tflops, rec->now_s()});
      if (job.log_every > 0 && progress.step % job.log_every == 0) {
        char line[256];
        std::snprintf(line, sizeof(line), "step %lld/%lld  loss %.5f  lr %.3g  grad_norm %.3f  %.0f tokens/s",
                      static_cast<long long>(progress.step), static_cast<long long>(total_steps), r.loss(), lr,
                      st.grad_norm, tps);
        log(LogLevel::kInfo, line);
      }
      if (job.eval_every > 0 && progress.step % job.eval_every == 0) SPW_RETURN_IF_ERROR(eval_or_stop());
      const bool asked = owner->checkpoint_.exchange(false);
      if (asked || (job.checkpoint_every > 0 && progress.step % job.checkpoint_every == 0))
        SPW_RETURN_IF_ERROR(checkpoint(asked));
      if (owner->stop_.load()) {
        if (!asked && !measuring) SPW_RETURN_IF_ERROR(checkpoint());
        return cancelled("stopped on request at step " + std::to_string(progress.step));
      }
    }
    return {};
  }

  Status finish() {
    optimizer->wait_all();
    SPW_RETURN_IF_ERROR(optimizer->status());
    if (job.eval_every <= 0 || progress.step % job.eval_every != 0) SPW_RETURN_IF_ERROR(eval_or_stop());
    if (job.checkpoint_every <= 0 || progress.step % job.checkpoint_every != 0) SPW_RETURN_IF_ERROR(checkpoint());
    const std::string out = (fs::path(run_dir) / "export").string();
    SPW_RETURN_IF_ERROR(export_model(*state, tokenizer_source, out));
    rec->exported(ExportEvent{out, !tokenizer_source.empty()});
    if (tokenizer_source.empty()) {
      log(LogLevel::kWarn, "exported " + out + " without a tokenizer: the model has none (it trained on pre-tokenized "
                           "data); copy the tokenizer files into it before loading it with transformers");
    } else {
      log(LogLevel::kInfo, "exported " + out);
    }
    return {};
  }
};

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->owner = this;
  impl_->engine->set_stop_flag(&stop_);  // a SIGTERM stops a long step between layers, not after it
}
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::create(const TrainJob& job, const std::string& resume_from, TrainerHooks hooks) {
  auto impl = std::make_unique<Impl>();
  impl->job = job;
  impl->hooks = std::move(hooks);
  Impl& t = *impl;
  SPW_RETURN_IF_ERROR(t.create_backend());
  SPW_RETURN_IF_ERROR(t.load_model());
  SPW_RETURN_IF_ERROR(t.load_data());
  if (!resume_from.empty()) {
    auto st = load_checkpoint(resume_from, *t.state, t.opt_state.get());
    if (!st.ok()) return st.status();
    t.progress = *st;
    t.resumed_elapsed_s = t.progress.elapsed_s;
    t.resumed_from = resume_from;
    auto cursor = DataCursor::from_json(t.progress.data_cursor);
    if (!cursor.ok()) return cursor.status().with_context(resume_from);
    SPW_RETURN_IF_ERROR(t.iter->seek(*cursor));
  }
  t.probe_for_plan();
  SPW_RETURN_IF_ERROR(t.build_engine());
  SPW_RETURN_IF_ERROR(t.setup_run());
  t.attach_spans();
  t.log(LogLevel::kInfo, "backend " + t.backend_reason);
  if (!t.probe_note.empty()) t.log(LogLevel::kWarn, t.probe_note);
  if (!resume_from.empty()) t.log(LogLevel::kInfo, "resumed from " + resume_from + " at step " + std::to_string(t.progress.step));
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Status Trainer::run() {
  Impl& t = *impl_;
  t.sampler->start();
  Status st = t.train_loop();
  if (st.ok()) st = t.finish();
  t.sampler->stop();
  t.report_figures();
  t.sampler->sample_once();  // the last sample, after the run's final writes
  if (st.code() == ErrorCode::kCancelled) {
    t.log(LogLevel::kInfo, st.message());
    return t.rec->finish(RunStatus::kStopped, t.final_figures(), StateEvent::at_step("", t.progress.step));
  }
  if (!st.ok()) return t.fail(st);
  StateEvent end = StateEvent::at_step("", t.progress.step);
  end.eval_loss = t.last_eval;
  return t.rec->finish(RunStatus::kCompleted, t.final_figures(), end);
}

Result<StepFigures> Trainer::measure() {
  Impl& t = *impl_;
  t.measuring = true;
  t.sampler->start();
  Status st = t.train_loop();
  if (st.ok()) {
    t.optimizer->wait_all();
    st = t.optimizer->status();
  }
  t.sampler->stop();
  const StepFigures measured = t.report_figures();
  if (st.code() == ErrorCode::kCancelled) {
    SPW_RETURN_IF_ERROR(
        t.rec->finish(RunStatus::kStopped, t.final_figures(), StateEvent::at_step("", t.progress.step)));
    return st;
  }
  if (!st.ok()) return t.fail(st);
  SPW_RETURN_IF_ERROR(t.rec->finish(RunStatus::kCompleted, t.final_figures()));
  return measured;
}

const Plan& Trainer::plan() const { return impl_->plan; }
const std::string& Trainer::run_id() const { return impl_->run_id; }
const std::string& Trainer::run_dir() const { return impl_->run_dir; }
int64_t Trainer::total_steps() const { return impl_->total_steps; }
int64_t Trainer::step() const {
  return impl_->progress.step;
}
double Trainer::last_eval_loss() const { return impl_->last_eval; }

}  // namespace spillway
