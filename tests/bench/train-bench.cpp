// bench-train: tokens/s of the layer-streaming trainer on the CPU backend (forward, backward and
// AdamW of whole steps) for stories260K and the ~50M-parameter preset, and the CPU AdamW in
// parameters/s and GB/s against this machine's memory bandwidth (a STREAM-style triad measured
// here), as one JSON line; its peer is tests/bench/torch_adamw_peer.py (torch's fused AdamW).
// Usage: bench-train [--steps N] [--seq-len T] [--micro-batch B] [--params N] [--adamw-only]
//   --params: AdamW parameters (default 256M: 4 GiB of state, well beyond the caches)
//   --adamw-only: skip the models, measure only AdamW
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "core/buffer.h"
#include "core/thread-pool.h"
#include "model/safetensors.h"
#include "train/adamw.h"
#include "train/optimizer.h"
#include "train/streaming-engine.h"

using namespace spillway;
using Clock = std::chrono::steady_clock;

static double secs(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

static void bench_model(const std::string& label, const ModelConfig& config,
                        const std::string& weights, int steps, int seq, int mb) {
  ParameterLayout layout = ParameterLayout::build(config);
  auto state = ModelState::create(layout, true);
  if (!state.ok())
    return void(std::printf("%s: %s\n", label.c_str(), state.status().to_string().c_str()));
  if (!weights.empty()) {
    auto store = TensorStore::open(weights);
    if (store.ok()) (void)(*state)->load_weights(*store);
  } else {
    (*state)->init_random(1);
  }
  auto backend = compute::make_cpu_backend(0);
  StreamingConfig sc;
  sc.micro_batch_size = mb;
  sc.seq_len = seq;
  auto engine = StreamingEngine::create(*backend, **state, sc);
  if (!engine.ok())
    return void(std::printf("%s: %s\n", label.c_str(), engine.status().to_string().c_str()));
  Optimizer opt(**state, AdamWConfig{1e-4, 0.9, 0.95, 1e-8, 0.1}, 1.0);
  (*engine)->set_weight_gate([&](size_t b) { opt.wait_block(b); });
  std::vector<int32_t> ids(static_cast<size_t>(mb) * seq), labels(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int32_t>((i * 7919) % config.vocab_size),
    labels[i] = ids[(i + 1) % ids.size()];
  StepBatch b{1, mb, seq, ids, labels};
  for (int i = 0; i < 2; ++i) (void)(*engine)->forward_backward(b), opt.begin_step(1e-4);
  opt.wait_all();
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) {
    (void)(*engine)->forward_backward(b);
    opt.begin_step(1e-4);
  }
  opt.wait_all();
  const double dt = secs(t0) / steps;
  const double tokens = static_cast<double>(mb) * seq;
  std::printf(
      "%-14s %11.0f params  %d x %d tokens/step  %.3f s/step  %9.0f tokens/s  %.3f model TFLOPS "
      "(6N)\n",
      label.c_str(), static_cast<double>(layout.parameter_count()), mb, seq, dt, tokens / dt,
      6.0 * layout.parameter_count() * tokens / dt / 1e12);
}

// Median seconds of `reps` calls of fn after `warmup` untimed ones (the first touches pages).
template <typename Fn>
static double median_secs(int warmup, int reps, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn(warmup + i);
    t.push_back(secs(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// AdamW over `n` fp32 parameters on the global pool, timed like torch_adamw_peer.py (median of 5
// steps after 2), then the triad a = b + s·c over the same arrays. AdamW moves 28 bytes per
// parameter (reads p, g, m, v; writes p, m, v); the triad 16, counted as the memory sees them
// (reads b and c, reads a for ownership and writes it back), not STREAM's 12. Then AdamW's own
// traffic with one add per array instead of its arithmetic (p += g, m += g, v += g: the same 28
// bytes, on the same threads): what no exact fp32 AdamW on these cores can beat, so that
// params_per_s / traffic_params_per_s says how far from the memory the update is, and a peer's
// ratio to it bounds what any speed-up over that peer can be.
// p, m, v += g: AdamW's loads and stores without its arithmetic (restrict, so that it vectorizes
// as the update's tiles do).
static void add_to_three(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                         const float* __restrict__ g, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    p[i] += gi, m[i] += gi, v[i] += gi;
  }
}

static int bench_adamw(size_t n) {
  AlignedBuffer bufs[4];
  for (AlignedBuffer& b : bufs) {
    auto r = AlignedBuffer::allocate(n * sizeof(float), 4096);
    if (!r.ok()) {
      std::printf("{\"bench\":\"adamw\",\"error\":\"%s\"}\n", r.status().to_string().c_str());
      return 1;
    }
    b = std::move(*r);
  }
  float *p = bufs[0].as<float>(), *g = bufs[1].as<float>(), *m = bufs[2].as<float>(),
        *v = bufs[3].as<float>();
  ThreadPool& pool = ThreadPool::global();
  // Page-aligned and zeroed by AlignedBuffer as the trainer's state is, then filled.
  pool.parallel_for(
      n,
      [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
          p[i] = 0.02f;
          g[i] = (static_cast<int>(i % 7) - 3) * 1e-3f;
          m[i] = v[i] = 0.0f;
        }
      },
      1 << 16);
  const AdamWConfig c{1e-4, 0.9, 0.95, 1e-8, 0.1};
  const double dt =
      median_secs(2, 5, [&](int i) { adamw_update_range(p, m, v, g, n, c, i + 1, 1.0f, true); });
  const double triad = median_secs(1, 5, [&](int) {
    pool.parallel_for(
        n,
        [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) m[i] = g[i] + 0.5f * v[i];
        },
        1 << 16);
  });
  const double traffic = median_secs(1, 5, [&](int) {
    pool.parallel_for(
        n, [&](size_t b, size_t e) { add_to_three(p + b, m + b, v + b, g + b, e - b); }, 1 << 16);
  });
  std::printf(
      "{\"bench\":\"adamw\",\"params\":%zu,\"threads\":%zu,\"step_s\":%.6f,\"params_per_s\":%.4g,"
      "\"gbps\":%.2f,\"triad_gbps\":%.2f,\"traffic_params_per_s\":%.4g,\"traffic_gbps\":%.2f}\n",
      n, pool.size(), dt, n / dt, 28.0 * n / dt / 1e9, 16.0 * n / triad / 1e9, n / traffic,
      28.0 * n / traffic / 1e9);
  return 0;
}

int main(int argc, char** argv) {
  int steps = 5, seq = 256, mb = 4;
  size_t params = 256'000'000;
  bool adamw_only = false;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--adamw-only"))
      adamw_only = true;
    else if (has_value && !std::strcmp(argv[i], "--steps"))
      steps = std::atoi(argv[++i]);
    else if (has_value && !std::strcmp(argv[i], "--seq-len"))
      seq = std::atoi(argv[++i]);
    else if (has_value && !std::strcmp(argv[i], "--micro-batch"))
      mb = std::atoi(argv[++i]);
    else if (has_value && !std::strcmp(argv[i], "--params"))
      params = static_cast<size_t>(std::strtod(argv[++i], nullptr));
    else {
      std::fprintf(stderr, "bench-train: unknown or incomplete argument %s\n", argv[i]);
      return 2;
    }
  }
  if (!adamw_only) {
    std::printf("threads: %zu\n", ThreadPool::global().size());
    const char* data = std::getenv("SPILLWAY_DATA_DIR");
    std::string dir = std::string(data ? data : SPILLWAY_DEFAULT_DATA_DIR) + "/models/stories260K";
    if (auto c = ModelConfig::load(dir); c.ok())
      bench_model("stories260K", *c, dir, steps, seq, mb);
    if (auto c = model_preset("llama-50m"); c.ok())
      bench_model("llama-50m", *c, "", steps, seq, mb);
  }
  return bench_adamw(params);
}
