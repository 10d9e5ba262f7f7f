// bench-ssd-optimizer: what moving the AdamW state (and the master weights) from DRAM to the SSD
// tier costs a CPU-backend training run. For each placement — dram, half (the first half of the
// blocks' moments in DRAM, the rest on the SSD: placement.optimizer "auto" for a state a little
// larger than DRAM), ssd, ssd+master — it trains a
// random-init model (default the ~50M preset llama-50m) on synthetic tokens and reports:
//   step    mean seconds per whole step (forward, backward, and the optimizer update overlapped
//           with the next forward, as the trainer runs it)
//   update  seconds of one optimizer pass on its own (begin_step + wait_all)
//   SSD     bytes read and written per update, and GB/s over the update's duration (read, write,
//           both together) — the rate the pipeline sustained, bounded by AdamW's CPU time
// Usage: bench-ssd-optimizer [--folder DIR] [--preset NAME] [--steps N] [--seq-len T]
//                            [--micro-batch B] [--block-mib M] [--queue-depth Q]
// DIR (default ./ssd-bench-tmp) should be on the SSD under test; the state files are removed.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "core/thread-pool.h"
#include "train/optimizer-state.h"
#include "train/optimizer.h"
#include "train/scratch-folder.h"
#include "train/streaming-engine.h"

using namespace spillway;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  std::string folder = "ssd-bench-tmp", preset = "llama-50m";
  int steps = 4, seq = 128, mb = 4;
  size_t block_mib = 1;
  unsigned queue_depth = 32;
};

enum class Placement { kDram, kHalf, kSsd, kSsdMaster };

struct Figures {
  double step_s = 0, update_s = 0;
  uint64_t read_bytes = 0, write_bytes = 0;  // per update
};

Status bench(const ModelConfig& config, Placement placement, const Options& o, Figures* f) {
  ParameterLayout layout = ParameterLayout::build(config);
  const size_t n = layout.num_blocks();
  const BlockTiers tiers = placement == Placement::kDram   ? BlockTiers::all(n, BlockTiers::kDram)
                           : placement == Placement::kHalf ? BlockTiers{n / 2, n - n / 2, 0}
                           : placement == Placement::kSsd
                               ? BlockTiers::all(n, BlockTiers::kSsdMoments)
                               : BlockTiers::all(n, BlockTiers::kSsd);
  SPW_ASSIGN_OR_RETURN(auto state, ModelState::create(layout, true, 0, tiers.dram));
  state->init_random(1);
  std::unique_ptr<ScratchFolder> scratch;
  std::unique_ptr<OptimizerStateStore> store;
  if (placement == Placement::kDram) {
    store = make_dram_state(*state);
  } else {
    SPW_ASSIGN_OR_RETURN(scratch, ScratchFolder::create(o.folder, "bench-state", "bench-state"));
    SsdStateConfig sc;
    sc.store.folder = scratch->path();
    sc.store.block_bytes = o.block_mib << 20;
    sc.store.queue_depth = o.queue_depth;
    sc.tiers = tiers;
    SPW_ASSIGN_OR_RETURN(store, make_ssd_state(*state, sc));
  }
  auto backend = compute::make_cpu_backend(0);
  StreamingConfig cfg;
  cfg.micro_batch_size = o.mb;
  cfg.seq_len = o.seq;
  SPW_ASSIGN_OR_RETURN(auto engine, StreamingEngine::create(*backend, *state, cfg));
  Optimizer opt(*state, AdamWConfig{1e-4, 0.9, 0.95, 1e-8, 0.1}, 1.0, store.get());
  engine->set_weight_gate([&](size_t b) { opt.wait_block(b); });
  std::vector<int32_t> ids(static_cast<size_t>(o.mb) * o.seq), labels(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 7919) % config.vocab_size);
    labels[i] = static_cast<int32_t>(((i + 1) * 7919) % config.vocab_size);
  }
  const StepBatch batch{1, o.mb, o.seq, ids, labels};

  // Warm-up: first touch of every buffer and file block.
  SPW_RETURN_IF_ERROR(engine->forward_backward(batch).status());
  opt.begin_step(1e-4);
  opt.wait_all();
  SPW_RETURN_IF_ERROR(opt.status());

  // Whole steps, the update of step s overlapping the forward of step s+1.
  auto t0 = Clock::now();
  for (int i = 0; i < o.steps; ++i) {
    SPW_RETURN_IF_ERROR(engine->forward_backward(batch).status());
    opt.begin_step(1e-4);
  }
  opt.wait_all();
  SPW_RETURN_IF_ERROR(opt.status());
  f->step_s = secs(t0) / o.steps;

  // The update alone, over the gradients of the last step.
  const uint64_t r0 = store->ssd_read_bytes(), w0 = store->ssd_write_bytes();
  t0 = Clock::now();
  for (int i = 0; i < o.steps; ++i) {
    opt.begin_step(1e-4);
    opt.wait_all();
  }
  f->update_s = secs(t0) / o.steps;
  SPW_RETURN_IF_ERROR(opt.status());
  f->read_bytes = (store->ssd_read_bytes() - r0) / o.steps;
  f->write_bytes = (store->ssd_write_bytes() - w0) / o.steps;
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--folder")
      o.folder = v;
    else if (k == "--preset")
      o.preset = v;
    else if (k == "--steps")
      o.steps = std::max(1, std::atoi(v.c_str()));
    else if (k == "--seq-len")
      o.seq = std::atoi(v.c_str());
    else if (k == "--micro-batch")
      o.mb = std::atoi(v.c_str());
    else if (k == "--block-mib")
      o.block_mib = std::strtoul(v.c_str(), nullptr, 10);
    else if (k == "--queue-depth")
      o.queue_depth = static_cast<unsigned>(std::atoi(v.c_str()));
    else
      return std::fprintf(stderr, "unknown option %s\n", k.c_str()), 2;
  }
  auto config = model_preset(o.preset);
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.status().to_string().c_str()), 1;
  const ParameterLayout layout = ParameterLayout::build(*config);
  std::printf(
      "%s: %.1fM parameters, %d x %d tokens/step, %zu threads, state under %s (%zu MiB blocks, "
      "depth %u)\n",
      o.preset.c_str(), layout.parameter_count() / 1e6, o.mb, o.seq, ThreadPool::global().size(),
      o.folder.c_str(), o.block_mib, o.queue_depth);
  double dram_step = 0;
  for (Placement p : {Placement::kDram, Placement::kHalf, Placement::kSsd, Placement::kSsdMaster}) {
    const char* name = p == Placement::kDram   ? "dram"
                       : p == Placement::kHalf ? "half"
                       : p == Placement::kSsd  ? "ssd"
                                               : "ssd+master";
    Figures f;
    Status st = bench(*config, p, o, &f);
    if (!st.ok()) {
      std::printf("%-10s  failed: %s\n", name, st.to_string().c_str());
      continue;
    }
    if (p == Placement::kDram) dram_step = f.step_s;
    std::printf("%-10s  step %.3f s (%+5.1f%%)  update %.3f s", name, f.step_s,
                dram_step > 0 ? 100.0 * (f.step_s / dram_step - 1) : 0.0, f.update_s);
    if (f.read_bytes) {
      std::printf("  SSD %.0f MB read + %.0f MB written per update: %.2f + %.2f = %.2f GB/s",
                  f.read_bytes / 1e6, f.write_bytes / 1e6, f.read_bytes / f.update_s / 1e9,
                  f.write_bytes / f.update_s / 1e9,
                  (f.read_bytes + f.write_bytes) / f.update_s / 1e9);
    }
    std::printf("\n");
  }
  return 0;
}
