// backend_facts and workspace_bytes by kind (backend-facts.h).
#include "compute/backend-facts.h"

#include <algorithm>

#include "compute/cpu/attention-key-bias.h"
#include "compute/cpu/attention.h"
#include "compute/cpu/cross-entropy.h"
#include "compute/cuda-workspace.h"

namespace spillway::compute {

namespace {

constexpr BackendFacts kCpuFacts{BackendKind::kCpu, DType::kF32, /*gpu=*/false, kDeviceAlignment};
constexpr BackendFacts kCudaFacts{BackendKind::kCuda, DType::kBF16, /*gpu=*/true, kDeviceAlignment};

// The CPU ops that take scratch run one at a time, so they share one area: the largest of them.
size_t cpu_workspace_bytes(const OpShapes& s) {
  const size_t need = std::max(
      {cpu::lm_head_scratch_bytes(s.tokens, s.vocab, s.lm_head_chunk),
       cpu::attention_forward_scratch_bytes(s.batch, s.seq, s.heads, s.kv_heads, s.head_dim),
       cpu::attention_backward_scratch_bytes(s.batch, s.seq, s.heads, s.kv_heads, s.head_dim),
       cpu::attention_key_bias_scratch_bytes(s.batch, s.seq, s.heads, s.kv_heads, s.head_dim)});
  return need == 0 ? 0 : align_to_device(need);
}

}  // namespace

const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "cpu";
}

std::optional<BackendKind> parse_backend_kind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return std::nullopt;
}

const BackendFacts& backend_facts(BackendKind kind) {
  return kind == BackendKind::kCuda ? kCudaFacts : kCpuFacts;
}

size_t workspace_bytes(BackendKind kind, const OpShapes& shapes) {
  return kind == BackendKind::kCuda ? cuda::workspace_bytes(shapes) : cpu_workspace_bytes(shapes);
}

}  // namespace spillway::compute
