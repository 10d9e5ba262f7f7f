#include "train/run-assembly.h"

#include <algorithm>
#include <cmath>

#include "compute/backend-loader.h"
#include "data/dataset-reader.h"
#include "data/model-tokenizer.h"
#include "history/run-store.h"
#include "model/safetensors.h"
#include "train/hbm-state.h"

namespace spillway {
namespace {

// The backend of rank 0 (placement.backend), then the other ranks' (placement.devices): on a GPU
// the devices it names; on the CPU backend a count of CPU ranks, which run the data-parallel
// schedule on the host (for tests; they share its cores).
Status create_backend(const TrainJob& job, RunAssembly& run) {
  compute::BackendOptions options;
  options.kind = job.backend;
  options.device_memory_bytes = job.device_memory_bytes;
  if (!job.devices.indices.empty()) options.cuda_device = job.devices.indices[0];
  auto choice = compute::make_backend(options);
  if (!choice.ok())
    return choice.status().with_context("placement.backend \"" + job.backend + "\"");
  run.backend = std::move(choice->backend);
  run.backend_reason = std::move(choice->reason);
  if (run.backend->facts().gpu) {
    SPW_ASSIGN_OR_RETURN(const int gpus, compute::cuda_device_count());
    SPW_ASSIGN_OR_RETURN(run.devices, job::resolve_devices(job.devices, gpus));
    const std::vector<int> others(run.devices.begin() + 1, run.devices.end());
    SPW_ASSIGN_OR_RETURN(run.peers, compute::make_cuda_backends(others));
  } else {
    auto ranks = job::resolve_cpu_ranks(job.devices, job.backend == "cpu");
    if (!ranks.ok()) return ranks.status().with_context(run.backend_reason);
    const int n = *ranks;
    run.devices.assign(n, 0);
    for (int r = 1; r < n; ++r)
      run.peers.push_back(compute::make_cpu_backend(job.device_memory_bytes));
  }
  if (run.ranks() > 1) run.backend_reason += " (rank 0 of " + std::to_string(run.ranks()) + ")";
  if (run.machines() > 1)
    run.backend_reason += ", process " + std::to_string(run.process()) + " of " +
                          std::to_string(run.machines()) + " (one per machine)";
  // The HBM tier's capacity: the GPU's memory; the CPU backend's "device" only when capped
  // (uncapped, it is DRAM).
  // Data parallel: every GPU's memory (the tier's counters sum the GPUs' arenas).
  run.counters.set_capacity(
      Tier::kHbm, (run.backend->facts().host_memory() ? job.device_memory_bytes
                                                      : run.backend->device_info().total_bytes) *
                      run.ranks());
  return {};
}

// What `plan` refuses, refused before anything is allocated: a job that does not fit would
// otherwise grow until the machine runs out of memory, and a seq_len past the model's positions
// would train without a word. DRAM and the SSD are read now; the GPU's memory and the rates the
// step model rests on are `probed`'s (probe_for_plan, load_model), so that the plan makes the
// trade between checkpoints and the HBM state tier that the run's plan shows. Returns the plan,
// whose placement the run builds: the blocks' host tiers (plan_placement), the HBM state tier's
// blocks and the layers whose checkpoints stay on the device. Plan and run agree by construction.
Result<Plan> check_fits(const TrainJob& job, const ModelConfig& config, const MemInfo& mem,
                        compute::Backend& backend, const MachineProbe& probed) {
  SPW_RETURN_IF_ERROR(check_positions(config, job));
  MachineProbe m = probed;
  m.backend = backend.name();
  m.dram_total_bytes = mem.total_bytes.value_or(0);
  m.dram_available_bytes = mem.available_bytes.value_or(UINT64_MAX);  // unknown: not the limit
  m.ssd_total_bytes = m.ssd_free_bytes = 0;
  if (!job.ssd_dir.empty()) {
    const FsSpace space = read_fs_space(job.ssd_dir);  // a folder not made yet: not the limit
    m.ssd_total_bytes = space.total_bytes.value_or(UINT64_MAX);
    m.ssd_free_bytes = space.free_bytes.value_or(UINT64_MAX);
  }
  Plan plan = make_plan(config, job, m, 1, /*with_suggestion=*/false);
  if (plan.fits) return plan;
  return out_of_memory("the job does not fit: " + plan.reason +
                       " (spillway-worker plan shows the whole plan)");
}

Result<ModelConfig> model_config(const TrainJob& job) {
  if (!job.model_path.empty()) return ModelConfig::load(job.model_path);
  if (!job.init_preset.empty()) return model_preset(job.init_preset);
  auto c = ModelConfig::from_json(job.init_config);
  if (!c.ok()) return c.status().with_context("job.json: model.init");
  return c;
}

// The model's weights, gradients and AdamW state in the tiers the placement gives them.
Status load_model(const TrainJob& job, const ModelConfig& config, RunAssembly& run) {
  // The GPU's memory now, for the fit check and the run's plan alike: both make the same trade
  // between checkpoints and the HBM state tier, and the run builds the fit check's.
  if (run.backend->facts().gpu) {
    size_t free_bytes = 0, total_bytes = 0;
    if (run.backend->device_memory_info(&free_bytes, &total_bytes).ok()) {
      run.machine.device_total_bytes = total_bytes;
      run.machine.device_free_bytes = free_bytes;
    }
  }
  SPW_ASSIGN_OR_RETURN(const Plan fit,
                       check_fits(job, config, run.mem_at_start, *run.backend, run.machine));
  run.placement = plan_placement(fit);
  // Decided before the state is allocated, so that the HBM state tier's blocks get no host
  // gradient; the checkpoints' split only where the plan keeps them on the device (when they do
  // not fit, the engine keeps what fits of them).
  run.hbm_state_blocks = static_cast<size_t>(std::max(fit.state.hbm_blocks, 0));
  run.device_checkpoint_layers =
      fit.checkpoints_on_device ? fit.state.device_checkpoint_layers : -1;
  run.saved_activation_layers = fit.state.saved_activation_layers;
  run.mlp_recompute_layers = fit.state.mlp_recompute_layers;
  const BlockTiers& tiers = run.placement.blocks;
  ParameterLayout layout = ParameterLayout::build(config);
  run.parameters = layout.parameter_count();
  if (tiers.blocks() != layout.num_blocks())
    return internal_error("the plan placed " + std::to_string(tiers.blocks()) +
                          " blocks' state for a model of " + std::to_string(layout.num_blocks()));
  if (run.placement.optimizer_on_ssd() && job.ssd_dir.empty())
    return invalid_argument(
        "the optimizer state does not fit in DRAM: set placement.ssd_dir to a folder on an SSD");
  // Past one machine each holds its own blocks' state (block-owners.h).
  std::vector<bool> held;
  if (run.machines() > 1) {
    run.block_owners = assign_block_owners(layout, run.machines(), run.ranks());
    held = held_blocks(run.block_owners, run.process());
  }
  // Moments in DRAM for the first tiers.dram blocks; the SSD store keeps the others'.
  SPW_ASSIGN_OR_RETURN(run.state, ModelState::create(layout, true, run.hbm_state_blocks, tiers.dram,
                                                     std::move(held)));
  if (!job.model_path.empty()) {
    SPW_RETURN_IF_ERROR(verify_if_checkpoint(job.model_path));  // a checkpoint as the model
    SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(job.model_path));
    SPW_RETURN_IF_ERROR(run.state->load_weights(weights));
  } else {
    run.state->init_random(job.init_seed);
  }
  // With a block's master on the SSD, ModelState's master buffer is the compute copy of its
  // weights.
  uint64_t compute_copy = 0;
  for (size_t b = tiers.dram + tiers.ssd_moments; b < layout.num_blocks(); ++b) {
    if (run.state->holds(b)) compute_copy += layout.blocks()[b].numel * sizeof(float);
  }
  run.counters.set(Tier::kDram, Category::kWeights, static_cast<int64_t>(compute_copy));
  run.counters.set(Tier::kDram, Category::kMaster,
                   static_cast<int64_t>(run.state->master_bytes() - compute_copy));
  run.counters.set(Tier::kDram, Category::kGradients,
                   static_cast<int64_t>(run.state->gradient_bytes()));
  run.counters.set(Tier::kDram, Category::kOptimizer,
                   static_cast<int64_t>(run.state->optimizer_bytes()));
  if (!run.placement.optimizer_on_ssd()) {
    run.opt_state = make_dram_state(*run.state);
    return {};
  }
  // Working state, not a checkpoint: a scratch folder per run, removed when the run ends (or,
  // after a SIGKILL, by the next run over the same ssd_dir).
  SPW_ASSIGN_OR_RETURN(
      run.scratch, ScratchFolder::create(job.ssd_dir, "spillway-state-" + RunStore::new_run_id(),
                                         "spillway-state-"));
  SsdStateConfig sc;
  sc.store.folder = run.ssd_folder = run.scratch->path();
  sc.tiers = tiers;
  SPW_ASSIGN_OR_RETURN(run.opt_state, make_ssd_state(*run.state, sc, &run.counters));
  return {};
}

// model.tokenizer, else the model folder's own. A model folder without tokenizer files (or an
// "init" model that names none) has no tokenizer: it trains on pre-tokenized data only.
Status load_tokenizer(const TrainJob& job, RunAssembly& run) {
  run.tokenizer_source = !job.tokenizer_path.empty() ? job.tokenizer_path : job.model_path;
  if (job.tokenizer_path.empty() && !run.tokenizer_source.empty() &&
      !has_tokenizer_files(run.tokenizer_source))
    run.tokenizer_source.clear();
  if (run.tokenizer_source.empty()) return {};
  SPW_ASSIGN_OR_RETURN(run.tokenizer, load_model_tokenizer(run.tokenizer_source));
  const auto model_vocab = run.state->config().vocab_size;
  if (run.tokenizer->vocab_size() > model_vocab)
    return invalid_argument("the tokenizer has " + std::to_string(run.tokenizer->vocab_size()) +
                            " tokens but the model only " + std::to_string(model_vocab) +
                            "; pick a matching tokenizer or model");
  return {};
}

// Dataset::load with the tokenizer, or without one: pre-tokenized data only.
Result<Dataset> load_dataset(const TrainJob& job, const Tokenizer* tokenizer,
                             const std::string& path, const DatasetOptions& opts) {
  if (tokenizer) return Dataset::load(path, *tokenizer, opts);
  SPW_ASSIGN_OR_RETURN(DatasetRecords records, read_dataset_records(path, opts.read));
  if (records.format != DatasetFormat::kPreTokenized) {
    const std::string why =
        !job.model_path.empty()
            ? "the model folder " + job.model_path +
                  " has no tokenizer files (tokenizer.json or tokenizer.model)"
            : "a model made with \"init\" has no tokenizer unless model.tokenizer names one";
    return invalid_argument(
        path + ": " + dataset_format_name(records.format) + " data needs a tokenizer, and " + why +
        "; set model.tokenizer (a tokenizer.json, tokenizer.model, a model folder, or "
        "\"builtin:bytes\") or train on pre-tokenized data (data.format \"pretokenized\": JSONL "
        "with input_ids)");
  }
  return Dataset::from_records(std::move(records), path, opts);
}

// The training and evaluation sets (data.eval, or data.eval_fraction held out from the end of the
// training data), the batch iterator and the run's number of steps.
Status load_data(const TrainJob& job, RunAssembly& run) {
  SPW_RETURN_IF_ERROR(load_tokenizer(job, run));
  // The options `eval` and the GUI's preview read data with too (train-job.h).
  SPW_ASSIGN_OR_RETURN(const DatasetOptions opts, dataset_options(job, run.state->config()));
  SPW_ASSIGN_OR_RETURN(Dataset all, load_dataset(job, run.tokenizer.get(), job.train_path, opts));
  if (!job.eval_path.empty()) {
    run.train_ds = all;
    SPW_ASSIGN_OR_RETURN(run.eval_ds, load_dataset(job, run.tokenizer.get(), job.eval_path, opts));
  } else if (job.eval_fraction > 0) {
    auto split = all.split_tail(job.eval_fraction);
    if (!split.ok()) return split.status().with_context(job.train_path);
    run.train_ds = split->first;
    run.eval_ds = split->second;
  } else {
    run.train_ds = all;
  }
  if (run.train_ds.empty())
    return invalid_argument(job.train_path + ": no training sequences (is the file empty?)");
  const int rows = job.micro_batch_size * run.step_micro_batches(job.grad_accum);
  SPW_ASSIGN_OR_RETURN(BatchIterator it,
                       BatchIterator::create(run.train_ds, rows, job.data_seed, job.shuffle));
  run.iter.emplace(std::move(it));
  run.total_steps =
      job.steps > 0
          ? job.steps
          : std::max<int64_t>(
                1, static_cast<int64_t>(std::ceil(job.epochs * run.iter->batches_per_epoch())));
  return {};
}

// The checkpoint's weights and AdamW state, and the batch cursor where its step left off
// (load_checkpoint has checked the files and values; seek checks the cursor against this dataset).
Status resume(const std::string& checkpoint_dir, int64_t sequences_per_step, RunAssembly& run) {
  bool legacy = false;
  SPW_ASSIGN_OR_RETURN(run.start,
                       load_checkpoint(checkpoint_dir, *run.state, run.opt_state.get(), &legacy));
  run.resumed_from = checkpoint_dir;
  if (legacy)
    run.resume_note = "the checkpoint " + checkpoint_dir +
                      " was written by an earlier Spillway (format 1, no manifest): its values "
                      "were checked, its files cannot be; the next checkpoints have a manifest";
  auto cursor = DataCursor::from_json(run.start.data_cursor);
  if (!cursor.ok()) return cursor.status().with_context(checkpoint_dir);
  SPW_RETURN_IF_ERROR(run.iter->seek(*cursor));
  run.start.data = run.start.data.continued(run.start.step, cursor->consumed(), sequences_per_step);
  return {};
}

// What the run's plan is made with: the host's figures, and on a GPU the GPU's own, measured
// before the model is loaded, because the fit check's plan trades checkpoints against the HBM
// state tier by predicted step time (planner.h), and before build_engine because probe_device
// borrows the backend's workspace and about 1 GiB of device memory that the engine's arena would
// otherwise hold. The plan is advice, so a failed GPU probe does not fail the run: the plan falls
// back to the host's figures and probe_note says why.
void probe_for_plan(const TrainJob& job, const ModelConfig& config, RunAssembly& run) {
  run.machine = probe_machine(job.ssd_dir);  // the disk is probed only when the run uses one
  run.machine.machines = run.machines();     // each of this one's shape
  run.machine.process = run.process();       // holding its own blocks' state
  // The DRAM the job had before it allocated its own state: read now, the plan would count that
  // state as taken, find the job too big for what is left and place the tiers differently.
  if (run.mem_at_start.available_bytes)
    run.machine.dram_available_bytes = *run.mem_at_start.available_bytes;
  run.machine.backend = run.backend->name();
  if (!run.backend->facts().gpu) {
    // Its link is the host's memcpy, measured above; its compute at the job's own shapes. A probe
    // that cannot allocate leaves the plan uncalibrated, which it says.
    const int64_t tokens = static_cast<int64_t>(job.micro_batch_size) * job.seq_len;
    if (Status st = probe_cpu_compute(config, job.seq_len, tokens, &run.machine); !st.ok())
      run.probe_note = "the plan's step time is uncalibrated: " + st.to_string();
    return;
  }
  // 64 Mi parameters (1 GiB of AdamW state): far beyond the caches, as in a step, yet small
  // next to the model's own state, which is in DRAM already.
  constexpr size_t kAdamwProbeParams = size_t{64} << 20;
  Status st = probe_device(*run.backend, &run.machine);
  if (st.ok()) {
    auto rate = measure_adamw(kAdamwProbeParams);
    if (rate.ok())
      run.machine.adamw_params_per_s = *rate;
    else
      st = rate.status();
  }
  if (!st.ok())
    run.probe_note = "the plan uses estimated figures: probing the GPU failed: " + st.to_string();
}

Status build_engine(const TrainJob& job, RunAssembly& run) {
  StreamingConfig sc = streaming_config(job);
  sc.hbm_state_blocks = static_cast<int>(run.hbm_state_blocks);  // as load_model decided
  sc.device_checkpoint_layers = run.device_checkpoint_layers;
  sc.saved_activation_layers = run.saved_activation_layers;
  sc.mlp_recompute_layers = run.mlp_recompute_layers;
  sc.block_owners = run.block_owners;
  std::vector<compute::Backend*> backends = {run.backend.get()};
  for (auto& p : run.peers) backends.push_back(p.get());
  SPW_ASSIGN_OR_RETURN(run.engine, DataParallelEngine::create(backends, *run.state, sc,
                                                              &run.counters, run.processes));
  AdamWConfig ac;
  ac.beta1 = job.beta1;
  ac.beta2 = job.beta2;
  ac.eps = job.eps;
  ac.weight_decay = job.weight_decay;
  run.optimizer =
      std::make_unique<Optimizer>(*run.state, ac, job.clip_grad_norm, run.opt_state.get());
  // The HBM tier's blocks start from the host state (a fresh model, or the resumed checkpoint).
  return run.optimizer->set_hbm_state(run.engine->hbm_state());
}

}  // namespace

Status assemble_run(const TrainJob& job, const std::string& resume_from, RunAssembly* run) {
  SPW_RETURN_IF_ERROR(create_backend(job, *run));
  SPW_ASSIGN_OR_RETURN(const ModelConfig config, model_config(job));
  // One reading for the fit check, the placement and the plan: the DRAM the job had before it
  // allocated its own state.
  run->mem_at_start = read_meminfo();
  probe_for_plan(job, config, *run);
  SPW_RETURN_IF_ERROR(load_model(job, config, *run));
  SPW_RETURN_IF_ERROR(load_data(job, *run));
  const int64_t sequences_per_step =
      int64_t{job.micro_batch_size} * run->step_micro_batches(job.grad_accum);
  run->start.data = DataSegment{0, 0, sequences_per_step};
  if (!resume_from.empty()) SPW_RETURN_IF_ERROR(resume(resume_from, sequences_per_step, *run));
  return build_engine(job, *run);
}

}  // namespace spillway
