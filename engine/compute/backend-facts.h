// Backend facts: what each kind of compute backend is and needs, known without a device.
//
// The planner sizes a run's memory before any backend exists (and on a machine without the CUDA
// module), and the trainer, the bench and the probe decide what to measure by what a backend is.
// They ask here, by BackendKind, instead of comparing backend names or restating a backend's
// formulas: the activation dtype, the alignment of device memory, the scratch the ops need
// (workspace_bytes) and whether the device is the host's memory or a real GPU. A live backend
// answers the same through Device::facts() and Backend::workspace_bytes(), which return these.
// The CUDA figures live in plain C++ (cuda-workspace.h), so they are known when the CUDA module is
// neither built nor loaded.
//
// Thread-safety: everything here is a pure function of its arguments (the CPU workspace reads the
// size of ThreadPool::global(), fixed once created). Nothing is owned.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace spillway::compute {

// The kinds of compute backend: "cpu" (linked in) and "cuda" (a module, backend-loader.h).
enum class BackendKind { kCpu, kCuda };

// "cpu", "cuda": the names of the job's placement.backend, the plan's "backend" and Device::name().
const char* backend_name(BackendKind kind);
// The kind a name says; nullopt for anything else ("auto" included: it is a choice, not a kind).
std::optional<BackendKind> parse_backend_kind(std::string_view name);

// Every device allocation, workspace and arena slot is aligned to this many bytes: what cudaMalloc
// returns and what cuBLASLt's heuristics assume of its pointers.
inline constexpr size_t kDeviceAlignment = 256;
// `bytes` rounded up to a multiple of kDeviceAlignment.
constexpr size_t align_to_device(size_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

// The largest shapes the ops will be called with; sizes the workspace (workspace_bytes).
struct OpShapes {
  int tokens = 0;    // tokens of one op call (micro-batch × sequence)
  int batch = 0;     // sequences of one op call
  int seq = 0;       // sequence length
  int hidden = 0;    // d_model
  int heads = 0;     // query heads
  int kv_heads = 0;  // key/value heads
  int head_dim = 0;
  int intermediate = 0;  // MLP width
  int vocab = 0;
  int lm_head_chunk = 0;  // tokens whose logits exist at once in lm_head_loss
  bool qk_norm = false;   // rmsnorm over rows of head_dim: tokens × heads of them (Qwen3)
  // Attention runs on cuDNN (DeviceInfo::attention): its backward's workspace (cuda-workspace.h).
  // Backend::workspace_bytes sets it from the backend itself; the planner from its probe.
  bool fused_attention = false;
};

struct BackendFacts {
  BackendKind kind;
  // The dtype of activations and compute weights: F32 on the CPU, BF16 on CUDA.
  DType act_dtype;
  // A real GPU: memory of its own (the HBM tier), a host link to copy over, and compute that runs
  // beside the host's cores (the CPU AdamW overlaps it). false: the device is the host itself, its
  // "device" memory is DRAM and its compute shares the cores with everything else.
  bool gpu;
  // Alignment of device allocations and of the workspace (kDeviceAlignment).
  size_t alignment;

  const char* name() const { return backend_name(kind); }
  bool host_memory() const { return !gpu; }
};

// The facts of `kind`.
const BackendFacts& backend_facts(BackendKind kind);

// Bytes of scratch the ops of a `kind` backend need for calls up to `shapes`: what the backend's
// set_workspace requires (a multiple of kDeviceAlignment, 0 when nothing needs scratch). CPU: the
// largest of its ops' scratch (attention's per-thread rows depend on the size of
// ThreadPool::global()) and the LM head's logits chunk (4 B per logit); CUDA: cuBLASLt's 32 MiB
// plus the largest op scratch (the LM head: fp32 logits and bf16 dlogits, 6 B per logit).
size_t workspace_bytes(BackendKind kind, const OpShapes& shapes);

}  // namespace spillway::compute
