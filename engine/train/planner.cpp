#include "train/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "compute/cuda-workspace.h"
#include "core/checked-math.h"
#include "model/parameter-layout.h"
#include "train/hbm-state.h"
#include "train/streaming-engine.h"

namespace spillway {

Status check_positions(const ModelConfig& config, const TrainJob& job) {
  if (job.seq_len <= config.max_position_embeddings) return {};
  // RoPE runs past it, but the model never saw such positions: a silent loss of quality.
  return invalid_argument("data.seq_len " + std::to_string(job.seq_len) +
                          " is beyond the model's max_position_embeddings " +
                          std::to_string(config.max_position_embeddings) + "; lower data.seq_len");
}
namespace {

// The engine's op shapes on `machine`: with cuDNN's attention workspace where the probe saw cuDNN
// run attention (Backend::workspace_bytes does the same on the engine's side).
compute::OpShapes op_shapes_on(const MachineProbe& machine, const ModelConfig& config,
                               const StreamingConfig& sc) {
  compute::OpShapes s = StreamingEngine::op_shapes(config, sc);
  s.fused_attention = machine.fused_attention();
  return s;
}

}  // namespace

namespace {

// Bytes in the unit that shows them ("107.81 GB", "4.19 MB", "512 bytes"): a small job's
// shortfall must not read "needs 0.00 GB but 0.00 GB is available".
std::string gb(double bytes) {
  char buf[32];
  if (bytes >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  else if (bytes >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.2f MB", bytes / 1e6);
  else if (bytes >= 1e3)
    std::snprintf(buf, sizeof(buf), "%.2f kB", bytes / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.0f bytes", bytes);
  return buf;
}

}  // namespace

StreamingConfig streaming_config(const TrainJob& job) {
  StreamingConfig sc;
  sc.weight_slots = job.weight_slots;
  sc.micro_batch_size = job.micro_batch_size;
  sc.max_micro_batches = job.grad_accum;
  sc.seq_len = job.seq_len;
  sc.hbm_state_blocks = job.hbm_state_blocks;
  sc.saved_activation_layers = std::max(job.saved_activation_layers, 0);
  sc.mlp_recompute_layers = std::max(job.mlp_recompute_layers, 0);
  return sc;
}

StepFlops step_flops(const ModelConfig& config, double tokens, int seq_len, int saved_layers,
                     int mlp_recompute_layers) {
  const double embedding = static_cast<double>(config.vocab_size) * config.hidden_size;
  const double params = static_cast<double>(ParameterLayout::build(config).parameter_count());
  const double matmul_params = config.tie_word_embeddings ? params : params - embedding;
  // Scores and the weighted sum: per layer and token, the keys it attends (seq_len, or the sliding
  // window on a local layer) of q_dim = heads · head_dim (which Qwen3 sets apart from hidden_size,
  // and Gemma's 256-wide heads make 8/9 of it on gemma-3-1b).
  const double attention = config.attended_keys(seq_len) * config.q_dim();
  // The saved layers' share of the recompute (the layers' matmuls but the down projection, which
  // the recompute skips, and the attention; not the LM head's), as if the layers were alike; of
  // the layers that recompute only the MLP's gate and up, the attention's projections and the
  // attention.
  const double L = std::max(config.num_layers, 1);
  const int full = std::clamp(saved_layers, 0, config.num_layers);
  const int part = std::clamp(mlp_recompute_layers, 0, config.num_layers - full);
  const double attention_projections = static_cast<double>(config.hidden_size) *
                                       (2.0 * config.q_dim() + 2.0 * config.kv_dim()) *
                                       config.num_layers;
  const double down_projections =
      static_cast<double>(config.hidden_size) * config.intermediate_size * config.num_layers;
  const double not_recomputed =
      2.0 * tokens *
      (full / L * (matmul_params - embedding - down_projections + attention) +
       part / L * (attention_projections + attention));
  return {6.0 * (matmul_params + attention) * tokens,
          8.0 * (matmul_params + attention) * tokens - not_recomputed};
}

namespace {

// Elements a layer's element-wise ops (norms, activation, residual adds) pass over per token:
// two hidden-wide norms and the intermediate activation, two more norms with Gemma's sandwich
// norms, and the q and k rows with per-head q/k norms.
double layer_elementwise_width(const ModelConfig& c) {
  return (c.sandwich_norms ? 4.0 : 2.0) * c.hidden_size + c.intermediate_size +
         (c.qk_norm != QkNorm::kNone ? static_cast<double>(c.q_dim() + c.kv_dim()) : 0.0);
}

// Parameters of block b, without the alignment padding (ParameterLayout::parameter_count's).
double block_params(const ParameterLayout& layout, size_t b) {
  double n = 0;
  for (const ParamView& p : layout.blocks()[b].params) n += static_cast<double>(p.numel);
  return n;
}

}  // namespace

namespace {

// "blocks 0-4 (the embedding and layers 0-3)": blocks [first, first + count) in words.
std::string block_range_text(const ParameterLayout& layout, size_t first, size_t count) {
  const size_t last = first + count - 1, n = layout.num_blocks();
  auto name = [&](size_t b) {
    return b == 0       ? std::string("the embedding")
           : b + 1 == n ? std::string("the head")
                        : "layer " + std::to_string(b - 1);
  };
  std::string what = name(first);
  if (count == 2) what += " and " + name(last);
  if (count > 2) {
    const size_t l0 = first == 0 ? 1 : first, l1 = last + 1 == n ? last - 1 : last;
    const std::string layers =
        l0 == l1 ? "layer " + std::to_string(l0 - 1)
                 : "layers " + std::to_string(l0 - 1) + "-" + std::to_string(l1 - 1);
    what = first == 0 && last + 1 == n ? "the embedding, " + layers + " and the head"
           : first == 0                ? "the embedding and " + layers
           : last + 1 == n             ? layers + " and the head"
                                       : layers;
  }
  return (count == 1 ? "block " + std::to_string(first)
                     : "blocks " + std::to_string(first) + "-" + std::to_string(last)) +
         " (" + what + ")";
}

// fp32 bytes of blocks [first, first + count), of those `held` names (empty: all).
uint64_t blocks_fp32(const ParameterLayout& layout, size_t first, size_t count,
                     const std::vector<bool>& held = {}) {
  uint64_t n = 0;
  for (size_t b = first; b < first + count; ++b)
    n += held.empty() || held[b] ? layout.blocks()[b].numel * 4 : 0;
  return n;
}

// PlanState::host_why: which blocks sit in which host tier.
std::string host_tiers_text(const ParameterLayout& layout, const BlockTiers& t) {
  std::string out;
  auto add = [&](size_t first, size_t count, const char* where) {
    if (count == 0) return;
    out += (out.empty() ? "" : "; ") + block_range_text(layout, first, count) + " " + where;
  };
  add(0, t.dram, "in DRAM");
  add(t.dram, t.ssd_moments, "with the master in DRAM and the moments on the SSD");
  add(t.dram + t.ssd_moments, t.ssd, "with master and moments on the SSD");
  return out;
}

}  // namespace

TierPlacement place_tiers(const ParameterLayout& layout, const TrainJob& job,
                          uint64_t dram_free_bytes, uint64_t other_dram_bytes,
                          const std::vector<bool>& held) {
  const size_t n = layout.num_blocks();
  const uint64_t fp32 = blocks_fp32(layout, 0, n, held);
  // DRAM always holds the fp32 master (or, with it on the SSD, the copy the engine streams).
  const uint64_t fixed = fp32 + other_dram_bytes;
  const bool unknown = dram_free_bytes == 0;
  TierPlacement p;
  std::string why;
  if (job.master_tier == TierChoice::kSsd) {
    p.blocks = BlockTiers::all(n, BlockTiers::kSsd);
    why = "placement.master is \"ssd\"";
  } else if (job.optimizer_tier == TierChoice::kSsd) {
    const bool master = job.master_tier == TierChoice::kAuto && !unknown && fixed > dram_free_bytes;
    p.blocks = BlockTiers::all(n, master ? BlockTiers::kSsd : BlockTiers::kSsdMoments);
    why = "placement.optimizer is \"ssd\"";
  } else if (job.optimizer_tier == TierChoice::kDram) {
    p.blocks = BlockTiers::all(n, BlockTiers::kDram);
    why = "placement.optimizer is \"dram\"";
  } else if (unknown || fixed + 2 * fp32 <= dram_free_bytes) {
    p.blocks = BlockTiers::all(n, BlockTiers::kDram);
    why = unknown ? "the free DRAM is unknown" : "they fit in DRAM";
  } else if (fixed > dram_free_bytes && job.master_tier == TierChoice::kAuto) {
    p.blocks = BlockTiers::all(n, BlockTiers::kSsd);
    why = "DRAM cannot hold even the master weights, gradients and the rest (" +
          gb(static_cast<double>(fixed)) + " of " + gb(static_cast<double>(dram_free_bytes)) + ")";
  } else {
    // The moments of as many of the first blocks as fit (8 bytes a parameter), the rest on the SSD.
    const uint64_t room = dram_free_bytes > fixed ? dram_free_bytes - fixed : 0;
    size_t d = 0;
    for (uint64_t used = 0; d < n; ++d) {
      used += 2 * blocks_fp32(layout, d, 1, held);
      if (used > room) break;
    }
    p.blocks.dram = d;
    p.blocks.ssd_moments = n - d;
    why = "the moments of every block (" + gb(2.0 * fp32) + ") do not fit in " +
          gb(static_cast<double>(dram_free_bytes)) + " of DRAM beside " +
          gb(static_cast<double>(fixed)) +
          " of master weights, gradients and the rest: the fastest tier with room for each";
  }
  p.why = host_tiers_text(layout, p.blocks) + ": " + why;
  return p;
}

TierPlacement plan_placement(const Plan& plan) {
  TierPlacement p;
  p.blocks.dram = static_cast<size_t>(std::max(plan.state.dram_blocks, 0));
  p.blocks.ssd_moments = static_cast<size_t>(std::max(plan.state.ssd_moments_blocks, 0));
  p.blocks.ssd = static_cast<size_t>(std::max(plan.state.ssd_blocks, 0));
  p.why = plan.state.host_why;
  return p;
}

namespace {

// A GPU step's compute time by part (planner.h, kGpuGemmEfficiency and below); all 0 on the CPU.
struct GpuCompute {
  double gemm_s = 0, attention_s = 0, lm_head_s = 0, elementwise_s = 0, key_bias_s = 0;
};

GpuCompute gpu_compute(const ModelConfig& c, const ParameterLayout& layout, const TrainJob& job,
                       const MachineProbe& machine, int lm_head_chunk, const DataShape& data) {
  const double gemm_flops_per_s = std::max(machine.compute_flops, 1.0) * kGpuGemmEfficiency;
  const double tokens_mb = static_cast<double>(job.micro_batch_size) * job.seq_len;
  const double tokens = tokens_mb * job.grad_accum;
  const double L = c.num_layers, H = c.hidden_size, V = c.vocab_size;
  double layer_params = 0;  // blocks 1..L: the decoder layers
  for (int b = 1; b <= c.num_layers; ++b)
    layer_params += static_cast<double>(layout.blocks()[b].numel);
  const double chunks =
      std::ceil(tokens_mb / std::min<double>(lm_head_chunk, tokens_mb)) * job.grad_accum;
  GpuCompute g;
  // The last `saved` layers keep their activations and skip the recompute (the forward's GEMMs but
  // the down projection, which the recompute skips; a quarter of the element-wise passes; of the
  // attention's FLOPs, half the forward's half); the `part` before them recompute only the MLP's
  // gate, up and activation (they skip the attention's projections, the attention and the norms'
  // and RoPE's passes).
  const int saved = std::clamp(job.saved_activation_layers, 0, c.num_layers);
  const int part = std::clamp(job.mlp_recompute_layers, 0, c.num_layers - saved);
  const double saved_share = c.num_layers > 0 ? saved / L : 0.0;
  const double part_share = c.num_layers > 0 ? part / L : 0.0;
  const double attention_projections = H * (2.0 * c.q_dim() + 2.0 * c.kv_dim()) * L;
  const double down_projections = H * c.intermediate_size * L;
  g.gemm_s = (8.0 * layer_params - 2.0 * saved_share * (layer_params - down_projections) -
              2.0 * part_share * attention_projections) *
             tokens / gemm_flops_per_s;
  // Per layer (planner.h): half the FLOPs (the forward and its recompute) at cuDNN's rate where
  // its kernels run the forward, the other half (the backward) where they run that too; the
  // module's rate for the rest.
  const bool fused_forward = machine.fused_attention() &&
                             cuda::cudnn_attention_covers(c.num_heads, c.num_kv_heads, c.head_dim);
  // Packed rows run their examples in chunks that fit (cudnn-attention.h); whole rows as
  // cuda-workspace.h bounds them.
  const bool fused_backward =
      fused_forward &&
      (data.packed || cuda::cudnn_attention_backward_chunk(job.micro_batch_size, job.seq_len,
                                                           c.num_heads, c.num_kv_heads, c.head_dim)
                          .covered());
  const double own = std::max(machine.compute_flops, 1.0) * gpu_attention_efficiency(c.head_dim);
  const double fused = std::max(machine.compute_flops, 1.0) *
                       gpu_attention_efficiency(c.head_dim, true, data.packed);
  for (int l = 0; l < c.num_layers; ++l) {
    const int w = c.layer_window(l);
    const double keys = w > 0 ? std::min(w, job.seq_len) : job.seq_len;
    const double flops = data.attention * 8.0 * keys * c.q_dim() * tokens;
    const bool layer_backward_fused =
        fused_backward && cuda::cudnn_attention_backward_takes_window(w, job.seq_len);
    const double forward_share = l >= c.num_layers - saved - part ? 0.25 : 0.5;
    g.attention_s += forward_share * flops / (fused_forward ? fused : own) +
                     0.5 * flops / (layer_backward_fused ? fused : own);
  }
  g.lm_head_s = 6.0 * V * H * tokens / gemm_flops_per_s +
                (16.0 * V * tokens + chunks * 8.0 * V * H) / kGpuHbmBytesPerS;
  const double width = layer_elementwise_width(c);
  g.elementwise_s =
      (1.0 - 0.25 * saved_share - 0.25 * part_share * (width - c.intermediate_size) / width) *
      kGpuElementwiseBytes * L * width * tokens / kGpuHbmBytesPerS;
  if (c.attention_bias) {  // per query head and token, seq_len / 2 visible keys on average
    const double fmas = L * c.num_heads * tokens * (job.seq_len / 2.0) * c.head_dim;
    g.key_bias_s =
        data.attention * fmas / (std::max(machine.compute_flops, 1.0) * kGpuKeyBiasFmasPerFlop);
  }
  return g;
}

// A CPU step's compute by part (planner.h, "CPU step"): the GEMMs at the probed sgemm rate, the
// attention per score at the probed attention rate, and the rest per element at host bandwidth.
struct CpuCompute {
  double gemm_s = 0, attention_s = 0, elementwise_s = 0;
  bool calibrated = false;  // the attention was probed on this machine
};

CpuCompute cpu_compute(const ModelConfig& c, const TrainJob& job, const MachineProbe& machine,
                       const DataShape& data) {
  const double embedding = static_cast<double>(c.vocab_size) * c.hidden_size;
  const double params = static_cast<double>(ParameterLayout::build(c).parameter_count());
  const double matmul_params = c.tie_word_embeddings ? params : params - embedding;
  const double sequences = static_cast<double>(job.micro_batch_size) * job.grad_accum;
  const double tokens = sequences * job.seq_len;
  const double L = c.num_layers, V = c.vocab_size;
  // The GEMMs at the job's own shapes where the probe timed them, else at the 512³ rate.
  const double gemm_flops_per_s =
      std::max(machine.cpu_gemm_flops > 0 ? machine.cpu_gemm_flops : machine.compute_flops, 1.0);
  CpuCompute cpu;
  cpu.gemm_s = 8.0 * matmul_params * tokens / gemm_flops_per_s;
  const double scores = sequences * c.num_heads * c.attention_scores(job.seq_len);
  const bool probed = machine.cpu_attention_s_per_score > 0;
  cpu.attention_s = data.attention * (probed ? scores * machine.cpu_attention_s_per_score
                                             : 8.0 * c.attended_keys(job.seq_len) * c.q_dim() *
                                                   tokens / gemm_flops_per_s);
  // Held to 25% on 2 cores (tests/bench/figures/calibration-cpu.json). On more, the probes load
  // fewer cores than the step does (the attention's one sequence, at most 512 GEMM rows, one
  // memcpy thread for the element-wise ops' bandwidth): on a 16-core host the step came out
  // 0.29–1.11 of the prediction (2026-11-27), so such a plan says it is uncalibrated.
  cpu.calibrated =
      probed && machine.cpu_threads >= 1 && machine.cpu_threads <= kCpuCalibratedThreads;
  // At the bandwidth all the backend's threads get (the ops run on its pool), where probed.
  const double stream = machine.cpu_stream_bytes_per_s > 0 ? machine.cpu_stream_bytes_per_s
                                                           : machine.host_mem_bytes_per_s;
  cpu.elementwise_s =
      kCpuElementwiseBytes * (L * layer_elementwise_width(c) + V) * tokens / std::max(stream, 1.0);
  return cpu;
}

// Each block's share of a GPU step's forward, in block order (embedding, layers, head), from the
// parts of gpu_compute: a layer's GEMMs by its parameters, its attention by the keys it attends
// (a sliding layer its window), the element-wise ops and key bias evenly; the head its LM head;
// the embedding, a gather, none. Sums to 1.
std::vector<double> forward_shares(const ModelConfig& c, const ParameterLayout& layout,
                                   const GpuCompute& g, int seq_len) {
  const size_t n = layout.num_blocks(), L = static_cast<size_t>(c.num_layers);
  double layer_params = 0, keys = 0;
  for (size_t l = 0; l < L; ++l) {
    layer_params += block_params(layout, 1 + l);
    const int w = c.layer_window(static_cast<int>(l));
    keys += w > 0 ? std::min(w, seq_len) : seq_len;
  }
  std::vector<double> share(n, 0.0);
  for (size_t l = 0; l < L; ++l) {
    const int w = c.layer_window(static_cast<int>(l));
    share[1 + l] = g.gemm_s * block_params(layout, 1 + l) / std::max(layer_params, 1.0) +
                   g.attention_s * (w > 0 ? std::min(w, seq_len) : seq_len) / std::max(keys, 1.0) +
                   (g.elementwise_s + g.key_bias_s) / std::max<double>(L, 1);
  }
  share[n - 1] += g.lm_head_s;
  double total = 0;
  for (double s : share) total += s;
  for (double& s : share) s = total > 0 ? s / total : 1.0 / static_cast<double>(n);
  return share;
}

// How long the next forward waits for the CPU's AdamW when the HBM state tier holds blocks
// [0, hbm_blocks), none or more (docs/architecture.md, "The planner"): the per-block timeline from
// the end of the backward (t = 0). The GPU updates the tier's blocks (gpu_adamw_s), then runs the
// forward, block b taking forward_s · forward_share[b]; meanwhile the CPU updates blocks
// hbm_blocks.. in forward order, block b taking its part of adamw_s by parameters (cpu_params[b]),
// and block b's forward starts no earlier than its update's end (the weight gate). The wait is how
// much later the forward ends than gpu_adamw_s + forward_s.
double forward_wait_s(const std::vector<double>& forward_share,
                      const std::vector<double>& cpu_params, size_t hbm_blocks, double gpu_adamw_s,
                      double forward_s, double adamw_s) {
  double cpu_total = 0;
  for (size_t b = hbm_blocks; b < cpu_params.size(); ++b) cpu_total += cpu_params[b];
  if (cpu_total <= 0) return 0.0;  // every block in HBM: nothing to wait for
  double t = gpu_adamw_s, updated = 0;
  for (size_t b = 0; b < forward_share.size(); ++b) {
    if (b >= hbm_blocks) {
      updated += adamw_s * cpu_params[b] / cpu_total;
      t = std::max(t, updated);
    }
    t += forward_s * forward_share[b];
  }
  return std::max(0.0, t - (gpu_adamw_s + forward_s));
}

// "the embedding and layers 0-16": the first `blocks` blocks in words.
std::string blocks_text(const ParameterLayout& layout, size_t blocks) {
  const int L = layout.config().num_layers;
  const std::string layers = L == 1 ? "layer 0" : "layers 0-" + std::to_string(L - 1);
  if (blocks >= layout.num_blocks()) return "every block (the embedding, " + layers + ", the head)";
  if (blocks == 1) return "the embedding";
  if (blocks == 2) return "the embedding and layer 0";
  return "the embedding and layers 0-" + std::to_string(blocks - 2);
}

// PlanState::why: one line on why the HBM state tier holds `blocks` blocks. `asked` is
// placement.hbm_state_blocks; `fitting` how many fit when the asked ones do not.
std::string state_why(const ParameterLayout& layout, int asked, bool host_memory, int ranks,
                      size_t blocks, uint64_t state_bytes, uint64_t fixed, uint64_t ckpt,
                      uint64_t device_free, size_t fitting) {
  const double streaming = static_cast<double>(fixed), checkpoints = static_cast<double>(ckpt);
  if (asked == 0) return "none in HBM: placement.hbm_state_blocks is 0";
  if (blocks == 0 && host_memory)
    return "none on the CPU backend: its device memory is DRAM already";
  if (ranks > 1)
    return "none in HBM: the HBM state tier trains on one GPU only for now (placement.devices "
           "spreads the step over " +
           std::to_string(ranks) + ")";
  if (blocks == 0 && device_free == 0) return "none in HBM: the GPU's free memory is unknown";
  if (blocks == 0) {
    return "none in HBM: of the " + gb(static_cast<double>(device_free)) +
           " free, streaming takes " + gb(streaming) + ", the checkpoints kept there " +
           gb(checkpoints) + " (they come first) and " +
           gb(static_cast<double>(StreamingEngine::kHbmStateReserveBytes)) +
           " stays free for the libraries: no room for the embedding's " +
           gb(static_cast<double>(HbmState::block_bytes(layout, 0)));
  }
  if (fitting < blocks) {
    return "placement.hbm_state_blocks asks for the first " + std::to_string(blocks) + " blocks (" +
           gb(static_cast<double>(state_bytes)) + ") but beside streaming (" + gb(streaming) +
           ") only " + std::to_string(fitting) + " fit in " + gb(static_cast<double>(device_free)) +
           " free";
  }
  const size_t rest = layout.num_blocks() - blocks;
  return blocks_text(layout, blocks) +
         (asked < 0 ? ", as many as fit beside " + gb(streaming + checkpoints) +
                          " of streaming and checkpoints"
                    : std::string(", as placement.hbm_state_blocks asks")) +
         (rest == 0 ? std::string("; no AdamW on the CPU, no weights or gradients over the link")
                    : "; the CPU's AdamW updates the other " + std::to_string(rest) +
                          " while their forward runs");
}

// The devices the step is spread over (placement.devices), as the run resolves them
// (run-assembly.cpp, create_backend): on a GPU backend job::resolve_devices against machine.gpus,
// or when the probe did not count them (machine.gpus 0: the trainer's fit check) the selection as
// it asks ("all" as one); on the CPU backend a count of CPU ranks ("all": 1), which list no GPU.
Result<std::vector<int>> job_devices(const TrainJob& job, const MachineProbe& machine) {
  const job::DeviceSelection& d = job.devices;
  if (!machine.backend_facts().gpu) {
    SPW_ASSIGN_OR_RETURN(const int ranks, job::resolve_cpu_ranks(d, job.backend == "cpu"));
    return std::vector<int>(static_cast<size_t>(ranks), 0);
  }
  if (machine.gpus > 0) return job::resolve_devices(d, machine.gpus);
  if (!d.indices.empty()) return d.indices;
  std::vector<int> first(d.all ? 1 : static_cast<size_t>(std::max(d.count, 1)));
  for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<int>(i);
  return first;
}

// The exposed time of the reduce-scatters of a data-parallel step over `ranks` GPUs
// (streaming-engine.cpp, finish_grad_share): each block's gradient buffer, padded to a multiple of
// `ranks` floats, is reduce-scattered on its own stream as soon as its backward ends, S·(N-1)/N
// bytes per GPU at `bus_bytes_per_s` (nccl-tests' bus bandwidth), one block after another, while
// the backward goes on to the next block. Past one machine it is a reduce over every GPU of
// `machines` machines into the GPU that carries the block: S bytes per GPU (a ring's or a
// chain's every rank sends the block on once), which cross each machine's network as well, at the
// slower of the two. Backward
// order (head, layers L-1..0, embedding), block b taking backward_s · share[b] (forward_shares: the
// embedding's, a scatter-add, none). Returns the time the last reduce ends after the backward (the
// embedding's whole reduce at least, and what the longer ones queued), and in `bytes` and `busy_s`
// the bytes each GPU sends and the reduces' time in all.
double exposed_reduce_s(const ParameterLayout& layout, const std::vector<double>& share,
                        double backward_s, int ranks, int machines, double bus_bytes_per_s,
                        double* bytes, double* busy_s) {
  const double all = static_cast<double>(ranks) * machines;
  const double per_byte = machines > 1 ? 1.0 : (all - 1) / all;
  double computed = 0, reduced = 0;
  *bytes = *busy_s = 0;
  for (size_t b = layout.num_blocks(); b-- > 0;) {
    const uint64_t numel = layout.blocks()[b].numel;
    const double padded =
        static_cast<double>(machines > 1 ? numel : (numel + ranks - 1) / ranks * ranks);
    const double block_bytes = per_byte * 4.0 * padded;
    computed += backward_s * share[b];
    reduced = std::max(reduced, computed) + block_bytes / bus_bytes_per_s;
    *bytes += block_bytes;
    *busy_s += block_bytes / bus_bytes_per_s;
  }
  return std::max(0.0, reduced - computed);
}

// The plan of `job` with the checkpoints of at most the first `device_checkpoint_layers` layers
// kept on the device (StreamingConfig::device_checkpoint_layers; -1: every layer's): the step
// model of plan_job, for one split of HBM between checkpoints and the state tier.
Plan plan_split(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine,
                int64_t total_steps, const DataShape& data, int device_checkpoint_layers) {
  const ParameterLayout layout = ParameterLayout::build(config);
  const double P = static_cast<double>(layout.parameter_count());

  // The GPUs (or CPU ranks): each runs the job's micro-batches and accumulation, so the step has N
  // times the tokens; each GPU's arena and link are planned as one GPU's (data-parallel-engine.h).
  const Result<std::vector<int>> devices = job_devices(job, machine);
  const int ranks = devices.ok() ? static_cast<int>(devices->size()) : 1;
  const double N = ranks;
  // Past one machine: each of `machines` runs this one's GPUs and holds the state of its blocks
  // (block-owners.h): the planned process's (MachineProbe::process; -1: the one holding most).
  const int machines = std::max(1, machine.machines);
  const bool grouped = ranks > 1 || machines > 1;
  std::vector<BlockOwner> owners;
  std::vector<bool> held;  // empty: every block
  if (machines > 1) {
    owners = assign_block_owners(layout, machines, ranks);
    int planned = machine.process;
    if (planned < 0 || planned >= machines) {
      uint64_t most = 0;
      for (int p = 0; p < machines; ++p) {
        const uint64_t bytes = blocks_fp32(layout, 0, layout.num_blocks(), held_blocks(owners, p));
        if (bytes > most) most = bytes, planned = p;
      }
    }
    held = held_blocks(owners, planned);
  }
  const uint64_t host_fp32 = blocks_fp32(layout, 0, layout.num_blocks(), held);

  // HBM: what the streaming engine allocates (act dtype fp32 on the CPU backend, bf16 on CUDA),
  // on each GPU: with several, the gradient buffers padded to a multiple of N floats.
  StreamingConfig sc = streaming_config(job);
  sc.data_parallel_ranks = ranks;
  sc.data_parallel_processes = machines;
  sc.block_owners = owners;
  sc.device_checkpoint_layers = device_checkpoint_layers;
  const compute::BackendFacts& facts = machine.backend_facts();
  const DType act_dtype = facts.act_dtype;
  const size_t act = dtype_size(act_dtype);
  // The backend's own workspace formula, known without a backend (compute/backend-facts.h).
  const uint64_t backend_ws =
      compute::workspace_bytes(facts.kind, op_shapes_on(machine, config, sc));
  const DeviceMemoryPlan hbm =
      StreamingEngine::plan_device_memory(layout, sc, act_dtype, backend_ws);
  const uint64_t hbm_fixed = hbm.fixed_bytes();
  const uint64_t slots = hbm.weight_slot_bytes;
  const uint64_t grads_dev = hbm.gradient_bytes;
  const uint64_t tokens_mb = static_cast<uint64_t>(job.micro_batch_size) * job.seq_len;
  // Saturating: with a huge batch and a huge model the product passes 2^64 and wrapped to a
  // small number that fit.
  const uint64_t ckpt = mul_saturated({static_cast<uint64_t>(config.num_layers) + 2,
                                       static_cast<uint64_t>(job.grad_accum), tokens_mb,
                                       static_cast<uint64_t>(config.hidden_size), act});
  // Of those, what the split keeps on the device (StreamingEngine::device_checkpoint_bytes): the
  // activation gradients and the first `kept_layers` layers' checkpoints, of num_layers + 1.
  const int checkpoint_layers = config.num_layers + 1;
  const int kept_layers = device_checkpoint_layers < 0
                              ? checkpoint_layers
                              : std::min(device_checkpoint_layers, checkpoint_layers);
  // One layer's checkpoints: [micro-batch tokens, hidden] for each micro-batch.
  const uint64_t ckpt_layer = mul_saturated({static_cast<uint64_t>(job.grad_accum), tokens_mb,
                                             static_cast<uint64_t>(config.hidden_size), act});
  const uint64_t ckpt_kept = mul_saturated({static_cast<uint64_t>(kept_layers) + 1, ckpt_layer});
  const uint64_t device_cap =
      job.device_memory_bytes ? job.device_memory_bytes : machine.device_total_bytes;
  // A GPU's free memory is what the engine can have (its total less the CUDA context and others').
  const uint64_t device_free = job.device_memory_bytes || !machine.device_free_bytes
                                   ? device_cap
                                   : machine.device_free_bytes;
  // The HBM state tier: the engine's own rule for how many of the first blocks keep their master,
  // gradients and moments on the device (-1: as many as fit beside every checkpoint).
  const bool host_memory = facts.host_memory();
  // With several GPUs none: -1 gives none, and the engine refuses an explicit count (below).
  const size_t asked_blocks = StreamingEngine::hbm_state_blocks(layout, sc, act_dtype, backend_ws,
                                                                device_free, host_memory);
  const size_t state_blocks = grouped ? 0 : asked_blocks;
  const uint64_t state_bytes = HbmState::bytes(layout, state_blocks);
  // The most of the first blocks whose state fits in `room` bytes.
  auto fitting_blocks = [&](uint64_t room) {
    size_t k = 0;
    for (uint64_t used = 0; k < layout.num_blocks(); ++k) {
      used += HbmState::block_bytes(layout, k);
      if (used > room) break;
    }
    return k;
  };
  const bool state_fits = device_free == 0 || hbm_fixed + state_bytes <= device_free;
  // The kept checkpoints fit beside the rest: they stay there and the others spill; otherwise the
  // plan counts every one in host memory (the engine keeps what fits of them).
  const bool ckpt_on_device =
      device_free == 0 || hbm_fixed + state_bytes + ckpt_kept <= device_free;
  const uint64_t ckpt_device = ckpt_on_device ? ckpt_kept : 0;
  const uint64_t ckpt_spilled = ckpt - ckpt_device;

  // DRAM / SSD: master weights, gradients, AdamW moments.
  const bool cpu = host_memory;
  // The HBM state tier's blocks have no host gradient (ModelState::create): their fp32 gradient,
  // a quarter of their state there, lives only on the device.
  const uint64_t grads_dram = host_fp32 - state_bytes / 4;
  // One copy of the state whatever N; each GPU's spilled checkpoints, and each CPU rank's arena.
  const uint64_t host_ckpt = mul_saturated({ckpt_spilled, uint64_t(ranks)});
  // The CPU "device" is DRAM too.
  const uint64_t cpu_arena =
      cpu && device_cap == 0
          ? mul_saturated({hbm_fixed + state_bytes + ckpt_device, uint64_t(ranks)})
          : 0;
  Plan plan;
  plan.dram.free_bytes = job.dram_cap_bytes
                             ? std::min(job.dram_cap_bytes, machine.dram_available_bytes)
                             : machine.dram_available_bytes;
  const TierPlacement placement =
      place_tiers(layout, job, plan.dram.free_bytes, grads_dram + host_ckpt + cpu_arena, held);
  const BlockTiers& tiers = placement.blocks;
  // fp32 bytes of the blocks in each host tier, and those the update moves over the SSD each step
  // (the HBM state tier's are written there only for a checkpoint).
  const uint64_t moments_dram = 2 * blocks_fp32(layout, 0, tiers.dram, held);
  const uint64_t master_ssd = blocks_fp32(layout, tiers.dram + tiers.ssd_moments, tiers.ssd, held);
  const uint64_t moments_ssd = 2 * host_fp32 - moments_dram;
  uint64_t ssd_step_bytes = 0;
  for (size_t b = state_blocks; b < layout.num_blocks(); ++b) {
    const BlockTiers::Tier t = tiers.of(b);
    ssd_step_bytes += blocks_fp32(layout, b, 1, held) * (t == BlockTiers::kSsd          ? 3
                                                         : t == BlockTiers::kSsdMoments ? 2
                                                                                        : 0);
  }
  plan.hbm.weights_bytes = slots;
  plan.hbm.gradients_bytes = grads_dev;
  plan.hbm.workspace_bytes = hbm.workspace_bytes;
  plan.hbm.checkpoints_bytes = ckpt_device;
  if (hbm.saved_activation_bytes > 0) plan.hbm.activations_bytes = hbm.saved_activation_bytes;
  plan.hbm.needed_bytes = hbm_fixed + state_bytes + ckpt_device;
  if (state_blocks > 0) {  // HbmState::block_bytes: master, gradient, m and v of one size each
    plan.hbm.master_bytes = state_bytes / 4;
    plan.hbm.gradients_bytes = grads_dev + state_bytes / 4;
    plan.hbm.optimizer_bytes = state_bytes / 2;
  }
  plan.hbm.total_bytes = device_cap;
  plan.hbm.free_bytes = device_free;
  plan.hbm.runtime_bytes = host_memory ? 0 : kGpuRuntimeHbmBytes;
  // The engine streams the fp32 master itself (on CUDA converted to bf16 on the device,
  // weight-slots.h), so the weights need no copy of their own in DRAM, except that with the master
  // on the SSD ModelState's master buffer stays behind as the streamed copy.
  plan.dram.weights_bytes = master_ssd;
  plan.dram.master_bytes = host_fp32 - master_ssd;
  plan.dram.gradients_bytes = grads_dram;
  plan.dram.optimizer_bytes = moments_dram;
  plan.dram.checkpoints_bytes = host_ckpt;
  const uint64_t dram_needed = host_fp32 + grads_dram + moments_dram + host_ckpt + cpu_arena;
  plan.dram.needed_bytes = dram_needed;
  plan.dram.total_bytes = machine.dram_total_bytes;
  plan.dram.runtime_bytes = cpu ? kCpuRuntimeDramBytes : kGpuRuntimeDramBytes;
  const uint64_t ssd_needed = moments_ssd + master_ssd;
  plan.ssd.optimizer_bytes = moments_ssd;
  plan.ssd.master_bytes = master_ssd;
  plan.ssd.needed_bytes = ssd_needed;
  plan.ssd.total_bytes = machine.ssd_total_bytes;
  plan.ssd.free_bytes = machine.ssd_free_bytes;
  plan.state.dram_blocks = static_cast<int>(tiers.dram);
  plan.state.ssd_moments_blocks = static_cast<int>(tiers.ssd_moments);
  plan.state.ssd_blocks = static_cast<int>(tiers.ssd);
  plan.state.host_why = placement.why;

  plan.state.blocks = static_cast<int>(layout.num_blocks());
  plan.state.hbm_blocks = static_cast<int>(state_blocks);
  plan.state.hbm_bytes = state_bytes;
  plan.state.device_checkpoint_layers = ckpt_on_device ? kept_layers : 0;
  plan.state.saved_activation_layers = sc.saved_activation_layers;
  plan.state.mlp_recompute_layers = sc.mlp_recompute_layers;
  plan.state.why =
      state_why(layout, job.hbm_state_blocks, host_memory, ranks * machines, state_blocks,
                state_bytes, hbm_fixed, ckpt_kept, device_free,
                state_fits ? state_blocks
                           : fitting_blocks(device_free > hbm_fixed ? device_free - hbm_fixed : 0));

  std::string reason;
  if (Status st = check_positions(config, job); !st.ok()) {
    reason = st.message();
  } else if (sc.saved_activation_layers + sc.mlp_recompute_layers > config.num_layers) {
    reason = "placement.saved_activation_layers and mlp_recompute_layers are " +
             std::to_string(sc.saved_activation_layers) + " and " +
             std::to_string(sc.mlp_recompute_layers) + " but the model has " +
             std::to_string(config.num_layers) + " layers; lower them to " +
             std::to_string(config.num_layers) +
             " together, or set them to -1 for the plan's choice";
  } else if (!devices.ok()) {
    reason = devices.status().message();
  } else if (grouped && asked_blocks > 0) {  // the engine's refusal (StreamingEngine::create)
    reason =
        "placement.hbm_state_blocks: the HBM state tier trains on one GPU only for now; with "
        "several GPUs set it to -1 or 0";
  } else if (device_free && hbm_fixed > device_free) {
    reason =
        "HBM: needs " + gb(hbm_fixed) + " (" + std::to_string(job.weight_slots) +
        " weight slots of the largest block, "
        "gradient buffers, one micro-batch's activations" +
        (hbm.saved_activation_bytes
             ? ", the saved activations of " +
                   std::to_string(sc.saved_activation_layers + sc.mlp_recompute_layers) +
                   " layers " + gb(hbm.saved_activation_bytes)
             : std::string()) +
        ") but has " + gb(device_free) + "; lower " +
        (hbm.saved_activation_bytes ? "placement.saved_activation_layers or mlp_recompute_layers, "
                                    : "") +
        "micro_batch_size or seq_len";
  } else if (!state_fits) {
    reason = "HBM: streaming needs " + gb(hbm_fixed) + " and the state of the first " +
             std::to_string(state_blocks) + " blocks (placement.hbm_state_blocks) " +
             gb(state_bytes) + " more, but " + gb(device_free) + " is free; lower " +
             "placement.hbm_state_blocks to " +
             std::to_string(fitting_blocks(device_free - hbm_fixed)) +
             " or less, or set it to -1 for as many as fit";
  } else if (dram_needed > plan.dram.free_bytes) {
    // What "auto" would keep in DRAM, for the message.
    TrainJob with_auto = job;
    with_auto.optimizer_tier = with_auto.master_tier = TierChoice::kAuto;
    const BlockTiers automatic = place_tiers(layout, with_auto, plan.dram.free_bytes,
                                             grads_dram + host_ckpt + cpu_arena, held)
                                     .blocks;
    reason =
        "DRAM: needs " + gb(dram_needed) + " but " + gb(plan.dram.free_bytes) + " is available; " +
        (automatic.ssd == automatic.blocks() || tiers.dram == 0
             ? std::string("what remains is the gradients and the weights the device "
                           "streams: a smaller model or more DRAM")
             : "set placement.optimizer (and placement.master) to \"ssd\" or \"auto\" "
               "with an ssd_dir (\"auto\" keeps the moments of the first " +
                   std::to_string(automatic.dram) + " of " + std::to_string(automatic.blocks()) +
                   " blocks in DRAM and puts the rest on the SSD)");
  } else if (ssd_needed > 0 && ssd_needed > machine.ssd_free_bytes) {
    reason = "SSD: needs " + gb(ssd_needed) + " in " +
             (job.ssd_dir.empty() ? std::string("(no ssd_dir)") : job.ssd_dir) + " but " +
             gb(machine.ssd_free_bytes) + " is free; free space or choose another ssd_dir";
  }

  // Step time: compute at the backend's measured GEMM rate, the host link each way, the SSD, and
  // the CPU optimizer: the gradient norm (the engine reduces each block's fp32 gradient on the
  // backend as it is produced: on the CPU a pass over the gradients on the same cores; on a GPU a
  // few milliseconds of HBM reads under the download, counted as none) and AdamW (measured, or 28
  // B/param of DRAM traffic: read p, g, m, v; write p, m, v).
  const double gpu_tokens = static_cast<double>(tokens_mb) * job.grad_accum;  // each GPU's
  const double tokens = N * machines * gpu_tokens;
  const StepFlops flops =
      step_flops(config, tokens, job.seq_len, sc.saved_activation_layers, sc.mlp_recompute_layers);
  // On a GPU each micro-batch also adds every layer's weight gradient into the fp32 buffers: HBM
  // traffic that does not shrink with the micro-batch (kGpuHbmBytesPerS).
  const double accumulate_s = cpu ? 0.0 : job.grad_accum * 8.0 * P / kGpuHbmBytesPerS;
  const GpuCompute gpu = cpu ? GpuCompute{}
                             : gpu_compute(config, layout, job, machine,
                                           StreamingEngine::lm_head_chunk(config, sc), data);
  const CpuCompute on_cpu = cpu ? cpu_compute(config, job, machine, data) : CpuCompute{};
  // Per block: its parameters, and those the CPU's AdamW updates (the HBM state tier's the GPU
  // updates; on the CPU backend the backend's AdamW runs on the same cores, so all count there).
  const size_t gpu_blocks = cpu ? 0 : state_blocks;
  std::vector<double> cpu_params(layout.num_blocks(), 0.0);
  double P_gpu = 0;
  double P_cpu = 0;  // past one machine, of the blocks this one holds
  for (size_t b = 0; b < layout.num_blocks(); ++b) {
    if (b < gpu_blocks)
      P_gpu += block_params(layout, b);
    else if (held.empty() || held[b])
      P_cpu += cpu_params[b] = block_params(layout, b);
  }
  // The GPU's AdamW over the tier's blocks: memory-bound, 28 B/param of HBM traffic as the CPU's.
  const double gpu_adamw_s = kAdamwBytesPerParam * P_gpu / kGpuHbmBytesPerS;
  // Each GPU computes its own micro-batches; CPU ranks share the host's cores, one after another.
  const double compute_s = cpu ? N * (on_cpu.gemm_s + on_cpu.attention_s + on_cpu.elementwise_s)
                               : gpu.gemm_s + gpu.attention_s + gpu.lm_head_s + gpu.elementwise_s +
                                     gpu.key_bias_s + accumulate_s + gpu_adamw_s;
  // Every block's fp32 master goes up for the forward and the layers' again for the backward (but
  // those still in a slot); its fp32 gradients come down once: the engine's own count, in which
  // the HBM state tier's blocks cross in neither direction. Per GPU: with several, each uploads
  // every master whole over its own link and downloads its 1/N share of every gradient.
  const StreamingEngine::LinkBytes link =
      StreamingEngine::plan_link_bytes(layout, sc, state_blocks);
  // A spilled checkpoint goes down once in the forward and up twice: for the next layer's forward
  // and for its own backward; the head's input, which the head's forward and backward read in one
  // pass, once (counted where the split keeps the others' on the device).
  const bool head_spilled = ckpt_on_device && kept_layers < checkpoint_layers;
  const double h2d_bytes = static_cast<double>(link.h2d) + 2.0 * static_cast<double>(ckpt_spilled) -
                           (head_spilled ? static_cast<double>(ckpt_layer) : 0.0);
  const double d2h_bytes = static_cast<double>(link.d2h) + static_cast<double>(ckpt_spilled);
  // The GPUs' links at once carry a little less each than one alone (kSharedLinkEfficiency).
  const double link_share = !cpu && ranks > 1 ? kSharedLinkEfficiency : 1.0;
  const double h2d_bw = std::max(machine.h2d_bytes_per_s, 1.0) * link_share;
  const double h2d_s = h2d_bytes / h2d_bw;
  const double d2h_s =
      d2h_bytes / (machine.d2h_bytes_per_s > 0 ? machine.d2h_bytes_per_s * link_share : h2d_bw);
  // Both directions at once where the probe measured that (a PCIe link is full duplex but the
  // sum stays below twice one way), else they take turns.
  const double link_s =
      machine.duplex_bytes_per_s > 0
          ? std::max(
                {h2d_s, d2h_s, (h2d_bytes + d2h_bytes) / (machine.duplex_bytes_per_s * link_share)})
          : h2d_s + d2h_s;
  const double ssd_bw = machine.ssd_bytes_per_s > 0 ? machine.ssd_bytes_per_s : 2e9;
  // Read and written back every step, but for the HBM state tier's blocks, whose copy on the SSD
  // is written only for a checkpoint.
  const double ssd_s = 2.0 * static_cast<double>(ssd_step_bytes) / ssd_bw;
  const double host_bw = std::max(machine.host_mem_bytes_per_s, 1.0);
  const double grad_norm_s = cpu ? 4.0 * P / host_bw : 0.0;
  const double adamw_s = machine.adamw_params_per_s > 0 ? P_cpu / machine.adamw_params_per_s
                                                        : kAdamwBytesPerParam * P_cpu / host_bw;
  const double optimizer_s = grad_norm_s + adamw_s;
  // On the CPU backend compute, copies and the optimizer share the same cores: they add up. On a
  // GPU the AdamW of step s runs while step s+1's forward streams and computes; the forward waits
  // per block for that block's update, so only what outlasts the forward (2 of the 8 FLOP units
  // of a step with recompute, or a quarter of the link time when that is longer) holds the GPU:
  // the per-block timeline (forward_wait_s), where the HBM state tier's blocks, if any, come first
  // and their forward (after the GPU's AdamW) runs while the CPU updates the rest. With every block
  // in DRAM and the CPU slower per block than the forward, that is AdamW less the forward plus the
  // head's forward, which waits for the head's update (the model of max(0, AdamW - forward) before
  // the tier left that out; against the H100 runs the timeline is as close or closer:
  // tests/bench/figures/hbm-state-h100.json).
  // Data parallel: each block's reduce-scatter between the GPUs runs while the backward goes on
  // to the next block (exposed_reduce_s); what outlasts the backward delays the gradient norm the
  // optimizer starts from, hence the whole next step. The CPU ranks' in-process group is a copy
  // within DRAM, counted as none.
  double nccl_s = 0, nccl_bytes = 0, nccl_busy_s = 0, network_bw = 0;
  bool network_bound = false;  // past one machine, the network is the collective's slower part
  double optimizer_visible_s = optimizer_s, step_s = compute_s + optimizer_s + ssd_s;
  // Data parallel: every GPU's copies pass through the one host's memory. A DMA moves each byte
  // through DRAM once, where the probe's copy rate counts a read and a write: the GPUs' links
  // together are bound by twice that rate (at 4 GPUs of llama2-7b, 235 GB a step: 1.9 s at the
  // 2-GPU host's 63.5 GB/s copy rate, against a 6.5 s step; at 8 GPUs it starts to count).
  const double host_dma_s =
      !cpu && ranks > 1 ? ranks * (h2d_bytes + d2h_bytes) / (2.0 * host_bw) : 0.0;
  // Past one machine every GPU also receives each block's weights by broadcast from the GPU that
  // carries it (act_dtype, as often as a GPU would upload them): a stream beside compute, on the
  // network with the gradients' reduces.
  double broadcast_bytes = 0, broadcast_s = 0;
  if (!cpu) {
    const double forward_s = std::max(compute_s - gpu_adamw_s, link_s) / 4.0;
    const std::vector<double> shares = forward_shares(config, layout, gpu, job.seq_len);
    const double wait_s =
        forward_wait_s(shares, cpu_params, gpu_blocks, gpu_adamw_s, forward_s, adamw_s);
    if (grouped) {
      double bus =
          machine.nccl_bus_bytes_per_s > 0 ? machine.nccl_bus_bytes_per_s : kNcclBusBytesPerSPcie;
      if (machines > 1) {
        network_bw =
            machine.network_bytes_per_s > 0 ? machine.network_bytes_per_s : kNetworkBytesPerS;
        network_bound = ranks == 1 || network_bw <= bus;
        bus = network_bound ? network_bw : bus;
        StreamingConfig whole = sc;  // what one GPU uploads when it carries every block
        whole.block_owners.clear();
        whole.data_parallel_processes = 1;
        broadcast_bytes =
            static_cast<double>(StreamingEngine::plan_link_bytes(layout, whole, 0).h2d) *
            static_cast<double>(act) / 4.0;
        broadcast_s = broadcast_bytes / bus;
      }
      nccl_s = exposed_reduce_s(layout, shares, 3.0 * forward_s, ranks, machines, bus, &nccl_bytes,
                                &nccl_busy_s);
      nccl_busy_s += broadcast_s;
    }
    // Past one machine the network's whole load (reduces and broadcasts) is a stream of its own.
    const double overlapped_s =
        std::max({compute_s, link_s, host_dma_s, machines > 1 ? nccl_busy_s : 0.0});
    optimizer_visible_s = grad_norm_s + wait_s;
    step_s = optimizer_visible_s + std::max(overlapped_s, ssd_s) + nccl_s;
  }
  struct Part {
    const char* name;
    double s;
  };
  // The reduce-scatters by their whole time, as compute and the link: NCCL is the bottleneck when
  // the GPUs spend longer reducing than computing.
  const std::vector<Part> parts = {{"compute", compute_s},
                                   {"h2d", link_s},
                                   {"ssd", ssd_s},
                                   {"optimizer", optimizer_visible_s},
                                   {network_bound ? "network" : "nccl", nccl_busy_s},
                                   {"host memory", host_dma_s}};
  const Part worst =
      *std::max_element(parts.begin(), parts.end(), [](auto& a, auto& b) { return a.s < b.s; });
  PlanStep& step = plan.step;
  step.tokens = tokens;
  step.flops = flops.hardware;
  step.model_flops = flops.model;
  step.compute_s = compute_s;
  step.gemm_s = cpu ? on_cpu.gemm_s : gpu.gemm_s;
  step.attention_s = cpu ? on_cpu.attention_s : gpu.attention_s;
  step.lm_head_s = gpu.lm_head_s;
  step.elementwise_s = cpu ? on_cpu.elementwise_s : gpu.elementwise_s;
  step.calibrated = !cpu || on_cpu.calibrated;
  step.key_bias_s = gpu.key_bias_s;
  step.accumulate_s = accumulate_s;
  step.gpu_adamw_s = gpu_adamw_s;
  step.h2d_bytes = h2d_bytes;
  step.d2h_bytes = d2h_bytes;
  step.h2d_s = h2d_s;
  step.d2h_s = d2h_s;
  step.link_s = link_s;
  step.ssd_s = ssd_s;
  step.grad_norm_s = grad_norm_s;
  step.adamw_s = adamw_s;
  step.optimizer_s = optimizer_s;
  step.optimizer_visible_s = optimizer_visible_s;
  step.step_s = step_s;
  step.tokens_per_s = data.fill * tokens / step_s;  // the data's tokens, not padding
  step.data_fill = data.fill;
  step.data_attention = data.attention;
  step.model_tflops = flops.model / step_s / 1e12;
  step.eta_s = step_s * total_steps;
  step.bottleneck = worst.name;
  step.total_steps = total_steps;
  plan.fits = reason.empty();
  plan.reason = reason;
  plan.backend = machine.backend;
  plan.micro_batch_size = job.micro_batch_size;
  plan.grad_accum = job.grad_accum;
  plan.seq_len = job.seq_len;
  plan.checkpoints_on_device = ckpt_on_device;
  plan.devices.count = ranks;
  if (devices.ok() && !cpu) plan.devices.indices = *devices;  // CPU ranks name no GPU
  plan.devices.nccl_s = nccl_s;
  plan.devices.nccl_bytes = nccl_bytes;
  plan.devices.machines = machines;
  plan.devices.network_bytes = machines > 1 ? nccl_bytes + broadcast_bytes : 0;
  plan.model = {config.architecture, P, config.num_layers, config.hidden_size, config.vocab_size};
  plan.machine = {machine.compute_flops,
                  machine.h2d_bytes_per_s,
                  machine.d2h_bytes_per_s,
                  machine.duplex_bytes_per_s,
                  machine.host_mem_bytes_per_s,
                  machine.adamw_params_per_s,
                  machine.ssd_bytes_per_s,
                  machine.cpu_gemm_flops,
                  machine.cpu_attention_s_per_score,
                  machine.cpu_stream_bytes_per_s,
                  static_cast<double>(machine.cpu_threads),
                  static_cast<double>(machine.gpus),
                  machine.nccl_bus_bytes_per_s,
                  network_bw,
                  machine.device,
                  machine.attention};
  return plan;
}

// The trade (planner.h, make_plan): with placement.hbm_state_blocks -1 on one GPU, HBM beside
// streaming holds checkpoints and blocks' state, and each layer's checkpoints moved to pinned host
// memory makes room for more of the state tier. The candidates: every checkpoint that fits kept
// on the device (as many layers' as fit, the engine's own fill when not all do), with as many
// blocks as fit beside them; then, moving checkpoints to the host a layer at a time from the last,
// the most layers' kept for each larger count of blocks. Each is planned with the step model
// above (a spilled checkpoint crosses the link three times a step, the head's input twice; a
// block in HBM takes its AdamW off the CPU and its weights and gradient off the link). The
// fastest of those that move checkpoints wins if it saves more than kTradeMargin of the step;
// ties go to the candidate with more checkpoints on the device.
Plan plan_trade(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine,
                int64_t total_steps, const DataShape& data) {
  const compute::BackendFacts& facts = machine.backend_facts();
  Plan every = plan_split(config, job, machine, total_steps, data, -1);
  const uint64_t device_free = every.hbm.free_bytes;
  if (job.hbm_state_blocks >= 0 || facts.host_memory() || device_free == 0 ||
      every.devices.count > 1 || !every.fits)
    return every;

  // The engine's own accounting (StreamingEngine::hbm_state_blocks, device_checkpoint_bytes).
  const ParameterLayout layout = ParameterLayout::build(config);
  StreamingConfig sc = streaming_config(job);
  const uint64_t ws = compute::workspace_bytes(facts.kind, op_shapes_on(machine, config, sc));
  const uint64_t fixed =
      StreamingEngine::plan_device_memory(layout, sc, facts.act_dtype, ws).fixed_bytes();
  const int layers = config.num_layers + 1;  // the head's input counts as one
  std::vector<size_t> blocks(static_cast<size_t>(layers) + 1);
  int kept = -1;  // the most layers whose checkpoints fit beside streaming alone
  for (int k = layers; k >= 0; --k) {
    sc.device_checkpoint_layers = k;
    blocks[k] =
        StreamingEngine::hbm_state_blocks(layout, sc, facts.act_dtype, ws, device_free, false);
    if (kept < 0 && fixed + StreamingEngine::device_checkpoint_bytes(layout, sc, facts.act_dtype) <=
                        device_free)
      kept = k;
  }
  if (kept < 0) return every;  // not even the activation gradients fit: all spill

  const Plan first =
      kept == layers ? std::move(every) : plan_split(config, job, machine, total_steps, data, kept);
  std::optional<Plan> other;  // the fastest candidate that moves checkpoints for blocks
  for (int k = kept - 1, last = static_cast<int>(blocks[kept]); k >= 0; --k) {
    if (static_cast<int>(blocks[k]) <= last) continue;
    last = static_cast<int>(blocks[k]);
    Plan p = plan_split(config, job, machine, total_steps, data, k);
    if (p.fits && (!other || p.step.step_s < other->step.step_s)) other = std::move(p);
  }
  if (!other) return first;
  const auto layers_text = [&](int k) {
    return std::to_string(k) + " of " + std::to_string(layers) + " layers";
  };
  const std::string kept_text =
      first.state.device_checkpoint_layers == layers
          ? "every checkpoint in HBM"
          : "the checkpoints of " + layers_text(first.state.device_checkpoint_layers) + " in HBM";
  char line[256];
  if (other->step.step_s < (1.0 - kTradeMargin) * first.step.step_s) {
    Plan best = std::move(*other);
    const uint64_t moved_bytes =
        best.dram.checkpoints_bytes.value_or(0) - first.dram.checkpoints_bytes.value_or(0);
    const int more = best.state.hbm_blocks - first.state.hbm_blocks;
    std::snprintf(
        line, sizeof(line),
        "; the checkpoints of the last %s (%s) go to host memory for %d more %s in HBM: "
        "%.3f s a step against %.3f s with %s",
        layers_text(first.state.device_checkpoint_layers - best.state.device_checkpoint_layers)
            .c_str(),
        gb(static_cast<double>(moved_bytes)).c_str(), more, more == 1 ? "block" : "blocks",
        best.step.step_s, first.step.step_s, kept_text.c_str());
    best.state.why += line;
    return best;
  }
  Plan best = first;
  std::snprintf(line, sizeof(line),
                "; moving checkpoints to host memory for more blocks saves less than %.0f%% of "
                "the step (at best %.3f s with %d blocks and the checkpoints of %s in HBM)",
                100 * kTradeMargin, other->step.step_s, other->state.hbm_blocks,
                layers_text(other->state.device_checkpoint_layers).c_str());
  best.state.why += line;
  return best;
}

// Saved activations (planner.h, make_plan): with placement.saved_activation_layers or
// mlp_recompute_layers -1 on a GPU whose free memory is known, candidates along one path, each
// with every checkpoint in HBM and as many blocks' state as fit beside them: more layers that keep
// all but the MLP's intermediates (the most gain per byte: the same as a whole layer's at 2K
// tokens a sequence, more at long sequences, where attention is most of the forward), then, with
// every layer saving something, more of the last turned whole. The fastest wins against
// plan_trade with the job's own counts when it saves more than kTradeMargin of the step, and gets
// plan_trade's own split of checkpoints and blocks. A count that does not fit, with
// StreamingEngine::kHbmStateReserveBytes left free as the state tier leaves it, ends its leg: more
// layers only need more.
Plan plan_job(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine,
              int64_t total_steps, const DataShape& data = {}) {
  const int L = config.num_layers;
  const int k0 = std::max(job.saved_activation_layers, 0),
            j0 = std::max(job.mlp_recompute_layers, 0);
  TrainJob fixed = job;
  fixed.saved_activation_layers = k0;
  fixed.mlp_recompute_layers = j0;
  Plan best = plan_trade(config, fixed, machine, total_steps, data);
  if ((job.saved_activation_layers >= 0 && job.mlp_recompute_layers >= 0) ||
      machine.backend_facts().host_memory() || best.hbm.free_bytes == 0 || !best.fits)
    return best;
  int best_k = k0, best_j = j0;
  double best_s = best.step.step_s;
  auto consider = [&](int k, int j) {
    TrainJob t = job;
    t.saved_activation_layers = k;
    t.mlp_recompute_layers = j;
    const Plan p = plan_split(config, t, machine, total_steps, data, -1);
    // As the HBM state tier's "as many as fit", leave the libraries' lazy allocations their room.
    if (!p.fits || !p.checkpoints_on_device ||
        p.hbm.needed_bytes + StreamingEngine::kHbmStateReserveBytes > p.hbm.free_bytes)
      return false;
    if (p.step.step_s < best_s) best_s = p.step.step_s, best_k = k, best_j = j;
    return true;
  };
  if (job.mlp_recompute_layers < 0)
    for (int j = 1; k0 + j <= L && consider(k0, j);) ++j;
  if (job.saved_activation_layers < 0)
    for (int k = 1; k + j0 <= L && consider(k, job.mlp_recompute_layers < 0 ? L - k : j0);) ++k;
  char line[320];
  if ((best_k != k0 || best_j != j0) && best_s < (1.0 - kTradeMargin) * best.step.step_s) {
    TrainJob t = job;
    t.saved_activation_layers = best_k;
    t.mlp_recompute_layers = best_j;
    Plan saved = plan_trade(config, t, machine, total_steps, data);
    if (saved.fits && saved.step.step_s < best.step.step_s) {
      const std::string what =
          best_k == 0 ? "the last " + std::to_string(best_j) + " of " + std::to_string(L) +
                            " layers keep every activation in HBM but the MLP's"
          : best_j == 0 ? "the last " + std::to_string(best_k) + " of " + std::to_string(L) +
                              " layers keep every activation in HBM"
                        : "the last " + std::to_string(best_k) + " of " + std::to_string(L) +
                              " layers keep every activation in HBM and the " +
                              std::to_string(best_j) + " before them all but the MLP's";
      std::snprintf(line, sizeof(line), "; %s (%s): %.3f s a step against %.3f s recomputing them",
                    what.c_str(),
                    gb(static_cast<double>(saved.hbm.activations_bytes.value_or(0))).c_str(),
                    saved.step.step_s, best.step.step_s);
      saved.state.why += line;
      return saved;
    }
  }
  if (best_k != k0 || best_j != j0) {
    std::snprintf(line, sizeof(line),
                  "; saving layers' activations in HBM saves less than %.0f%% of the step (at "
                  "best %.3f s with %d layers whole and %d without the MLP's)",
                  100 * kTradeMargin, best_s, best_k, best_j);
    best.state.why += line;
  }
  return best;
}

}  // namespace

DataShape data_shape(const Dataset& ds) {
  if (ds.empty()) return {};
  return {ds.fill(), ds.attention_share(), ds.packed()};
}

Plan make_plan(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine,
               int64_t total_steps, bool with_suggestion, const DataShape& data) {
  Plan plan = plan_job(config, job, machine, total_steps, data);
  if (with_suggestion) plan.suggestion = suggest_batch(config, job, machine);
  return plan;
}

namespace {

// "64K" for a multiple of 1,024 tokens, else the number.
std::string tokens_text(int64_t tokens) {
  return tokens % 1024 == 0 ? std::to_string(tokens / 1024) + "K" : std::to_string(tokens);
}

// 78112.6 -> "78,113"
std::string thousands_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f", std::max(v, 0.0));
  const std::string digits = buf;
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), s < 10 ? "%.1f s" : "%.0f s", s);
  return buf;
}

struct Candidate {
  int micro_batch = 0, grad_accum = 0;
  int64_t tokens = 0;
  Plan plan;
  bool fits() const { return plan.fits; }
  bool on_device() const { return plan.checkpoints_on_device; }
  double tokens_per_s() const { return plan.step.tokens_per_s; }
  const PlanStep& step() const { return plan.step; }
};

PlanSuggestion suggestion_of(const Candidate& c, const TrainJob& job, const std::string& why) {
  PlanSuggestion s;
  s.fits = true;
  s.micro_batch_size = c.micro_batch;
  s.grad_accum = c.grad_accum;
  s.tokens_per_step = c.tokens;
  s.step_s = c.step().step_s;
  s.tokens_per_s = c.tokens_per_s();
  s.model_tflops = c.step().model_tflops;
  s.checkpoints_on_device = c.on_device();
  s.hbm_state_blocks = c.plan.state.hbm_blocks;
  s.device_checkpoint_layers = c.plan.state.device_checkpoint_layers;
  s.saved_activation_layers = c.plan.state.saved_activation_layers;
  s.mlp_recompute_layers = c.plan.state.mlp_recompute_layers;
  s.hbm_needed_bytes = c.plan.hbm.needed_bytes;
  s.hbm_free_bytes = c.plan.hbm.free_bytes;
  s.same_as_job = c.micro_batch == job.micro_batch_size && c.grad_accum == job.grad_accum;
  s.why = why;
  return s;
}

// Where the checkpoints of `c` go, for the end of a `why`: "micro-batch 8 keeps checkpoints in
// HBM (25 GB of 84)".
std::string checkpoints_text(const Candidate& c) {
  const double needed = static_cast<double>(c.plan.hbm.needed_bytes),
               free = static_cast<double>(c.plan.hbm.free_bytes);
  const double ckpt =
      static_cast<double>((c.on_device() ? c.plan.hbm : c.plan.dram).checkpoints_bytes.value_or(0));
  char buf[224];
  if (free <= 0) {
    std::snprintf(buf, sizeof(buf), "micro-batch %d, checkpoints %.0f GB", c.micro_batch,
                  ckpt / 1e9);
  } else if (c.on_device() && c.plan.dram.checkpoints_bytes.value_or(0) > 0) {
    std::snprintf(
        buf, sizeof(buf),
        "micro-batch %d keeps the checkpoints of %d of %d layers in HBM (%.0f GB of %.0f) "
        "and the rest (%.0f GB) in host memory",
        c.micro_batch, c.plan.state.device_checkpoint_layers, c.plan.model.layers + 1, needed / 1e9,
        free / 1e9, static_cast<double>(c.plan.dram.checkpoints_bytes.value_or(0)) / 1e9);
  } else if (c.on_device()) {
    std::snprintf(buf, sizeof(buf), "micro-batch %d keeps checkpoints in HBM (%.0f GB of %.0f)",
                  c.micro_batch, needed / 1e9, free / 1e9);
  } else {
    std::snprintf(buf, sizeof(buf),
                  "micro-batch %d; its checkpoints (%.0f GB) do not fit HBM and go to host memory",
                  c.micro_batch, ckpt / 1e9);
  }
  return buf;
}

// What a step smaller than `chosen` loses most to, and from which size on it is hidden.
std::string limit_text(const Candidate& chosen, const Candidate* below) {
  if (!below) return "the smallest step that fits already keeps the GPU busy";
  const double compute = below->step().compute_s, link = below->step().link_s;
  const double optimizer = below->step().optimizer_visible_s;
  const double link_excess = std::max(0.0, link - compute);
  const double ssd_excess = std::max(0.0, below->step().ssd_s - std::max(compute, link));
  const std::string from = " from " + tokens_text(chosen.tokens) + " tokens per step";
  if (optimizer >= link_excess && optimizer >= ssd_excess && optimizer > 0) {
    return "AdamW (" + seconds_text(chosen.step().adamw_s) + ") hides behind the forward" + from;
  }
  if (link_excess >= ssd_excess && link_excess > 0) {
    return "the host link (" + seconds_text(chosen.step().link_s) +
           " per step) hides behind compute" + from;
  }
  if (ssd_excess > 0)
    return "the SSD (" + seconds_text(chosen.step().ssd_s) + " per step) hides behind compute" +
           from;
  return "fewer, larger micro-batches spend less on adding up the weight gradients" + from;
}

// "; placement.devices \"all\" (8 GPUs) would give 78,113 tokens/s with this batch on each GPU":
// what every GPU of the machine would give at the chosen micro-batch and accumulation, when the job
// uses fewer; empty otherwise.
std::string all_gpus_text(const ModelConfig& config, const TrainJob& job,
                          const MachineProbe& machine, const Candidate& chosen) {
  if (machine.gpus <= chosen.plan.devices.count) return "";
  TrainJob every = job;
  every.micro_batch_size = chosen.micro_batch;
  every.grad_accum = chosen.grad_accum;
  every.devices = job::DeviceSelection{};
  every.devices.all = true;
  const Plan all = plan_job(config, every, machine, 0);
  const std::string head =
      "; placement.devices \"all\" (" + std::to_string(machine.gpus) + " GPUs) ";
  if (!all.fits) return head + "does not fit: " + all.reason;
  char buf[96];
  std::snprintf(buf, sizeof(buf), "would give %s tokens/s with this batch on each GPU",
                thousands_text(all.step.tokens_per_s).c_str());
  return head + buf;
}

// Every micro-batch and accumulation suggest_batch weighs for a job, the ones that fit (smaller
// steps first, the larger micro-batch first at equal steps), and on a GPU its choice and the best
// step just below it. Candidates are not moved once `fitting` points at them.
struct Search {
  std::vector<Candidate> all;
  std::vector<const Candidate*> fitting;
  const Candidate* chosen = nullptr;  // null when nothing fits, and on the CPU backend
  const Candidate* below = nullptr;   // the best split of the largest step below `chosen`
};

void search_batches(const ModelConfig& config, const TrainJob& job, const MachineProbe& machine,
                    Search* s) {
  s->all.reserve(5 * 64);
  for (int mb : {1, 2, 4, 8, 16}) {
    TrainJob j = job;
    j.micro_batch_size = mb;
    bool any = false;
    for (int ga = 1; ga <= 64; ++ga) {
      j.grad_accum = ga;
      Candidate c{mb, ga, 0, plan_job(config, j, machine, 0)};
      c.tokens = static_cast<int64_t>(mb) * ga * job.seq_len * c.plan.devices.count *
                 c.plan.devices.machines;
      // One micro-batch that does not fit HBM: neither does any larger one.
      if (ga == 1 && !c.fits() && c.plan.reason.starts_with("HBM")) break;
      any = true;
      s->all.push_back(std::move(c));
    }
    if (!any) break;
  }
  for (const Candidate& c : s->all) {
    if (c.fits()) s->fitting.push_back(&c);
  }
  auto smaller = [](const Candidate* a, const Candidate* b) {
    return a->tokens != b->tokens ? a->tokens < b->tokens : a->micro_batch > b->micro_batch;
  };
  std::sort(s->fitting.begin(), s->fitting.end(), smaller);
  if (s->fitting.empty() || !machine.backend_facts().gpu) return;

  double best = 0;
  for (const Candidate* c : s->fitting) best = std::max(best, c->tokens_per_s());
  const double floor = (1.0 - kSuggestWithin) * best;
  for (bool need_device : {true, false}) {
    for (const Candidate* c : s->fitting) {
      if (c->tokens_per_s() >= floor && (c->on_device() || !need_device)) {
        s->chosen = c;
        break;
      }
    }
    if (s->chosen) break;
  }
  // The step just below the chosen one (its best split) names what a smaller step loses to.
  for (const Candidate* c : s->fitting) {
    if (c->tokens >= s->chosen->tokens) break;
    if (!s->below || c->tokens > s->below->tokens || c->tokens_per_s() > s->below->tokens_per_s())
      s->below = c;
  }
}

}  // namespace

PlanSuggestion suggest_batch(const ModelConfig& config, const TrainJob& job,
                             const MachineProbe& machine) {
  const bool cpu = !machine.backend_facts().gpu;
  const std::string shared =
      "the CPU backend runs compute and AdamW on the same cores: a larger step hides nothing";
  const Plan own = plan_job(config, job, machine, 0);
  const int64_t own_tokens = static_cast<int64_t>(job.micro_batch_size) * job.grad_accum *
                             job.seq_len * own.devices.count * own.devices.machines;
  if (cpu && own.fits) {
    const Candidate c{job.micro_batch_size, job.grad_accum, own_tokens, own};
    return suggestion_of(c, job, shared);
  }
  Search search;
  search_batches(config, job, machine, &search);
  if (search.fitting.empty()) {
    TrainJob j = job;
    j.micro_batch_size = j.grad_accum = 1;
    const Plan smallest = plan_job(config, j, machine, 0);
    PlanSuggestion none;
    none.why = "no micro-batch fits: " + smallest.reason;
    return none;
  }

  if (cpu) {
    // The job's own values do not fit: keep its tokens per step in smaller micro-batches if one
    // fits, else the smallest step that does.
    const std::string not_own = "; the job's " + std::to_string(job.micro_batch_size) + " x " +
                                std::to_string(job.grad_accum) + " does not fit (" + own.reason +
                                "): ";
    for (const Candidate* c : search.fitting) {
      if (c->tokens == own_tokens)
        return suggestion_of(
            *c, job, shared + not_own + "the same tokens per step in smaller micro-batches");
    }
    return suggestion_of(*search.fitting.front(), job,
                         shared + not_own + "the smallest step that fits");
  }

  const Candidate& chosen = *search.chosen;
  std::string why = limit_text(chosen, search.below) + "; " + checkpoints_text(chosen);
  // Whether the HBM state tier is what lets so small a step keep the GPU busy: the same search
  // with every block's state in DRAM.
  if (chosen.plan.state.hbm_blocks > 0) {
    TrainJob all_dram = job;
    all_dram.hbm_state_blocks = 0;
    Search dram;
    search_batches(config, all_dram, machine, &dram);
    if (dram.chosen && dram.chosen->tokens > chosen.tokens) {
      const PlanState& state = chosen.plan.state;
      why += "; the state of the first " + std::to_string(state.hbm_blocks) + " of " +
             std::to_string(state.blocks) + " blocks in HBM (" +
             gb(static_cast<double>(state.hbm_bytes)) + ") leaves the CPU's AdamW " +
             seconds_text(chosen.step().adamw_s) + " instead of " +
             seconds_text(dram.chosen->step().adamw_s) + ": with all of it in DRAM the step " +
             "would take " + tokens_text(dram.chosen->tokens) + " tokens to keep the GPU busy";
    }
  }
  why += all_gpus_text(config, job, machine, chosen);
  return suggestion_of(chosen, job, why);
}

}  // namespace spillway
