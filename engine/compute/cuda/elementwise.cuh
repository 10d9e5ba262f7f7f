// Elementwise launchers (elementwise.cu): residual add, dtype conversions, SwiGLU and GeGLU
// forward and backward. bf16 in and out, fp32 arithmetic inside. Each launcher checks its arguments
// (kInvalidArgument), launches on `stream`, and returns the launch status.
#pragma once

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda {

// y[i] += x[i], i < count (bf16, sum in fp32, rounded once).
Status add_inplace(bf16* y, const bf16* x, size_t count, cudaStream_t stream);
// dst[i] = bf16(src[i]) (round to nearest even, as torch's .to(torch.bfloat16)) and back (exact).
Status convert_f32_to_bf16(bf16* dst, const float* src, size_t count, cudaStream_t stream);
Status convert_bf16_to_f32(float* dst, const bf16* src, size_t count, cudaStream_t stream);
// out[n, f] = silu(gate) · up  (silu(x) = x / (1 + e^-x), in fp32)
Status swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int n, int f,
                      cudaStream_t stream);
// dgate = dout · up · silu'(gate), dup = dout · silu(gate)  (overwrite)
Status swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                       int n, int f, cudaStream_t stream);

// out[n, f] = gelu_tanh(gate) · up  (torch's gelu(approximate="tanh"), in fp32)
Status geglu_forward(bf16* out, const bf16* gate, const bf16* up, int n, int f,
                     cudaStream_t stream);
// dgate = dout · up · gelu_tanh'(gate), dup = dout · gelu_tanh(gate)  (overwrite)
Status geglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                      int n, int f, cudaStream_t stream);

}  // namespace spillway::cuda
