// GeGLU activation of the Gemma MLP on float32 host tensors: out = gelu_tanh(gate) · up, with
// torch's tanh approximation (torch.nn.functional.gelu(approximate="tanh"), transformers'
// gelu_pytorch_tanh):
//   gelu_tanh(g) = ½·g·(1 + tanh(u)),  u = β·(g + κ·g³),  β = √(2/π),  κ = 0.044715
//   backward: dup = dout · gelu_tanh(g);
//             dgate = dout · up · (½·(1 + tanh(u)) + ½·g·(1 − tanh²(u))·β·(1 + 3κ·g²))
// (the derivative of torch's GeluBackward with approximate="tanh").
// Pure elementwise functions; parallel with ThreadPool::global().
#pragma once

#include "core/status.h"

namespace spillway::compute::cpu {

// out, gate, up [n, f]. kInvalidArgument for negative sizes.
Status geglu_forward(float* out, const float* gate, const float* up, int n, int f);
// dgate, dup [n, f] (overwrite); dout, gate, up [n, f].
Status geglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                      const float* up, int n, int f);

}  // namespace spillway::compute::cpu
