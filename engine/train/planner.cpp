#include "train/planner.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include <cblas.h>

#include "model/parameter-layout.h"
#include "telemetry/sampler.h"
#include "train/streaming-engine.h"

namespace spillway {
namespace {

double time_it(const std::function<void()>& fn, int reps) {
  fn();  // warm-up
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  return buf;
}

// Sequential O_DIRECT write (fsynced) then read of 64 MiB in `dir`: the slower of the two, in
// bytes/s; 0 when it cannot be measured (no folder, or a filesystem without O_DIRECT).
double probe_disk(const std::string& dir) {
  if (dir.empty()) return 0;
  const std::string path = dir + "/.spillway-probe-" + std::to_string(::getpid());
  const size_t bytes = 64 << 20, chunk = 4 << 20;
  void* buf = nullptr;
  if (posix_memalign(&buf, 4096, chunk) != 0) return 0;
  std::memset(buf, 0x5a, chunk);
  double rate = 0;
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
  if (fd >= 0) {
    ::unlink(path.c_str());  // now: a process killed mid-probe must not leave 64 MiB behind
    auto t0 = std::chrono::steady_clock::now();
    bool ok = true;
    for (size_t off = 0; ok && off < bytes; off += chunk) {
      ok = ::pwrite(fd, buf, chunk, static_cast<off_t>(off)) == static_cast<ssize_t>(chunk);
    }
    ok = ok && ::fsync(fd) == 0;
    const double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t0 = std::chrono::steady_clock::now();
    for (size_t off = 0; ok && off < bytes; off += chunk) {
      ok = ::pread(fd, buf, chunk, static_cast<off_t>(off)) == static_cast<ssize_t>(chunk);
    }
    const double r = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ok) rate = bytes / std::max(w, r);
    ::close(fd);
  }
  std::free(buf);
  return rate;
}

}  // namespace

MachineProbe probe_machine(const std::string& ssd_dir) {
  MachineProbe m;
  const int n = 512;
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
  double t = time_it([&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); }, 5);
  m.compute_flops = 2.0 * n * n * n / t;
  std::vector<char> src(64 << 20, 1), dst(64 << 20);
  t = time_it([&] { std::memcpy(dst.data(), src.data(), src.size()); }, 3);
  m.h2d_bytes_per_s = src.size() / t;
  m.host_mem_bytes_per_s = 2.0 * src.size() / t;  // a copy reads and writes
  const MemInfo mem = read_meminfo();
  m.dram_total_bytes = mem.total_bytes.value_or(0);
  m.dram_available_bytes = mem.available_bytes.value_or(0);
  m.ssd_bytes_per_s = probe_disk(ssd_dir);
  if (!ssd_dir.empty()) {
    const FsSpace space = read_fs_space(ssd_dir);
    m.ssd_free_bytes = space.free_bytes.value_or(0);
    m.ssd_total_bytes = space.total_bytes.value_or(0);
  }
  return m;
}

TierPlacement place_tiers(const ModelConfig& config, const TrainJob& job, uint64_t dram_available_bytes) {
  const uint64_t fp32 = ParameterLayout::build(config).total_numel() * 4;
  const uint64_t cap = job.dram_cap_bytes ? job.dram_cap_bytes : dram_available_bytes;
  TierPlacement p;
  // DRAM always holds the gradients and the compute copy of the weights.
  uint64_t used = 2 * fp32;
  p.optimizer_on_ssd = job.optimizer_tier == TierChoice::kSsd ||
                       (job.optimizer_tier == TierChoice::kAuto && cap > 0 && used + 2 * fp32 > cap);
  if (!p.optimizer_on_ssd) used += 2 * fp32;
  p.master_on_ssd = job.master_tier == TierChoice::kSsd ||
                    (job.master_tier == TierChoice::kAuto && p.optimizer_on_ssd && cap > 0 && used > cap);
  if (p.master_on_ssd) p.optimizer_on_ssd = true;
  return p;
}

nlohmann::json make_plan(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine, int64_t total_steps) {
  const ParameterLayout layout = ParameterLayout::build(config);
  const double P = static_cast<double>(layout.parameter_count());
  const uint64_t padded = layout.total_numel();
  const uint64_t fp32 = padded * 4;

  // HBM: what the streaming engine allocates (act dtype fp32 on the CPU backend, bf16 on CUDA).
  StreamingConfig sc;
  sc.weight_slots = job.weight_slots;
  sc.micro_batch_size = job.micro_batch_size;
  sc.max_micro_batches = job.grad_accum;
  sc.seq_len = job.seq_len;
  const DType act_dtype = machine.backend == "cuda" ? DType::kBF16 : DType::kF32;
  const size_t act = dtype_size(act_dtype);
  // The backend's workspace is not known without a backend: its bulk is the LM head's logits chunk
  // and their gradient, [lm_head_chunk, vocab] fp32 each.
  const uint64_t backend_ws = 2 * std::min<uint64_t>(sc.lm_head_chunk, static_cast<uint64_t>(job.micro_batch_size) * job.seq_len) *
                              config.vocab_size * sizeof(float);
  const DeviceMemoryPlan hbm = StreamingEngine::plan_device_memory(layout, sc, act_dtype, backend_ws);
  const uint64_t hbm_fixed = hbm.fixed_bytes();
  const uint64_t slots = hbm.weight_slot_bytes;
  const uint64_t grads_dev = hbm.gradient_bytes;
  const uint64_t tokens_mb = static_cast<uint64_t>(job.micro_batch_size) * job.seq_len;
  const uint64_t ckpt = (static_cast<uint64_t>(config.num_layers) + 2) * job.grad_accum * tokens_mb * config.hidden_size * act;
  const uint64_t device_cap = job.device_memory_bytes ? job.device_memory_bytes : machine.device_total_bytes;
  const bool ckpt_on_device = device_cap == 0 || hbm_fixed + ckpt <= device_cap;

  // DRAM / SSD: master weights, gradients, AdamW moments.
  const TierPlacement placement = place_tiers(config, job, machine.dram_available_bytes);
  const bool opt_ssd = placement.optimizer_on_ssd, master_ssd = placement.master_on_ssd;
  nlohmann::json tiers;
  tiers["hbm"]["categories"] = {{"weights_bytes", slots}, {"gradients_bytes", grads_dev},
                                {"workspace_bytes", hbm.workspace_bytes},
                                {"checkpoints_bytes", ckpt_on_device ? ckpt : 0}};
  tiers["hbm"]["needed_bytes"] = hbm_fixed + (ckpt_on_device ? ckpt : 0);
  tiers["hbm"]["total_bytes"] = device_cap;
  tiers["hbm"]["free_bytes"] = device_cap;
  // The weights the engine streams stay in DRAM: on the CPU backend the fp32 master doubles as
  // that copy (so moving the master to the SSD frees nothing there); on CUDA it is a bf16 copy.
  const bool cpu = machine.backend == "cpu";
  const uint64_t compute_copy = cpu ? (master_ssd ? fp32 : 0) : padded * 2;
  const uint64_t master_dram = master_ssd ? 0 : fp32;
  tiers["dram"]["categories"] = {{"weights_bytes", compute_copy}, {"master_bytes", master_dram}, {"gradients_bytes", fp32},
                                 {"optimizer_bytes", opt_ssd ? 0 : 2 * fp32},
                                 {"checkpoints_bytes", ckpt_on_device ? 0 : ckpt}};
  uint64_t dram_needed = compute_copy + master_dram + fp32 + (opt_ssd ? 0 : 2 * fp32) + (ckpt_on_device ? 0 : ckpt);
  if (machine.backend == "cpu" && device_cap == 0) dram_needed += hbm_fixed + ckpt;  // the CPU "device" is DRAM too
  tiers["dram"]["needed_bytes"] = dram_needed;
  tiers["dram"]["total_bytes"] = machine.dram_total_bytes;
  tiers["dram"]["free_bytes"] = job.dram_cap_bytes ? std::min(job.dram_cap_bytes, machine.dram_available_bytes) : machine.dram_available_bytes;
  const uint64_t ssd_needed = (opt_ssd ? 2 * fp32 : 0) + (master_ssd ? fp32 : 0);
  tiers["ssd"]["categories"] = {{"optimizer_bytes", opt_ssd ? 2 * fp32 : 0}, {"master_bytes", master_ssd ? fp32 : 0}};
  tiers["ssd"]["needed_bytes"] = ssd_needed;
  tiers["ssd"]["total_bytes"] = machine.ssd_total_bytes;
  tiers["ssd"]["free_bytes"] = machine.ssd_free_bytes;

  std::string reason;
  if (device_cap && hbm_fixed > device_cap) {
    reason = "HBM: needs " + gb(hbm_fixed) + " (2 weight slots of the largest block, gradient buffers, one micro-batch's "
             "activations) but has " + gb(device_cap) + "; lower micro_batch_size or seq_len";
  } else if (dram_needed > tiers["dram"]["free_bytes"].get<uint64_t>()) {
    reason = "DRAM: needs " + gb(dram_needed) + " but " + gb(tiers["dram"]["free_bytes"].get<uint64_t>()) + " is available; " +
             (opt_ssd && master_ssd
                  ? std::string("what remains is the gradients and the weights the device streams: a smaller model, more "
                                "DRAM, or the CUDA backend (its streamed copy is bf16)")
                  : std::string("set placement.optimizer (and placement.master) to \"ssd\" or \"auto\" with an ssd_dir"));
  } else if (ssd_needed > 0 && ssd_needed > machine.ssd_free_bytes) {
    reason = "SSD: needs " + gb(ssd_needed) + " in " + (job.ssd_dir.empty() ? std::string("(no ssd_dir)") : job.ssd_dir) +
             " but " + gb(machine.ssd_free_bytes) + " is free; free space or choose another ssd_dir";
  }

  // Step time. FLOPs: 6·P per token for forward+backward plus 2·P for the recomputed forward, and
  // attention 12·L·T·h per token (forward+backward, causal halves it: 6·L·T·h) — Chinchilla/PaLM counting.
  const double tokens = static_cast<double>(tokens_mb) * job.grad_accum;
  const double attn = 6.0 * config.num_layers * job.seq_len * config.q_dim() * 4.0 / 3.0;
  const double flops = tokens * (8.0 * P + attn);
  const double compute_s = flops / std::max(machine.compute_flops, 1.0);
  const double block_bytes = static_cast<double>(padded) * act;
  const double h2d_s = (2.0 * block_bytes + (ckpt_on_device ? 0 : 2.0 * ckpt)) / std::max(machine.h2d_bytes_per_s, 1.0);
  const double d2h_s = (static_cast<double>(fp32) + (ckpt_on_device ? 0 : ckpt)) / std::max(machine.h2d_bytes_per_s, 1.0);
  const double ssd_bw = machine.ssd_bytes_per_s > 0 ? machine.ssd_bytes_per_s : 2e9;
  const double ssd_s = 2.0 * static_cast<double>(ssd_needed) / ssd_bw;  // read and write back every step
  // AdamW touches p, g, m, v (read) and p, m, v (write): 28 bytes per parameter.
  const double optimizer_s = 28.0 * P / std::max(machine.host_mem_bytes_per_s, 1.0);
  struct Part {
    const char* name;
    double s;
  };
  // On the CPU backend compute, copies and the optimizer share the same cores: they add up.
  const bool overlapped = machine.backend != "cpu";
  std::vector<Part> parts = {{"compute", compute_s}, {"h2d", h2d_s + d2h_s}, {"ssd", ssd_s}, {"optimizer", optimizer_s}};
  const Part worst = *std::max_element(parts.begin(), parts.end(), [](auto& a, auto& b) { return a.s < b.s; });
  const double step_s = overlapped ? worst.s : compute_s + optimizer_s + ssd_s;
  nlohmann::json step = {{"tokens", tokens},       {"flops", flops},         {"compute_s", compute_s},
                         {"h2d_s", h2d_s},         {"d2h_s", d2h_s},         {"ssd_s", ssd_s},
                         {"optimizer_s", optimizer_s}, {"step_s", step_s},   {"tokens_per_s", tokens / step_s},
                         {"eta_s", step_s * total_steps}, {"bottleneck", worst.name}, {"total_steps", total_steps}};
  return {{"fits", reason.empty()},
          {"reason", reason},
          {"backend", machine.backend},
          {"model", {{"architecture", config.architecture}, {"parameters", P}, {"layers", config.num_layers},
                     {"hidden_size", config.hidden_size}, {"vocab_size", config.vocab_size}}},
          {"machine", {{"compute_flops", machine.compute_flops}, {"h2d_bytes_per_s", machine.h2d_bytes_per_s},
                       {"host_mem_bytes_per_s", machine.host_mem_bytes_per_s},
                       {"ssd_bytes_per_s", machine.ssd_bytes_per_s}}},
          {"tiers", tiers},
          {"step", step}};
}

}  // namespace spillway
