// bench-train: tokens/s of the layer-streaming trainer on the CPU backend (forward, backward and
// AdamW of whole steps) for stories260K and the ~50M-parameter preset, and the CPU AdamW in
// parameters/s and GB/s against this machine's memory bandwidth (a STREAM-style triad measured
// here). Usage: bench-train [--steps N] [--seq-len T] [--micro-batch B]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "core/thread-pool.h"
#include "model/safetensors.h"
#include "train/adamw.h"
#include "train/optimizer.h"
#include "train/streaming-engine.h"

using namespace spillway;
using Clock = std::chrono::steady_clock;

static double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

static void bench_model(const std::string& label, const ModelConfig& config, const std::string& weights, int steps,
                        int seq, int mb) {
  ParameterLayout layout = ParameterLayout::build(config);
  auto state = ModelState::create(layout, true);
  if (!state.ok()) return void(std::printf("%s: %s\n", label.c_str(), state.status().to_string().c_str()));
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
  if (!engine.ok()) return void(std::printf("%s: %s\n", label.c_str(), engine.status().to_string().c_str()));
  Optimizer opt(**state, AdamWConfig{1e-4, 0.9, 0.95, 1e-8, 0.1}, 1.0);
  (*engine)->set_weight_gate([&](size_t b) { opt.wait_block(b); });
  std::vector<int32_t> ids(static_cast<size_t>(mb) * seq), labels(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % config.vocab_size), labels[i] = ids[(i + 1) % ids.size()];
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
  std::printf("%-14s %11.0f params  %d x %d tokens/step  %.3f s/step  %9.0f tokens/s  %.3f model TFLOPS (6N)\n",
              label.c_str(), static_cast<double>(layout.parameter_count()), mb, seq, dt, tokens / dt,
              6.0 * layout.parameter_count() * tokens / dt / 1e12);
}

int main(int argc, char** argv) {
  int steps = 5, seq = 256, mb = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seq-len")) seq = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--micro-batch")) mb = std::atoi(argv[i + 1]);
  }
  std::printf("threads: %zu\n", ThreadPool::global().size());
  const char* data = std::getenv("SPILLWAY_DATA_DIR");
  std::string dir = std::string(data ? data : SPILLWAY_DEFAULT_DATA_DIR) + "/models/stories260K";
  if (auto c = ModelConfig::load(dir); c.ok()) bench_model("stories260K", *c, dir, steps, seq, mb);
  if (auto c = model_preset("llama-50m"); c.ok()) bench_model("llama-50m", *c, "", steps, seq, mb);

  // AdamW: 28 bytes of traffic per parameter (read p, g, m, v; write p, m, v).
  const size_t n = 50'000'000;
  std::vector<float> p(n, 0.1f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  AdamWConfig c{1e-4, 0.9, 0.95, 1e-8, 0.1};
  adamw_update_range(p.data(), m.data(), v.data(), g.data(), n, c, 1, 1.0f, true);
  auto t0 = Clock::now();
  const int reps = 5;
  for (int i = 0; i < reps; ++i) adamw_update_range(p.data(), m.data(), v.data(), g.data(), n, c, i + 2, 1.0f, true);
  const double dt = secs(t0) / reps;
  // Triad a = b + s·c over the same arrays, threads as the optimizer uses them: 12 bytes/element.
  auto triad = [&] {
    ThreadPool::global().parallel_for(n, [&](size_t b0, size_t e) {
      for (size_t i = b0; i < e; ++i) m[i] = g[i] + 0.5f * v[i];
    }, 1 << 16);
  };
  triad();
  t0 = Clock::now();
  for (int i = 0; i < reps; ++i) triad();
  const double bw = 12.0 * n / (secs(t0) / reps);
  std::printf("AdamW          %.0f M params/s  %.1f GB/s of 28 B/param  (memory triad %.1f GB/s: %.0f%%)\n", n / dt / 1e6,
              28.0 * n / dt / 1e9, bw / 1e9, 100.0 * (28.0 * n / dt) / bw);
  return 0;
}
