// Elementwise kernels: residual add, fp32 <-> bf16 conversion, SwiGLU and GeGLU forward and
// backward.
//
// Every op is flat over `count` elements (SwiGLU's [n, f] tensors are contiguous, so n·f of them):
// thread i handles elements [8i, 8i + 8) with 16-byte accesses when all pointers are 16-byte
// aligned (the last thread takes the ragged tail one element at a time), else one element. bf16
// values are widened to fp32, combined, and rounded to bf16 once (round to nearest even).
// Formulas as the CPU reference (cpu/elementwise.cpp, cpu/swiglu.cpp, cpu/geglu.cpp):
//   silu(g) = g·σ(g), σ(g) = 1 / (1 + e^-g)
//   dup = dout·g·σ(g),  dgate = dout·up·σ(g)·(1 + g·(1 - σ(g)))
//   gelu_tanh(g) = ½·g·(1 + tanh(u)), u = √(2/π)·(g + 0.044715·g³)
//   dup = dout·gelu_tanh(g),  dgate = dout·up·(½·(1 + tanh u) + ½·g·(1 − tanh² u)·√(2/π)·(1 +
//   3·0.044715·g²))
// The GeGLU's gelu_tanh(g) is not rounded to bf16 before it multiplies up (PyTorch's bf16 model
// rounds it: a difference within bf16 tolerance, as the SwiGLU's).
#include <string>

#include "compute/cuda/elementwise.cuh"
#include "compute/cuda/vec.cuh"

namespace spillway::cuda {

namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------
// kernels

__device__ __forceinline__ float sigmoid(float g) {
  return 1.0f / (1.0f + expf(-g));
}

// The first element of this thread's chunk of W.
template <int W>
__device__ __forceinline__ size_t chunk_start() {
  return (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * W;
}

// N elements at y, x (N = W in the body, 1 in the tail).
template <int N>
__device__ __forceinline__ void add_chunk(bf16* y, const bf16* x) {
  float a[N], b[N];
  load_vec(a, y);
  load_vec(b, x);
#pragma unroll
  for (int k = 0; k < N; ++k) a[k] += b[k];
  store_vec(y, a);
}

template <int W>
__global__ void add_inplace_kernel(bf16* __restrict__ y, const bf16* __restrict__ x, size_t count) {
  const size_t i = chunk_start<W>();
  if (i + W <= count) {
    add_chunk<W>(y + i, x + i);
  } else {
    for (size_t j = i; j < count; ++j) add_chunk<1>(y + j, x + j);
  }
}

template <int N, class Dst, class Src>
__device__ __forceinline__ void convert_chunk(Dst* dst, const Src* src) {
  float v[N];
  load_vec(v, src);
  store_vec(dst, v);
}

template <int W, class Dst, class Src>
__global__ void convert_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, size_t count) {
  const size_t i = chunk_start<W>();
  if (i + W <= count) {
    convert_chunk<W>(dst + i, src + i);
  } else {
    for (size_t j = i; j < count; ++j) convert_chunk<1>(dst + j, src + j);
  }
}

template <int N>
__device__ __forceinline__ void swiglu_forward_chunk(bf16* out, const bf16* gate, const bf16* up) {
  float g[N], u[N];
  load_vec(g, gate);
  load_vec(u, up);
#pragma unroll
  for (int k = 0; k < N; ++k) g[k] = g[k] * sigmoid(g[k]) * u[k];
  store_vec(out, g);
}

template <int W>
__global__ void swiglu_forward_kernel(bf16* __restrict__ out, const bf16* __restrict__ gate,
                                      const bf16* __restrict__ up, size_t count) {
  const size_t i = chunk_start<W>();
  if (i + W <= count) {
    swiglu_forward_chunk<W>(out + i, gate + i, up + i);
  } else {
    for (size_t j = i; j < count; ++j) swiglu_forward_chunk<1>(out + j, gate + j, up + j);
  }
}

template <int N>
__device__ __forceinline__ void swiglu_backward_chunk(bf16* dgate, bf16* dup, const bf16* dout,
                                                      const bf16* gate, const bf16* up) {
  float go[N], g[N], u[N], dg[N], du[N];
  load_vec(go, dout);
  load_vec(g, gate);
  load_vec(u, up);
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float s = sigmoid(g[k]);
    du[k] = go[k] * g[k] * s;
    dg[k] = go[k] * u[k] * s * (1.0f + g[k] * (1.0f - s));
  }
  store_vec(dgate, dg);
  store_vec(dup, du);
}

template <int W>
__global__ void swiglu_backward_kernel(bf16* __restrict__ dgate, bf16* __restrict__ dup,
                                       const bf16* __restrict__ dout, const bf16* __restrict__ gate,
                                       const bf16* __restrict__ up, size_t count) {
  const size_t i = chunk_start<W>();
  if (i + W <= count) {
    swiglu_backward_chunk<W>(dgate + i, dup + i, dout + i, gate + i, up + i);
  } else {
    for (size_t j = i; j < count; ++j)
      swiglu_backward_chunk<1>(dgate + j, dup + j, dout + j, gate + j, up + j);
  }
}

constexpr float kGeluBeta = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluKappa = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float g) {
  return 0.5f * g * (1.0f + tanhf(kGeluBeta * (g + kGeluKappa * g * g * g)));
}

__device__ __forceinline__ float gelu_tanh_grad(float g) {
  const float g2 = g * g;
  const float t = tanhf(kGeluBeta * (g + kGeluKappa * g2 * g));
  return 0.5f * (1.0f + t) +
         0.5f * g * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * g2);
}

template <int N>
__device__ __forceinline__ void geglu_forward_chunk(bf16* out, const bf16* gate, const bf16* up) {
  float g[N], u[N];
  load_vec(g, gate);
  load_vec(u, up);
#pragma unroll
  for (int k = 0; k < N; ++k) g[k] = gelu_tanh(g[k]) * u[k];
  store_vec(out, g);
}

template <int W>
__global__ void geglu_forward_kernel(bf16* __restrict__ out, const bf16* __restrict__ gate,
                                     const bf16* __restrict__ up, size_t count) {
  const size_t i = chunk_start<W>();
  if (i + W <= count) {
    geglu_forward_chunk<W>(out + i, gate + i, up + i);
  } else {
    for (size_t j = i; j < count; ++j) geglu_forward_chunk<1>(out + j, gate + j, up + j);
  }
}

template <int N>
__device__ __forceinline__ void geglu_backward_chunk(bf16* dgate, bf16* dup, const bf16* dout,
                                                     const bf16* gate, const bf16* up) {
  float go[N], g[N], u[N], dg[N], du[N];
  load_vec(go, dout);
  load_vec(g, gate);
  load_vec(u, up);
#pragma unroll
  for (int k = 0; k < N; ++k) {
    du[k] = go[k] * gelu_tanh(g[k]);
    dg[k] = go[k] * u[k] * gelu_tanh_grad(g[k]);
  }
  store_vec(dgate, dg);
  store_vec(dup, du);
}

template <int W>
__global__ void geglu_backward_kernel(bf16* __restrict__ dgate, bf16* __restrict__ dup,
                                      const bf16* __restrict__ dout, const bf16* __restrict__ gate,
                                      const bf16* __restrict__ up, size_t count) {
  const size_t i = chunk_start<W>();
  if (i + W <= count) {
    geglu_backward_chunk<W>(dgate + i, dup + i, dout + i, gate + i, up + i);
  } else {
    for (size_t j = i; j < count; ++j)
      geglu_backward_chunk<1>(dgate + j, dup + j, dout + j, gate + j, up + j);
  }
}

// ---------------------------------------------------------------------------------------------
// launchers

// Blocks of kThreads threads for `count` elements, w per thread.
unsigned flat_blocks(size_t count, int w) {
  return ceil_div(count, static_cast<size_t>(w) * kThreads);
}

Status check_swiglu_shape(const char* op, int n, int f) {
  if (n < 0 || f < 0) {
    return invalid_argument(std::string(op) + ": bad shape n=" + std::to_string(n) +
                            " f=" + std::to_string(f));
  }
  return Status::ok_status();
}

// A gated linear unit's kernel over n × f elements: `vec` (kVecWidth elements a thread) when every
// pointer is 16-byte aligned, else `scalar`; `name` for the launch check.
template <class... Params, class... Args>
Status launch_glu(const char* op, const char* name, void (*vec)(Params...),
                  void (*scalar)(Params...), int n, int f, cudaStream_t stream, Args... args) {
  SPW_RETURN_IF_ERROR(check_swiglu_shape(op, n, f));
  const size_t count = static_cast<size_t>(n) * f;
  if (count == 0) return Status::ok_status();
  if (aligned16(args...)) {
    vec<<<flat_blocks(count, kVecWidth), kThreads, 0, stream>>>(args..., count);
  } else {
    scalar<<<flat_blocks(count, 1), kThreads, 0, stream>>>(args..., count);
  }
  return CUDA_LAUNCH_CHECK(name);
}

template <class Dst, class Src>
Status convert(Dst* dst, const Src* src, size_t count, cudaStream_t stream) {
  if (count == 0) return Status::ok_status();
  if (aligned16(dst, src)) {
    convert_kernel<kVecWidth>
        <<<flat_blocks(count, kVecWidth), kThreads, 0, stream>>>(dst, src, count);
  } else {
    convert_kernel<1><<<flat_blocks(count, 1), kThreads, 0, stream>>>(dst, src, count);
  }
  return CUDA_LAUNCH_CHECK("convert_kernel");
}

}  // namespace

Status add_inplace(bf16* y, const bf16* x, size_t count, cudaStream_t stream) {
  if (count == 0) return Status::ok_status();
  if (aligned16(y, x)) {
    add_inplace_kernel<kVecWidth>
        <<<flat_blocks(count, kVecWidth), kThreads, 0, stream>>>(y, x, count);
  } else {
    add_inplace_kernel<1><<<flat_blocks(count, 1), kThreads, 0, stream>>>(y, x, count);
  }
  return CUDA_LAUNCH_CHECK("add_inplace_kernel");
}

Status convert_f32_to_bf16(bf16* dst, const float* src, size_t count, cudaStream_t stream) {
  return convert(dst, src, count, stream);
}

Status convert_bf16_to_f32(float* dst, const bf16* src, size_t count, cudaStream_t stream) {
  return convert(dst, src, count, stream);
}

Status swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int n, int f,
                      cudaStream_t stream) {
  return launch_glu("swiglu_forward", "swiglu_forward_kernel", swiglu_forward_kernel<kVecWidth>,
                    swiglu_forward_kernel<1>, n, f, stream, out, gate, up);
}

Status swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                       int n, int f, cudaStream_t stream) {
  return launch_glu("swiglu_backward", "swiglu_backward_kernel", swiglu_backward_kernel<kVecWidth>,
                    swiglu_backward_kernel<1>, n, f, stream, dgate, dup, dout, gate, up);
}

Status geglu_forward(bf16* out, const bf16* gate, const bf16* up, int n, int f,
                     cudaStream_t stream) {
  return launch_glu("geglu_forward", "geglu_forward_kernel", geglu_forward_kernel<kVecWidth>,
                    geglu_forward_kernel<1>, n, f, stream, out, gate, up);
}

Status geglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                      int n, int f, cudaStream_t stream) {
  return launch_glu("geglu_backward", "geglu_backward_kernel", geglu_backward_kernel<kVecWidth>,
                    geglu_backward_kernel<1>, n, f, stream, dgate, dup, dout, gate, up);
}

}  // namespace spillway::cuda
