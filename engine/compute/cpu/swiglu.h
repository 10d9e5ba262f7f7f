// SwiGLU activation of the Llama MLP on float32 host tensors: out = silu(gate) · up, with
// silu(g) = g · σ(g) (torch.nn.functional.silu).
//   backward: dup = dout · silu(g);  dgate = dout · up · σ(g) · (1 + g · (1 − σ(g)))
// Pure elementwise functions; parallel with ThreadPool::global().
#pragma once

#include "core/status.h"

namespace spillway::compute::cpu {

// kInvalidArgument (naming `what`) for negative sizes.
Status check_swiglu_shape(const char* what, int n, int f);

// out, gate, up [n, f]. kInvalidArgument for a bad shape.
Status swiglu_forward(float* out, const float* gate, const float* up, int n, int f);
// dgate, dup [n, f] (overwrite); dout, gate, up [n, f].
Status swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, int n, int f);

}  // namespace spillway::compute::cpu
