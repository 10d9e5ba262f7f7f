#include "worker/bench-command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <random>
#include <string_view>
#include <vector>

#include "compute/backend-loader.h"
#include "model/parameter-layout.h"
#include "train/data-parallel-engine.h"
#include "train/model-state.h"
#include "train/optimizer.h"
#include "train/planner.h"
#include "train/streaming-engine.h"
#include "worker/args.h"
#include "worker/bench-models.h"
#include "worker/bench-ops.h"
#include "worker/metered-device.h"
#include "worker/op-times.h"
#include "worker/timed-backend.h"

namespace spillway::worker {
namespace {
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: bench --model SHAPE [--backend auto|cpu|cuda] [--micro-batch N] [--seq-len T] "
    "[--tokens-per-step K | --micro-batches M] [--weight-slots K] [--lm-head-chunk C] "
    "[--checkpoints device|host] [--device-checkpoint-layers L] [--saved-activation-layers S] "
    "[--mlp-recompute-layers R] "
    "[--hbm-state-blocks B] "
    "[--devices N] [--steps S] "
    "[--warmup W] [--ops] "
    "[--json]";
constexpr double kLr = 1e-5;

// One engine configuration to time.
struct BenchConfig {
  int micro_batch = 4;
  int seq_len = 2048;
  int micro_batches = 4;
  int weight_slots = 2;
  int lm_head_chunk = StreamingConfig{}.lm_head_chunk;  // tokens whose logits exist at once
  // placement.hbm_state_blocks: -1 as many as fit beside every checkpoint (the engine's rule; a
  // run's plan may trade checkpoints for more, device_checkpoint_layers below)
  int hbm_state_blocks = -1;
  int devices = 1;  // GPUs, data parallel: micro_batches is per GPU
  // StreamingConfig::device_checkpoint_layers: the first L layers' checkpoints on the device, the
  // others in pinned host memory (the planner's trade); -1 every layer's while they fit.
  int device_checkpoint_layers = -1;
  // StreamingConfig::saved_activation_layers: the last L layers keep their activations on the
  // device and skip the recompute.
  int saved_activation_layers = 0;
  // StreamingConfig::mlp_recompute_layers: the layers before those keep all but the MLP's
  // intermediates.
  int mlp_recompute_layers = 0;
};

struct BenchOptions {
  std::string model;
  std::string backend = "auto";
  std::vector<BenchConfig>
      configs;  // every combination of the lists given, timed one after another
  int steps = 5;
  int warmup = 2;  // at least 1: a timed step's forward overlaps the AdamW of the step before
  // Activation checkpoints on the device while they fit (the trainer's choice), or all in pinned
  // host memory: then HBM holds only the weight slots, gradients, one micro-batch's activations
  // and the workspace, whatever the number of layers.
  bool checkpoints_on_device = true;
  // After the timed steps, one more with every op timed (bench-ops.h; the first GPU's ops).
  bool ops = false;
};

Result<int> whole_number(const std::string& name, const std::string& text, int min) {
  SPW_ASSIGN_OR_RETURN(const int64_t v, parse_integer(name, text, min, 1 << 30));
  return static_cast<int>(v);
}

// `--name 4` or, for a sweep, `--name 1,2,4`; `fallback` when absent.
Result<std::vector<int>> number_list(const Args& a, const std::string& name, int fallback,
                                     int min = 1) {
  const auto text = a.get(name);
  if (!text) return std::vector<int>{fallback};
  std::vector<int> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text->find(',', start);
    SPW_ASSIGN_OR_RETURN(int v, whole_number(name, text->substr(start, comma - start), min));
    out.push_back(v);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

Result<BenchOptions> parse_options(const std::vector<std::string>& argv) {
  SPW_ASSIGN_OR_RETURN(
      Args a, parse_args(argv,
                         {"--model", "--backend", "--micro-batch", "--seq-len", "--tokens-per-step",
                          "--micro-batches", "--weight-slots", "--lm-head-chunk", "--checkpoints",
                          "--device-checkpoint-layers", "--saved-activation-layers",
                          "--mlp-recompute-layers", "--hbm-state-blocks", "--devices", "--steps",
                          "--warmup"},
                         {"--json", "--ops"}));
  BenchOptions o;
  if (!a.positional.empty() || !a.get("--model")) return invalid_argument(kUsage);
  o.model = *a.get("--model");
  o.backend = a.get("--backend").value_or(o.backend);
  const std::string checkpoints = a.get("--checkpoints").value_or("device");
  if (checkpoints != "device" && checkpoints != "host")
    return invalid_argument("bench: --checkpoints is device or host, got '" + checkpoints + "'");
  o.checkpoints_on_device = checkpoints == "device";
  o.ops = a.has("--ops");
  const BenchConfig d;
  SPW_ASSIGN_OR_RETURN(const std::vector<int> seq_lens, number_list(a, "--seq-len", d.seq_len, 2));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> micro_batch,
                       number_list(a, "--micro-batch", d.micro_batch));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> micro_batches,
                       number_list(a, "--micro-batches", d.micro_batches));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> slots,
                       number_list(a, "--weight-slots", d.weight_slots, 2));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> chunks,
                       number_list(a, "--lm-head-chunk", d.lm_head_chunk));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> tokens, number_list(a, "--tokens-per-step", 0));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> hbm_blocks,
                       number_list(a, "--hbm-state-blocks", d.hbm_state_blocks, -1));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> devices, number_list(a, "--devices", d.devices));
  SPW_ASSIGN_OR_RETURN(
      const std::vector<int> checkpoint_layers,
      number_list(a, "--device-checkpoint-layers", d.device_checkpoint_layers, -1));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> saved_layers,
                       number_list(a, "--saved-activation-layers", d.saved_activation_layers, 0));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> mlp_layers,
                       number_list(a, "--mlp-recompute-layers", d.mlp_recompute_layers, 0));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> steps, number_list(a, "--steps", o.steps));
  SPW_ASSIGN_OR_RETURN(const std::vector<int> warmup, number_list(a, "--warmup", o.warmup));
  if (steps.size() > 1 || warmup.size() > 1)
    return invalid_argument("bench: --steps and --warmup take one number");
  o.steps = steps[0];
  o.warmup = warmup[0];
  const bool by_tokens = a.get("--tokens-per-step").has_value();
  if (by_tokens && a.get("--micro-batches"))
    return invalid_argument("bench: give --tokens-per-step or --micro-batches, not both");
  for (int t : seq_lens) {
    for (int mb : micro_batch) {
      for (int m : by_tokens ? tokens : micro_batches) {
        BenchConfig c{mb, t, m, 0, 0, 0, 1};
        if (by_tokens) {
          const int per_call = mb * t;
          if (m % per_call != 0)
            return invalid_argument(
                "bench: --tokens-per-step " + std::to_string(m) +
                " is not a multiple of micro-batch x seq-len = " + std::to_string(per_call));
          c.micro_batches = m / per_call;
        }
        for (int k : slots) {
          for (int chunk : chunks) {
            for (int h : hbm_blocks) {
              for (int n : devices) {
                for (int l : checkpoint_layers) {
                  for (int saved : saved_layers) {
                    for (int mlp : mlp_layers) {
                      c.weight_slots = k;
                      c.lm_head_chunk = chunk;
                      c.hbm_state_blocks = h;
                      c.devices = n;
                      c.device_checkpoint_layers = l;
                      c.saved_activation_layers = saved;
                      c.mlp_recompute_layers = mlp;
                      o.configs.push_back(c);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return o;
}

// The optimizer's "optimizer" spans (one per block and pass, from its thread): seconds of each
// pass.
class OptimizerPasses {
 public:
  explicit OptimizerPasses(size_t blocks) : blocks_(blocks) {}
  void add(const char* phase, double start, double end) {
    if (std::string_view(phase) != "optimizer" || blocks_ == 0) return;
    std::lock_guard lock(mu_);
    if (spans_++ % blocks_ == 0) passes_.push_back(0);
    passes_.back() += end - start;
  }
  // The passes completed so far, in order.
  std::vector<double> passes() const {
    std::lock_guard lock(mu_);
    std::vector<double> done = passes_;
    if (blocks_ > 0 && spans_ % blocks_ != 0) done.pop_back();
    return done;
  }

 private:
  const size_t blocks_;
  mutable std::mutex mu_;
  size_t spans_ = 0;
  std::vector<double> passes_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Random token ids, and as labels the next id of each sequence (-100 after the last).
void random_batch(int vocab, std::vector<int32_t>& ids, std::vector<int32_t>& labels, int seq_len) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  for (int32_t& id : ids) id = token(rng);
  for (size_t i = 0; i < ids.size(); ++i) labels[i] = (i + 1) % seq_len == 0 ? -100 : ids[i + 1];
}

// The bench's devices: rank 0's backend (the one make_backend chose) and, for --devices N, the
// other ranks', each metered.
struct BenchDevices {
  std::vector<std::unique_ptr<compute::Backend>> peers;  // ranks 1..
  std::vector<std::unique_ptr<MeteredDevice>> metered;   // [rank]
  std::vector<compute::Backend*> backends;               // [rank]

  // Grows the group to `n` devices: GPUs 1..n-1 on CUDA, more CPU backends on the CPU.
  Status grow(compute::Backend& first, int n) {
    if (backends.empty()) {
      backends.push_back(&first);
      metered.push_back(std::make_unique<MeteredDevice>(first.device()));
    }
    while (static_cast<int>(backends.size()) < n) {
      const int rank = static_cast<int>(backends.size());
      if (first.facts().gpu) {
        SPW_ASSIGN_OR_RETURN(auto b,
                             compute::make_cuda_backends({first.device().ordinal() + rank}));
        peers.push_back(std::move(b[0]));
      } else {
        peers.push_back(compute::make_cpu_backend());
      }
      backends.push_back(peers.back().get());
      metered.push_back(std::make_unique<MeteredDevice>(peers.back()->device()));
    }
    return {};
  }
};

// The first GPU's ops timed for `bench --ops`: its backend wrapped (TimedBackend) and its metered
// device's conversions and zeroing, all through one OpTimes, for the engine's life.
struct OpProfile {
  OpProfile(compute::Backend& backend, MeteredDevice& device)
      : times(backend.device()), backend(backend, times), device(device) {
    device.set_op_times(&times);
  }
  ~OpProfile() { device.set_op_times(nullptr); }
  OpTimes times;
  TimedBackend backend;
  MeteredDevice& device;
};

// Times `o.warmup` + `o.steps` steps of configuration `c` on the first c.devices of `group` and
// `state` (whose weights and AdamW state carry over from configuration to configuration: only the
// speed is of interest). Each engine takes its memory through its device metered. With
// `ceilings` (--ops), one more step has its ops timed against them.
Result<json> bench_config(const BenchOptions& o, const BenchConfig& c, BenchDevices& group,
                          ModelState& state, const std::string& backend_reason,
                          const OpCeilings* ceilings) {
  const ModelConfig& config = state.config();
  SPW_RETURN_IF_ERROR(group.grow(*group.backends[0], c.devices));
  MeteredDevice& device = *group.metered[0];
  std::vector<compute::Device*> devices;
  for (int r = 0; r < c.devices; ++r) {
    group.metered[r]->reset_peaks();
    devices.push_back(group.metered[r].get());
  }
  std::vector<compute::Backend*> backends(group.backends.begin(),
                                          group.backends.begin() + c.devices);
  std::optional<OpProfile> profile;  // before the engine: it outlives the engine
  if (ceilings) {
    profile.emplace(*group.backends[0], device);
    backends[0] = &profile->backend;
  }
  StreamingConfig sc;
  sc.weight_slots = c.weight_slots;
  sc.micro_batch_size = c.micro_batch;
  sc.max_micro_batches = c.micro_batches;
  sc.seq_len = c.seq_len;
  sc.lm_head_chunk = c.lm_head_chunk;
  sc.keep_checkpoints_on_device = o.checkpoints_on_device;
  sc.hbm_state_blocks = c.hbm_state_blocks;
  sc.device_checkpoint_layers = c.device_checkpoint_layers;
  sc.saved_activation_layers = c.saved_activation_layers;
  sc.mlp_recompute_layers = c.mlp_recompute_layers;
  SPW_ASSIGN_OR_RETURN(std::unique_ptr<DataParallelEngine> engine,
                       DataParallelEngine::create(devices, backends, state, sc));
  const Clock::time_point origin = Clock::now();
  auto now = [origin] { return std::chrono::duration<double>(Clock::now() - origin).count(); };
  // The blocks the CPU updates: those outside the HBM state tier. Before the optimizer: its
  // thread reports here until it is gone.
  const size_t cpu_blocks = state.num_blocks() - engine->memory_plan().state_blocks;
  OptimizerPasses adamw(cpu_blocks);
  Optimizer optimizer(state, AdamWConfig{kLr, 0.9, 0.95, 1e-8, 0.1}, 1.0);
  optimizer.set_span_sink([&adamw](size_t, const char* phase, double start,
                                   double end) { adamw.add(phase, start, end); },
                          now);
  SPW_RETURN_IF_ERROR(optimizer.set_hbm_state(engine->hbm_state()));
  // The time the forward waits at the weight gate for the optimizer is the AdamW that was not
  // hidden behind GPU work; with several GPUs each one's thread calls the gate, and the wait is
  // their mean.
  double gate_s = 0;
  std::mutex gate_mu;
  engine->set_weight_gate([&](size_t b) {
    const double t0 = now();
    optimizer.wait_block(b);
    std::lock_guard lock(gate_mu);
    gate_s += (now() - t0) / c.devices;
  });

  const size_t tokens_per_call = static_cast<size_t>(c.micro_batch) * c.seq_len;
  const int micro_batches = c.micro_batches * c.devices;  // per GPU
  std::vector<int32_t> ids(tokens_per_call * micro_batches), labels(ids.size());
  random_batch(config.vocab_size, ids, labels, c.seq_len);
  const StepBatch batch{micro_batches, c.micro_batch, c.seq_len, ids, labels};

  const int total = o.warmup + o.steps;
  std::vector<double> step_s, visible_s, norm_s, reduce_s;
  std::vector<double> busy_s(c.devices, 0.0);
  double loss = 0;
  uint64_t h2d0 = 0, d2h0 = 0;
  for (int i = 0; i < total; ++i) {
    const bool timed = i >= o.warmup;
    if (i == o.warmup) h2d0 = engine->h2d_bytes(), d2h0 = engine->d2h_bytes();
    const double t0 = now();
    gate_s = 0;
    SPW_ASSIGN_OR_RETURN(StepResult r, engine->forward_backward(batch));
    const double t1 = now();
    optimizer.wait_all();  // what is left of the previous step's AdamW when the backward outran it
    const double t2 = now();
    // The gradient norm from the engine's per-block sums (reduced on the device), so ~0 here; this
    // step's AdamW then runs behind the next forward.
    optimizer.begin_step(kLr, r.grad_sumsq);
    SPW_RETURN_IF_ERROR(optimizer.status());
    const double t3 = now();
    loss = r.loss();
    if (!timed) continue;
    step_s.push_back(t3 - t0);
    // The host's waits for AdamW delay the step only while the GPU has nothing queued: at most
    // the compute stream's idle time (a wait at the gate while queued kernels run costs nothing).
    visible_s.push_back(
        std::min(gate_s + (t2 - t1), std::max(0.0, r.timeline.step_s - r.timeline.compute_busy_s)));
    norm_s.push_back(t3 - t2);
    reduce_s.push_back(r.timeline.reduce_s);
    for (int d = 0; d < c.devices; ++d)
      busy_s[d] += c.devices > 1 ? r.device_timelines[d].compute_busy_s : r.timeline.compute_busy_s;
  }
  const uint64_t h2d1 = engine->h2d_bytes(), d2h1 = engine->d2h_bytes();
  const double step = median(step_s);

  // --ops: one more step with every op timed, the HBM state tier's AdamW included.
  json ops = nullptr, ops_sum = nullptr;
  if (profile) {
    profile->times.set_enabled(true);
    const double t0 = now();
    SPW_ASSIGN_OR_RETURN(StepResult r, engine->forward_backward(batch));
    optimizer.wait_all();
    optimizer.begin_step(kLr, r.grad_sumsq);
    SPW_RETURN_IF_ERROR(optimizer.status());
    profile->times.set_enabled(false);
    SPW_RETURN_IF_ERROR(profile->times.wait());
    const double profiled_s = now() - t0;  // through its last op on the device
    SPW_ASSIGN_OR_RETURN(const std::vector<OpFamilyTime> families, profile->times.collect());
    ops = ops_json(families, *ceilings);
    ops_sum = ops_sum_json(ops, step, profiled_s);
  }

  // The HBM tier's blocks back on the host before the engine goes: the next configuration starts
  // from this one's state.
  SPW_RETURN_IF_ERROR(optimizer.sync_host());

  // The AdamW passes the timed steps overlapped: those of steps warmup-1 .. total-2.
  // None when every block's state is in HBM.
  const std::vector<double> passes = adamw.passes();
  if (cpu_blocks > 0 && passes.size() < static_cast<size_t>(total))
    return internal_error("bench: the optimizer reported fewer passes than steps");
  const std::vector<double> overlapped =
      cpu_blocks > 0
          ? std::vector<double>(passes.begin() + (o.warmup - 1), passes.begin() + (total - 1))
          : std::vector<double>(o.steps, 0.0);
  double adamw_total = 0, visible_total = 0, step_total = 0;
  for (double s : overlapped) adamw_total += s;
  for (double s : visible_s) visible_total += s;
  for (double s : step_s) step_total += s;

  const double tokens = static_cast<double>(ids.size());
  const StepFlops flops =
      step_flops(config, tokens, c.seq_len, c.saved_activation_layers, c.mlp_recompute_layers);
  const double h2d = static_cast<double>(h2d1 - h2d0) / o.steps;
  const double d2h = static_cast<double>(d2h1 - d2h0) / o.steps;
  const compute::DeviceInfo info = device.device_info();
  json device_used =
      nullptr;  // the whole process's device memory, CUDA context and libraries included
  if (device.facts().gpu) {
    size_t free_bytes = 0, total_bytes = 0;
    SPW_RETURN_IF_ERROR(device.device_memory_info(&free_bytes, &total_bytes));
    device_used = total_bytes - free_bytes;
  }
  // Each GPU's idle fraction and peak arena, in rank order.
  json idle = json::array(), peaks = json::array();
  for (int d = 0; d < c.devices; ++d) {
    idle.push_back(std::clamp(1.0 - busy_s[d] / step_total, 0.0, 1.0));
    peaks.push_back(group.metered[d]->peak_device_bytes());
  }
  json result{{"model", o.model},
              {"backend", device.name()},
              {"backend_reason", backend_reason},
              {"device", info.name},
              {"attention", info.attention},
              {"params", state.layout().parameter_count()},
              {"micro_batch", c.micro_batch},
              {"seq_len", c.seq_len},
              {"micro_batches", c.micro_batches},
              {"tokens_per_step", ids.size()},
              {"weight_slots", c.weight_slots},
              {"lm_head_chunk", StreamingEngine::lm_head_chunk(config, sc)},
              {"checkpoints", o.checkpoints_on_device ? "device" : "host"},
              {"hbm_state_blocks", engine->memory_plan().state_blocks},
              {"hbm_state_bytes", engine->memory_plan().state_bytes},
              {"device_checkpoint_layers", c.device_checkpoint_layers},
              {"saved_activation_layers", c.saved_activation_layers},
              {"mlp_recompute_layers", c.mlp_recompute_layers},
              {"saved_activation_bytes", engine->memory_plan().saved_activation_bytes},
              {"checkpoint_bytes_device", engine->memory_plan().checkpoint_bytes_device},
              {"checkpoint_bytes_host", engine->memory_plan().checkpoint_bytes_host},
              {"devices", c.devices},
              {"gpu_idle_fractions", idle},
              {"peak_hbm_bytes_per_gpu", peaks},
              {"nccl_s", median(reduce_s)},
              {"h2d_bytes_per_gpu", h2d / c.devices},
              {"d2h_bytes_per_gpu", d2h / c.devices},
              {"steps", o.steps},
              {"step_s", step},
              {"step_s_min", *std::min_element(step_s.begin(), step_s.end())},
              {"tokens_per_s", tokens / step},
              {"model_tflops", flops.model / step / 1e12},
              {"hardware_tflops", flops.hardware / step / 1e12},
              {"peak_hbm_bytes", device.peak_device_bytes()},
              {"device_used_bytes", device_used},
              {"peak_pinned_bytes", device.peak_pinned_bytes()},
              {"h2d_bytes", h2d},
              {"d2h_bytes", d2h},
              {"h2d_gbps", h2d / step / 1e9},
              {"d2h_gbps", d2h / step / 1e9},
              {"gpu_idle_fraction", idle[0]},
              {"grad_norm_s", median(norm_s)},
              {"adamw_s", median(overlapped)},
              {"adamw_visible_s", median(visible_s)},
              {"adamw_hidden_fraction",
               adamw_total > 0 ? std::clamp(1.0 - visible_total / adamw_total, 0.0, 1.0) : 1.0},
              {"loss", loss}};
  if (ceilings) {
    result["ops"] = ops;
    result["ops_sum"] = ops_sum;
    result["op_ceilings"] = {{"copy_bytes", ceilings->copy_bytes},
                             {"copy_gb_s", ceilings->copy_bytes_per_s / 1e9},
                             {"gemm_n", ceilings->gemm_n},
                             {"gemm_tflops", ceilings->gemm_flops_per_s / 1e12}};
  }
  return result;
}

void print_table(std::ostream& out, const json& r) {
  char line[160];
  auto row = [&](const char* name, const std::string& value) {
    std::snprintf(line, sizeof(line), "  %-22s %s\n", name, value.c_str());
    out << line;
  };
  auto num = [](double v, const char* fmt) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), fmt, v);
    return std::string(buf);
  };
  const double params = r["params"].get<double>();
  out << r["model"].get<std::string>() << " on " << r["backend"].get<std::string>() << " ("
      << r["device"].get<std::string>() << "), "
      << (params >= 1e9 ? num(params / 1e9, "%.2f B") : num(params / 1e6, "%.2f M"))
      << " parameters\n";
  const int devices = r["devices"].get<int>();
  row("tokens per step", std::to_string(r["tokens_per_step"].get<int64_t>()) + " (" +
                             (devices > 1 ? std::to_string(devices) + " GPUs x " : "") +
                             std::to_string(r["micro_batches"].get<int>()) + " x " +
                             std::to_string(r["micro_batch"].get<int>()) + " x " +
                             std::to_string(r["seq_len"].get<int>()) + ")");
  row("step", num(r["step_s"].get<double>(), "%.3f s") + " (median of " +
                  std::to_string(r["steps"].get<int>()) + ")");
  row("tokens/s", num(r["tokens_per_s"].get<double>(), "%.0f"));
  row("model TFLOPS", num(r["model_tflops"].get<double>(), "%.3g"));
  row("hardware TFLOPS",
      num(r["hardware_tflops"].get<double>(), "%.3g") + " (with the recomputed forward)");
  row("state in HBM", std::to_string(r["hbm_state_blocks"].get<int>()) + " blocks (" +
                          num(r["hbm_state_bytes"].get<double>() / 1e9, "%.3g GB") + ")");
  row("checkpoints",
      num(r["checkpoint_bytes_device"].get<double>() / 1e9, "%.3g GB") + " on the device, " +
          num(r["checkpoint_bytes_host"].get<double>() / 1e9, "%.3g GB") + " in host memory");
  row("peak HBM", num(r["peak_hbm_bytes"].get<double>() / (1 << 30), "%.3g GiB"));
  row("peak pinned DRAM", num(r["peak_pinned_bytes"].get<double>() / (1 << 30), "%.3g GiB"));
  row("H2D per step", num(r["h2d_bytes"].get<double>() / 1e9, "%.3g GB") +
                          num(r["h2d_gbps"].get<double>(), " (%.3g GB/s)"));
  row("D2H per step", num(r["d2h_bytes"].get<double>() / 1e9, "%.3g GB") +
                          num(r["d2h_gbps"].get<double>(), " (%.3g GB/s)"));
  std::string idle;
  for (const json& f : r["gpu_idle_fractions"])
    idle += (idle.empty() ? "" : ", ") + num(100 * f.get<double>(), "%.1f%%");
  row("GPU idle", idle);
  if (devices > 1)
    row("NCCL reduce",
        num(r["nccl_s"].get<double>(), "%.3f s a step (overlapped with the backward)"));
  row("gradient norm", num(r["grad_norm_s"].get<double>(), "%.3f s"));
  row("AdamW", num(r["adamw_s"].get<double>(), "%.3f s") +
                   num(100 * r["adamw_hidden_fraction"].get<double>(), " (%.0f%% hidden)"));
  row("loss", num(r["loss"].get<double>(), "%.4f"));
  if (r.contains("ops")) print_ops_table(out, r);
}

}  // namespace

int run_bench(const std::vector<std::string>& argv, CommandIo io) {
  const bool as_json = std::find(argv.begin(), argv.end(), "--json") != argv.end();
  auto options = parse_options(argv);
  if (!options.ok()) return report_failure(io, as_json, options.status());
  auto config = bench_model_config(options->model);
  if (!config.ok()) return report_failure(io, as_json, config.status());
  compute::BackendOptions bo;
  bo.kind = options->backend;
  auto choice = compute::make_backend(bo);
  if (!choice.ok()) return report_failure(io, as_json, choice.status());
  BenchDevices group;
  if (Status st = group.grow(*choice->backend, 1); !st.ok()) return report_failure(io, as_json, st);
  // The model state is made once: for 7B parameters its 108 GB take longer to allocate than a
  // configuration takes to time.
  auto state = ModelState::create(ParameterLayout::build(*config), true);
  if (!state.ok()) return report_failure(io, as_json, state.status());
  (*state)->init_random(1);  // every block on its own thread: seconds for 7B parameters
  // --ops: the ceilings, before any engine takes the device's memory and sets the workspace.
  std::optional<OpCeilings> ceilings;
  if (options->ops) {
    auto measured = measure_op_ceilings(*choice->backend);
    if (!measured.ok()) return report_failure(io, as_json, measured.status());
    ceilings = *measured;
  }
  int exit_code = 0;
  for (const BenchConfig& c : options->configs) {
    auto result =
        bench_config(*options, c, group, **state, choice->reason, ceilings ? &*ceilings : nullptr);
    if (!result.ok()) {
      // A configuration that does not fit (a sweep's largest) does not stop the others.
      if (as_json) {
        io.out << json{{"model", options->model},
                       {"micro_batch", c.micro_batch},
                       {"seq_len", c.seq_len},
                       {"micro_batches", c.micro_batches},
                       {"weight_slots", c.weight_slots},
                       {"hbm_state_blocks", c.hbm_state_blocks},
                       {"device_checkpoint_layers", c.device_checkpoint_layers},
                       {"saved_activation_layers", c.saved_activation_layers},
                       {"mlp_recompute_layers", c.mlp_recompute_layers},
                       {"devices", c.devices},
                       {"error", error_code_name(result.status().code())},
                       {"message", result.status().message()}}
                      .dump()
               << std::endl;
      }
      io.err << "spillway-worker: bench " << c.devices << " GPUs x " << c.micro_batches << " x "
             << c.micro_batch << " x " << c.seq_len << ": " << result.status().to_string() << "\n";
      exit_code = 1;
      continue;
    }
    if (as_json)
      io.out << result->dump() << std::endl;
    else
      print_table(io.out, *result);
  }
  return exit_code;
}

}  // namespace spillway::worker
