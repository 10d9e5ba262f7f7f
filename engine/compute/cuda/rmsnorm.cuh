// RMSNorm forward, the fused residual + RMSNorm forward, and the backward (rmsnorm.cu).
// LlamaRMSNorm (weight_offset 0): y = x · rstd · w with rstd = 1 / sqrt(mean(x²) + eps),
// statistics in fp32; as transformers, the normalised value is rounded to the activation dtype
// before the weight multiplies it (hidden_states.to(input_dtype) * weight). Gemma3RMSNorm
// (weight_offset 1): y = x · rstd · (1 + w) all in fp32, rounded once ((x * w).to(dtype)).
#pragma once

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// out[n, d], rstd[n] (fp32)
Status rmsnorm_forward(bf16* out, float* rstd, const bf16* x, const bf16* w, int n, int d,
                       float eps, float weight_offset, cudaStream_t stream);
// sum[n, d] = x + r (bf16), out = rmsnorm(sum); `sum` may alias x.
Status residual_rmsnorm_forward(bf16* sum, bf16* out, float* rstd, const bf16* x, const bf16* r,
                                const bf16* w, int n, int d, float eps, float weight_offset,
                                cudaStream_t stream);
// Scratch: rmsnorm_backward_scratch_floats(n, d) (cuda-workspace.h; partial dw sums per row block).
// dx[n, d] = (overwrite, or += when accumulate_dx) ∂/∂x; dw[d] += ∂/∂w (fp32), reduced
// deterministically through `scratch` (rmsnorm_backward_scratch_floats floats).
Status rmsnorm_backward(bf16* dx, float* dw, const bf16* dout, const bf16* x, const bf16* w,
                        const float* rstd, int n, int d, bool accumulate_dx, float weight_offset,
                        float* scratch, size_t scratch_floats, cudaStream_t stream);

}  // namespace spillway::cuda
