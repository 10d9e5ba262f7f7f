// GPU self-test and benchmark of compute/cuda/attention.cu and attention-key-bias.cu (no gtest).
//
// Build from the repository root (CUDA 12 or 13, an sm_90 GPU), one line:
// clang-format off
//   /usr/local/cuda/bin/nvcc -std=c++20 -O3 -arch=sm_90 --expt-relaxed-constexpr -Iengine -DSPILLWAY_HAVE_CUDNN=1 tests/gpu/attention-bench.cu engine/compute/cuda/attention.cu engine/compute/cuda/attention-key-bias.cu engine/compute/cuda/cudnn-attention.cpp engine/compute/cuda/cudnn-graph.cpp engine/compute/cuda/cudnn-ragged.cu engine/compute/cpu/rope.cpp engine/compute/cuda-workspace.cpp engine/compute/tensor.cpp engine/core/dtype.cpp engine/core/thread-pool.cpp engine/core/status.cpp engine/core/log.cpp -ldl -o /tmp/attention-bench
// clang-format on
// Run: /tmp/attention-bench [--check-only]
//
// Checks, on random bf16 inputs, the generic and (head_dim 64/128) flash kernel sets against naive
// fp32 GPU kernels written independently here (with a sliding window and a scale of their own on
// some shapes): out (relative L2 < 1e-2), lse (max abs < 2e-3),
// dq, dk, dv (relative L2 < 2e-2); flash against generic; the same bits on a second call. The
// key-bias gradient (generic and flash kernels) against a double-precision reference that takes the
// other route (db = Σ_j R_jᵀ dk_j with dk in double): relative L2 < 1e-3 over all elements and
// < 1e-2 over the lowest-frequency quarter of the pairs (where the cancellation is), and db += on a
// second call.
// cuDNN's fused attention (compute/cuda/cudnn-attention.h), where libcudnn.so.9 opens, against the
// same references and for the same bits twice, and timed beside the flash kernels.
// Exit status 1 when any check fails, before the benchmark (the packed rows' checks, after it: 1
// too). Then times the flash kernels at
// llama2-7b (b=4, t=2048, 32 heads of 128) and qwen2.5-7b (28/4 heads) shapes and prints TFLOPS
// with forward FLOPs = 4·b·hq·t²·d / 2 (causal half) and fwd+bwd = 3.5 × that, up to one sequence
// of 32K tokens (cuDNN's backward in chunks of heads there), and the key-bias
// gradient's time at the qwen2.5-7b shape (b=1, t=2048) next to the attention's; and packed rows
// (chat examples of 300 to 900 tokens) on the flash kernel and on cuDNN (bench_packed).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "compute/cpu/rope.h"
#include "compute/cuda/attention-path.cuh"
#include "compute/cuda/attention.cuh"
#include "compute/cuda/cudnn-attention.h"
#include "core/log.h"

using spillway::Status;
using spillway::cuda::AttentionPath;
using spillway::cuda::bf16;

#define CHECK_CUDA(stmt)                                                                          \
  do {                                                                                            \
    if (cudaError_t e_ = (stmt); e_ != cudaSuccess) {                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #stmt, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

#define CHECK_OK(expr)                                                                            \
  do {                                                                                            \
    if (Status s_ = (expr); !s_.ok()) {                                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.to_string().c_str()); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

namespace {

constexpr int kMaxD = 256;

// cuDNN's attention, null when it does not open (the checks and timings then skip it).
std::unique_ptr<spillway::cuda::CudnnAttention> g_cudnn;

// A device buffer of n elements, freed on scope exit.
template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : n(n) {
    CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> host() const {
    std::vector<T> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void upload(const std::vector<T>& h) {
    CHECK_CUDA(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* p = nullptr;
  size_t n;
};

// ---------------------------------------------------------------------------------------------
// inputs

__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// x[i] ≈ N(0, scale²): the sum of four uniforms, centred and scaled to unit variance.
__global__ void fill_kernel(bf16* x, size_t n, uint64_t seed, float scale) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = 0.0f;
  for (int u = 0; u < 4; ++u)
    s += hash32(seed * 0x9e3779b97f4a7c15ULL + i * 4 + u) * (1.0f / 4294967296.0f);
  x[i] = __float2bfloat16_rn((s - 2.0f) * 1.7320508f * scale);
}

void fill(DeviceBuffer<bf16>& x, uint64_t seed, float scale) {
  fill_kernel<<<static_cast<unsigned>((x.n + 255) / 256), 256>>>(x.p, x.n, seed, scale);
  CHECK_CUDA(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------
// naive fp32 references: one thread per row, straight from the formulas of cpu/attention.h

struct Shape {
  int batch, seq, hq, hkv, d;
  int window = 0;      // sliding window (AttentionParams); 0: none
  float scale = 0.0f;  // the scores' scale; 0: 1/sqrt(d)
  __host__ __device__ float sc() const { return scale > 0.0f ? scale : 1.0f / sqrtf(float(d)); }
  // Query t sees keys [first_key(t), t]; key s is seen by queries [s, key_end(s)).
  __host__ __device__ int first_key(int t) const { return window > 0 ? max(0, t - window + 1) : 0; }
  __host__ __device__ int key_end(int s) const { return window > 0 ? min(seq, s + window) : seq; }
  spillway::compute::AttentionParams params() const { return {scale, window}; }
  // Σ_t the keys query t sees: the attention's FLOPs are 4·b·hq·d times this.
  double scores() const {
    double n = 0;
    for (int t = 0; t < seq; ++t) n += t - first_key(t) + 1;
    return n;
  }
  __host__ __device__ size_t q_elems() const { return static_cast<size_t>(batch) * seq * hq * d; }
  __host__ __device__ size_t kv_elems() const { return static_cast<size_t>(batch) * seq * hkv * d; }
  __host__ __device__ size_t rows() const { return static_cast<size_t>(batch) * hq * seq; }
};

__device__ float dot_bf16(const bf16* a, const bf16* b, int d) {
  float s = 0.0f;
  for (int j = 0; j < d; ++j) s += __bfloat162float(a[j]) * __bfloat162float(b[j]);
  return s;
}

// out[b, t, h, :], lse[b, h, t]
__global__ void ref_forward_kernel(float* out, float* lse, const bf16* q, const bf16* k,
                                   const bf16* v, Shape sh) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= sh.rows()) return;
  const int t = static_cast<int>(idx % sh.seq), bh = static_cast<int>(idx / sh.seq);
  const int b = bh / sh.hq, h = bh % sh.hq, g = h / (sh.hq / sh.hkv), d = sh.d;
  const float scale = sh.sc();
  const bf16* qr = q + ((static_cast<size_t>(b) * sh.seq + t) * sh.hq + h) * d;
  auto krow = [&](const bf16* x, int s) {
    return x + ((static_cast<size_t>(b) * sh.seq + s) * sh.hkv + g) * d;
  };
  float m = -INFINITY;
  for (int s = sh.first_key(t); s <= t; ++s) m = fmaxf(m, dot_bf16(qr, krow(k, s), d) * scale);
  float acc[kMaxD] = {}, l = 0.0f;
  for (int s = sh.first_key(t); s <= t; ++s) {
    const float p = expf(dot_bf16(qr, krow(k, s), d) * scale - m);
    l += p;
    const bf16* vr = krow(v, s);
    for (int j = 0; j < d; ++j) acc[j] += p * __bfloat162float(vr[j]);
  }
  float* o = out + ((static_cast<size_t>(b) * sh.seq + t) * sh.hq + h) * d;
  for (int j = 0; j < d; ++j) o[j] = acc[j] / l;
  lse[idx] = m + logf(l);
}

// delta[b, h, t] = Σ dout · out
__global__ void ref_delta_kernel(float* delta, const bf16* dout, const float* out, Shape sh) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= sh.rows()) return;
  const int t = static_cast<int>(idx % sh.seq), bh = static_cast<int>(idx / sh.seq);
  const int b = bh / sh.hq, h = bh % sh.hq;
  const size_t off = ((static_cast<size_t>(b) * sh.seq + t) * sh.hq + h) * sh.d;
  float s = 0.0f;
  for (int j = 0; j < sh.d; ++j) s += __bfloat162float(dout[off + j]) * out[off + j];
  delta[idx] = s;
}

// dq_t = scale · Σ_{s<=t, t−s<window} P_ts (dP_ts − D_t) k_s
__global__ void ref_dq_kernel(float* dq, const bf16* dout, const bf16* q, const bf16* k,
                              const bf16* v, const float* lse, const float* delta, Shape sh) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= sh.rows()) return;
  const int t = static_cast<int>(idx % sh.seq), bh = static_cast<int>(idx / sh.seq);
  const int b = bh / sh.hq, h = bh % sh.hq, g = h / (sh.hq / sh.hkv), d = sh.d;
  const float scale = sh.sc();
  const size_t off = ((static_cast<size_t>(b) * sh.seq + t) * sh.hq + h) * d;
  float acc[kMaxD] = {};
  for (int s = sh.first_key(t); s <= t; ++s) {
    const size_t ko = ((static_cast<size_t>(b) * sh.seq + s) * sh.hkv + g) * d;
    const float p = expf(dot_bf16(q + off, k + ko, d) * scale - lse[idx]);
    const float ds = p * (dot_bf16(dout + off, v + ko, d) - delta[idx]);
    for (int j = 0; j < d; ++j) acc[j] += ds * __bfloat162float(k[ko + j]);
  }
  for (int j = 0; j < d; ++j) dq[off + j] = acc[j] * scale;
}

// dk_s = scale · Σ_h Σ_{t>=s} dS_ts q_t,  dv_s = Σ_h Σ_{t>=s} P_ts dout_t
__global__ void ref_dkdv_kernel(float* dk, float* dv, const bf16* dout, const bf16* q,
                                const bf16* k, const bf16* v, const float* lse, const float* delta,
                                Shape sh) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(sh.batch) * sh.hkv * sh.seq) return;
  const int s = static_cast<int>(idx % sh.seq), bg = static_cast<int>(idx / sh.seq);
  const int b = bg / sh.hkv, g = bg % sh.hkv, group = sh.hq / sh.hkv, d = sh.d;
  const float scale = sh.sc();
  const size_t ko = ((static_cast<size_t>(b) * sh.seq + s) * sh.hkv + g) * d;
  float acc_k[kMaxD] = {}, acc_v[kMaxD] = {};
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int t = s; t < sh.key_end(s); ++t) {
      const size_t off = ((static_cast<size_t>(b) * sh.seq + t) * sh.hq + h) * d;
      const size_t row = (static_cast<size_t>(b) * sh.hq + h) * sh.seq + t;
      const float p = expf(dot_bf16(q + off, k + ko, d) * scale - lse[row]);
      const float ds = p * (dot_bf16(dout + off, v + ko, d) - delta[row]);
      for (int j = 0; j < d; ++j) {
        acc_k[j] += ds * __bfloat162float(q[off + j]);
        acc_v[j] += p * __bfloat162float(dout[off + j]);
      }
    }
  }
  for (int j = 0; j < d; ++j) {
    dk[ko + j] = acc_k[j] * scale;
    dv[ko + j] = acc_v[j];
  }
}

// Key bias, double precision, by the other route: lse and D per query row, then per key
// G_s = Σ_h Σ_{t>=s} dS_ts q_t and rot_s = scale · R_sᵀ G_s, then db = Σ_b Σ_s rot_s.
__global__ void ref_kb_rows_kernel(double* lse, double* delta, const bf16* dout, const bf16* q,
                                   const bf16* k, const bf16* v, Shape sh) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= sh.rows()) return;
  const int t = static_cast<int>(idx % sh.seq), bh = static_cast<int>(idx / sh.seq);
  const int b = bh / sh.hq, h = bh % sh.hq, g = h / (sh.hq / sh.hkv), d = sh.d;
  const double scale = 1.0f / sqrtf(static_cast<float>(d));
  const size_t off = ((static_cast<size_t>(b) * sh.seq + t) * sh.hq + h) * d;
  auto ddot = [&](const bf16* a, const bf16* c) {
    double x = 0.0;
    for (int j = 0; j < d; ++j)
      x += static_cast<double>(__bfloat162float(a[j])) * __bfloat162float(c[j]);
    return x;
  };
  double m = -INFINITY;
  for (int s = 0; s <= t; ++s)
    m = fmax(m,
             ddot(q + off, k + ((static_cast<size_t>(b) * sh.seq + s) * sh.hkv + g) * d) * scale);
  double z = 0.0, pdp = 0.0;
  for (int s = 0; s <= t; ++s) {
    const size_t ko = ((static_cast<size_t>(b) * sh.seq + s) * sh.hkv + g) * d;
    const double e = exp(ddot(q + off, k + ko) * scale - m);
    z += e;
    pdp += e * ddot(dout + off, v + ko);
  }
  lse[idx] = m + log(z);
  delta[idx] = pdp / z;
}

__global__ void ref_kb_keys_kernel(double* rot, const bf16* dout, const bf16* q, const bf16* k,
                                   const bf16* v, const double* lse, const double* delta,
                                   const float* inv_freq, Shape sh) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(sh.batch) * sh.hkv * sh.seq) return;
  const int s = static_cast<int>(idx % sh.seq), bg = static_cast<int>(idx / sh.seq);
  const int b = bg / sh.hkv, g = bg % sh.hkv, group = sh.hq / sh.hkv, d = sh.d, half = d / 2;
  const double scale = 1.0f / sqrtf(static_cast<float>(d));
  const size_t ko = ((static_cast<size_t>(b) * sh.seq + s) * sh.hkv + g) * d;
  auto ddot = [&](const bf16* a, const bf16* c) {
    double x = 0.0;
    for (int j = 0; j < d; ++j)
      x += static_cast<double>(__bfloat162float(a[j])) * __bfloat162float(c[j]);
    return x;
  };
  double G[kMaxD] = {};
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int t = s; t < sh.seq; ++t) {
      const size_t off = ((static_cast<size_t>(b) * sh.seq + t) * sh.hq + h) * d;
      const size_t row = (static_cast<size_t>(b) * sh.hq + h) * sh.seq + t;
      const double p = exp(ddot(q + off, k + ko) * scale - lse[row]);
      const double ds = p * (ddot(dout + off, v + ko) - delta[row]);
      for (int j = 0; j < d; ++j) G[j] += ds * __bfloat162float(q[off + j]);
    }
  }
  double* r = rot + idx * d;  // [b, hkv, seq, d]
  for (int f = 0; f < half; ++f) {
    const float angle = __fmul_rn(static_cast<float>(s), inv_freq[f]);
    const double c = static_cast<float>(cos(static_cast<double>(angle)));
    const double sn = static_cast<float>(sin(static_cast<double>(angle)));
    r[f] = scale * (c * G[f] + sn * G[f + half]);
    r[f + half] = scale * (c * G[f + half] - sn * G[f]);
  }
}

__global__ void ref_kb_sum_kernel(double* db, const double* rot, Shape sh) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;  // g·d + e
  if (idx >= sh.hkv * sh.d) return;
  const int g = idx / sh.d, e = idx % sh.d;
  double acc = 0.0;
  for (int b = 0; b < sh.batch; ++b)
    for (int s = 0; s < sh.seq; ++s)
      acc += rot[((static_cast<size_t>(b) * sh.hkv + g) * sh.seq + s) * sh.d + e];
  db[idx] = acc;
}

unsigned blocks_for(size_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// ---------------------------------------------------------------------------------------------
// comparisons

struct Error {
  double max_abs = 0.0, rel_l2 = 0.0;
};

template <class T>
double as_double(T x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __bfloat162float(x);
  } else {
    return static_cast<double>(x);
  }
}

template <class A, class B>
Error compare(const std::vector<A>& got, const std::vector<B>& want) {
  double num = 0.0, den = 0.0, mx = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = as_double(got[i]), b = as_double(want[i]);
    const double diff = std::isfinite(a) ? std::fabs(a - b) : INFINITY;
    num += diff * diff;
    den += b * b;
    mx = std::max(mx, diff);
  }
  return {mx, std::sqrt(num / std::max(den, 1e-300))};
}

int g_failures = 0;

void report(const char* what, const Error& e, double rel_tol, double abs_tol = INFINITY) {
  const bool ok = e.rel_l2 <= rel_tol && e.max_abs <= abs_tol;
  if (!ok) ++g_failures;
  std::printf("    %-34s max_abs %.3e  rel_l2 %.3e  %s\n", what, e.max_abs, e.rel_l2,
              ok ? "ok" : "FAIL");
}

template <class T>
void report_same_bits(const char* what, const DeviceBuffer<T>& a, const std::vector<T>& first) {
  const std::vector<T> again = a.host();
  const bool ok = std::memcmp(again.data(), first.data(), first.size() * sizeof(T)) == 0;
  if (!ok) ++g_failures;
  std::printf("    %-34s %s\n", what, ok ? "same bits" : "FAIL: bits differ between calls");
}

const char* path_name(AttentionPath p) {
  return p == AttentionPath::kFlash ? "flash" : "generic";
}

// ---------------------------------------------------------------------------------------------
// checks

struct PathOutputs {
  std::vector<bf16> out, dq, dk, dv;
  std::vector<float> lse;
};

void check_attention(const Shape& sh) {
  std::printf("attention b=%d t=%d hq=%d hkv=%d d=%d window=%d scale=%g\n", sh.batch, sh.seq, sh.hq,
              sh.hkv, sh.d, sh.window, sh.sc());
  DeviceBuffer<bf16> q(sh.q_elems()), k(sh.kv_elems()), v(sh.kv_elems()), dout(sh.q_elems());
  fill(q, 1, 2.0f);  // scores of a few units: a peaked softmax
  fill(k, 2, 1.0f);
  fill(v, 3, 1.0f);
  fill(dout, 4, 1.0f);

  DeviceBuffer<float> out_ref(sh.q_elems()), lse_ref(sh.rows()), delta_ref(sh.rows());
  DeviceBuffer<float> dq_ref(sh.q_elems()), dk_ref(sh.kv_elems()), dv_ref(sh.kv_elems());
  ref_forward_kernel<<<blocks_for(sh.rows(), 128), 128>>>(out_ref.p, lse_ref.p, q.p, k.p, v.p, sh);
  ref_delta_kernel<<<blocks_for(sh.rows(), 128), 128>>>(delta_ref.p, dout.p, out_ref.p, sh);
  ref_dq_kernel<<<blocks_for(sh.rows(), 128), 128>>>(dq_ref.p, dout.p, q.p, k.p, v.p, lse_ref.p,
                                                     delta_ref.p, sh);
  ref_dkdv_kernel<<<blocks_for(static_cast<size_t>(sh.batch) * sh.hkv * sh.seq, 128), 128>>>(
      dk_ref.p, dv_ref.p, dout.p, q.p, k.p, v.p, lse_ref.p, delta_ref.p, sh);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<float> h_out_ref = out_ref.host(), h_lse_ref = lse_ref.host();
  const std::vector<float> h_dq_ref = dq_ref.host(), h_dk_ref = dk_ref.host(),
                           h_dv_ref = dv_ref.host();

  DeviceBuffer<bf16> out(sh.q_elems()), dq(sh.q_elems()), dk(sh.kv_elems()), dv(sh.kv_elems());
  DeviceBuffer<float> lse(sh.rows());
  const size_t scratch_floats = spillway::cuda::attention_backward_scratch_floats(
      sh.batch, sh.seq, sh.hq, sh.hkv, sh.d, true);
  DeviceBuffer<float> scratch(scratch_floats);

  std::vector<AttentionPath> paths = {AttentionPath::kGeneric};
  if (sh.d == 64 || sh.d == 96 || sh.d == 128 || sh.d == 256)
    paths.push_back(AttentionPath::kFlash);
  std::vector<PathOutputs> results;
  for (AttentionPath path : paths) {
    std::printf("  %s\n", path_name(path));
    auto forward = [&] {
      CHECK_OK(spillway::cuda::attention_forward_path(path, out.p, lse.p, q.p, k.p, v.p, sh.batch,
                                                      sh.seq, sh.hq, sh.hkv, sh.d, sh.params(),
                                                      nullptr));
    };
    auto backward = [&] {
      CHECK_OK(spillway::cuda::attention_backward_path(
          path, dq.p, dk.p, dv.p, dout.p, q.p, k.p, v.p, out.p, lse.p, sh.batch, sh.seq, sh.hq,
          sh.hkv, sh.d, sh.params(), scratch.p, scratch_floats, nullptr));
    };
    forward();
    backward();
    CHECK_CUDA(cudaDeviceSynchronize());
    PathOutputs r{out.host(), dq.host(), dk.host(), dv.host(), lse.host()};
    report("out vs fp32 reference", compare(r.out, h_out_ref), 1e-2);
    report("lse vs fp32 reference", compare(r.lse, h_lse_ref), INFINITY, 2e-3);
    report("dq vs fp32 reference", compare(r.dq, h_dq_ref), 2e-2);
    report("dk vs fp32 reference", compare(r.dk, h_dk_ref), 2e-2);
    report("dv vs fp32 reference", compare(r.dv, h_dv_ref), 2e-2);
    forward();
    backward();
    CHECK_CUDA(cudaDeviceSynchronize());
    report_same_bits("out, second call", out, r.out);
    report_same_bits("lse, second call", lse, r.lse);
    report_same_bits("dq, second call", dq, r.dq);
    report_same_bits("dk, second call", dk, r.dk);
    report_same_bits("dv, second call", dv, r.dv);
    results.push_back(std::move(r));
  }
  if (g_cudnn) {
    const spillway::cuda::AttentionShape shape{sh.batch, sh.seq, sh.hq, sh.hkv, sh.d, sh.window};
    const size_t ws_bytes = scratch_floats * sizeof(float);
    bool ran_forward = false, ran_backward = false;
    auto forward = [&] {
      auto r = g_cudnn->forward(out.p, lse.p, q.p, k.p, v.p, shape, sh.sc(), scratch.p, ws_bytes,
                                nullptr);
      CHECK_OK(r.status());
      ran_forward = *r;
    };
    auto backward = [&] {
      auto r = g_cudnn->backward(dq.p, dk.p, dv.p, dout.p, q.p, k.p, v.p, out.p, lse.p, shape,
                                 sh.sc(), scratch.p, ws_bytes, nullptr);
      CHECK_OK(r.status());
      ran_backward = *r;
    };
    forward();
    if (ran_forward) {
      backward();
      CHECK_CUDA(cudaDeviceSynchronize());
      std::printf("  cudnn (backward %s)\n", ran_backward ? "cudnn" : "not covered");
      PathOutputs r{out.host(), dq.host(), dk.host(), dv.host(), lse.host()};
      report("out vs fp32 reference", compare(r.out, h_out_ref), 1e-2);
      report("lse vs fp32 reference", compare(r.lse, h_lse_ref), INFINITY, 2e-3);
      if (ran_backward) {
        report("dq vs fp32 reference", compare(r.dq, h_dq_ref), 2e-2);
        report("dk vs fp32 reference", compare(r.dk, h_dk_ref), 2e-2);
        report("dv vs fp32 reference", compare(r.dv, h_dv_ref), 2e-2);
      }
      forward();
      backward();
      CHECK_CUDA(cudaDeviceSynchronize());
      report_same_bits("out, second call", out, r.out);
      report_same_bits("lse, second call", lse, r.lse);
      if (ran_backward) {
        report_same_bits("dq, second call", dq, r.dq);
        report_same_bits("dk, second call", dk, r.dk);
        report_same_bits("dv, second call", dv, r.dv);
      }
    } else {
      std::printf("  cudnn: not covered\n");
    }
  }
  if (results.size() == 2) {
    std::printf("  flash vs generic\n");
    report("out", compare(results[1].out, results[0].out), 1e-2);
    report("dq", compare(results[1].dq, results[0].dq), 2e-2);
    report("dk", compare(results[1].dk, results[0].dk), 2e-2);
    report("dv", compare(results[1].dv, results[0].dv), 2e-2);
  }
}

void check_key_bias(const Shape& sh, float theta, const spillway::compute::RopeScaling& scaling) {
  std::printf("key bias b=%d t=%d hq=%d hkv=%d d=%d theta=%g llama3 factor=%g\n", sh.batch, sh.seq,
              sh.hq, sh.hkv, sh.d, theta, scaling.factor);
  DeviceBuffer<bf16> q(sh.q_elems()), k(sh.kv_elems()), v(sh.kv_elems()), dout(sh.q_elems());
  fill(q, 11, 2.0f);
  fill(k, 12, 1.0f);
  fill(v, 13, 1.0f);
  fill(dout, 14, 1.0f);
  auto inv = spillway::compute::cpu::rope_inv_freq(sh.d, theta, scaling);
  CHECK_OK(inv.status());
  DeviceBuffer<float> inv_freq(inv->size());
  inv_freq.upload(*inv);

  DeviceBuffer<double> lse(sh.rows()), delta(sh.rows()), rot(sh.kv_elems()),
      db_ref(static_cast<size_t>(sh.hkv) * sh.d);
  ref_kb_rows_kernel<<<blocks_for(sh.rows(), 128), 128>>>(lse.p, delta.p, dout.p, q.p, k.p, v.p,
                                                          sh);
  ref_kb_keys_kernel<<<blocks_for(static_cast<size_t>(sh.batch) * sh.hkv * sh.seq, 64), 64>>>(
      rot.p, dout.p, q.p, k.p, v.p, lse.p, delta.p, inv_freq.p, sh);
  ref_kb_sum_kernel<<<blocks_for(static_cast<size_t>(sh.hkv) * sh.d, 128), 128>>>(db_ref.p, rot.p,
                                                                                  sh);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<double> want = db_ref.host();

  const size_t scratch_floats =
      spillway::cuda::attention_key_bias_scratch_floats(sh.batch, sh.seq, sh.hq, sh.hkv, sh.d);
  DeviceBuffer<float> scratch(scratch_floats), db(static_cast<size_t>(sh.hkv) * sh.d);
  std::vector<AttentionPath> paths = {AttentionPath::kGeneric};
  if (sh.d == 64 || sh.d == 128) paths.push_back(AttentionPath::kFlash);
  for (AttentionPath path : paths) {
    std::printf("  %s\n", path_name(path));
    auto run = [&] {
      CHECK_OK(spillway::cuda::attention_key_bias_backward_path(
          path, db.p, dout.p, q.p, k.p, v.p, sh.batch, sh.seq, sh.hq, sh.hkv, sh.d, theta, scaling,
          nullptr, scratch.p, scratch_floats, nullptr));
      CHECK_CUDA(cudaDeviceSynchronize());
    };
    CHECK_CUDA(cudaMemset(db.p, 0, db.n * sizeof(float)));
    run();
    const std::vector<float> got = db.host();
    report("db vs double reference", compare(got, want), 1e-3);
    // The lowest-frequency quarter of the pairs, both halves: where Σ_j dS_ij = 0 cancels most.
    const int half = sh.d / 2;
    std::vector<float> got_low;
    std::vector<double> want_low;
    for (int g = 0; g < sh.hkv; ++g) {
      for (int f = half - std::max(1, half / 4); f < half; ++f) {
        for (int e : {f, f + half}) {
          got_low.push_back(got[static_cast<size_t>(g) * sh.d + e]);
          want_low.push_back(want[static_cast<size_t>(g) * sh.d + e]);
        }
      }
    }
    report("db, lowest-frequency pairs", compare(got_low, want_low), 1e-2);
    // db += on a second call from ones: exactly 1 + (the first result), which also checks
    // determinism.
    db.upload(std::vector<float>(db.n, 1.0f));
    run();
    const std::vector<float> again = db.host();
    bool same = true;
    for (size_t i = 0; i < got.size(); ++i) same = same && again[i] == 1.0f + got[i];
    if (!same) ++g_failures;
    std::printf("    %-34s %s\n", "db += on a second call",
                same ? "1 + first result, same bits" : "FAIL");
  }
}

// ---------------------------------------------------------------------------------------------
// benchmark

template <class F>
float time_ms(F&& f, int iters) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  f();  // warm-up
  CHECK_CUDA(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) f();
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return ms / iters;
}

// A shape's inputs (q, k, v and dout filled from `seed` on, in [-1, 1]), outputs, and the
// backward's scratch as the CUDA backend sizes it where cuDNN runs.
struct AttentionBuffers {
  AttentionBuffers(const Shape& sh, uint64_t seed)
      : q(sh.q_elems()),
        k(sh.kv_elems()),
        v(sh.kv_elems()),
        dout(sh.q_elems()),
        out(sh.q_elems()),
        dq(sh.q_elems()),
        dk(sh.kv_elems()),
        dv(sh.kv_elems()),
        lse(sh.rows()),
        scratch_floats(spillway::cuda::attention_backward_scratch_floats(sh.batch, sh.seq, sh.hq,
                                                                         sh.hkv, sh.d, true)),
        scratch(scratch_floats) {
    fill(q, seed, 1.0f);
    fill(k, seed + 1, 1.0f);
    fill(v, seed + 2, 1.0f);
    fill(dout, seed + 3, 1.0f);
  }
  DeviceBuffer<bf16> q, k, v, dout, out, dq, dk, dv;
  DeviceBuffer<float> lse;
  size_t scratch_floats;
  DeviceBuffer<float> scratch;
};

// One timing line: forward, backward (2.5 × the forward's FLOPs) and both, in ms and TFLOPS.
void print_rates(const char* name, const char* path, const std::string& shape, double fwd_flops,
                 float f_ms, float b_ms) {
  std::printf(
      "%-12s %-6s %s  forward %.3f ms %.1f TFLOPS  backward %.3f ms %.1f TFLOPS  fwd+bwd %.3f ms "
      "%.1f TFLOPS\n",
      name, path, shape.c_str(), f_ms, fwd_flops / (f_ms * 1e9), b_ms,
      2.5 * fwd_flops / (b_ms * 1e9), f_ms + b_ms, 3.5 * fwd_flops / ((f_ms + b_ms) * 1e9));
}

// "b=4 t=2048 hq=32 hkv=32 d=128", the line's shape.
std::string shape_text(const Shape& sh) {
  char text[96];
  std::snprintf(text, sizeof text, "b=%d t=%d hq=%d hkv=%d d=%d", sh.batch, sh.seq, sh.hq, sh.hkv,
                sh.d);
  return text;
}

void bench_attention(const Shape& sh, const char* name) {
  AttentionBuffers buffers(sh, 21);
  auto& [q, k, v, dout, out, dq, dk, dv, lse, scratch_floats, scratch] = buffers;
  auto forward = [&] {
    CHECK_OK(spillway::cuda::attention_forward(out.p, lse.p, q.p, k.p, v.p, sh.batch, sh.seq, sh.hq,
                                               sh.hkv, sh.d, sh.params(), nullptr));
  };
  auto backward = [&] {
    CHECK_OK(spillway::cuda::attention_backward(dq.p, dk.p, dv.p, dout.p, q.p, k.p, v.p, out.p,
                                                lse.p, sh.batch, sh.seq, sh.hq, sh.hkv, sh.d,
                                                sh.params(), scratch.p, scratch_floats, nullptr));
  };
  // The visible scores only: the causal half, or the window's band.
  const double fwd_flops = 4.0 * sh.batch * sh.hq * sh.d * sh.scores();
  const float fwd_ms = time_ms(forward, 20);
  const float bwd_ms = time_ms(backward, 10);
  const std::string shape_line = shape_text(sh) + " window=" + std::to_string(sh.window);
  auto line = [&](const char* path, float f_ms, float b_ms) {
    print_rates(name, path, shape_line, fwd_flops, f_ms, b_ms);
  };
  line("flash", fwd_ms, bwd_ms);
  if (!g_cudnn) return;
  const spillway::cuda::AttentionShape shape{sh.batch, sh.seq, sh.hq, sh.hkv, sh.d, sh.window};
  bool ran = true;
  auto cudnn_forward = [&] {
    auto r = g_cudnn->forward(out.p, lse.p, q.p, k.p, v.p, shape, sh.sc(), scratch.p,
                              scratch_floats * sizeof(float), nullptr);
    CHECK_OK(r.status());
    ran = ran && *r;
  };
  auto cudnn_backward = [&] {
    auto r = g_cudnn->backward(dq.p, dk.p, dv.p, dout.p, q.p, k.p, v.p, out.p, lse.p, shape,
                               sh.sc(), scratch.p, scratch_floats * sizeof(float), nullptr);
    CHECK_OK(r.status());
    ran = ran && *r;
  };
  const float cf_ms = time_ms(cudnn_forward, 20);
  const float cb_ms = time_ms(cudnn_backward, 10);
  if (ran) {
    line("cudnn", cf_ms, cb_ms);
  } else {
    std::printf("%-12s cudnn  not covered\n", name);
  }
}

// Packed rows: each row of `sh` cut into examples of `lengths` in turn (row b starting at the b-th
// length; the rest of a row an example of its own), as chat fine-tuning packs them. The flash
// kernel (positions) against cuDNN's ragged sequences: cuDNN's outputs against the flash kernel's
// (out rel_l2 < 1e-2, lse max abs < 2e-3, dq/dk/dv rel_l2 < 2e-2), the same bits on a second
// call, and both timed, TFLOPS over the visible scores (Σ over examples of L(L+1)/2).
void bench_packed(const Shape& sh, const std::vector<int>& lengths, const char* name) {
  std::vector<int32_t> pos(static_cast<size_t>(sh.batch) * sh.seq);
  spillway::compute::PackedBounds bounds;
  double scores = 0;
  for (int b = 0; b < sh.batch; ++b) {
    size_t e = b;
    int start = 0;
    auto close = [&](int end) {
      const double len = end - start;
      scores += len * (len + 1) / 2;
      ++bounds.examples;
      bounds.longest = std::max(bounds.longest, end - start);
    };
    for (int t = 0; t < sh.seq; ++t) {
      if (t - start == lengths[e % lengths.size()]) {
        close(t);
        start = t;
        ++e;
      }
      pos[static_cast<size_t>(b) * sh.seq + t] = t - start;
    }
    close(sh.seq);
  }
  DeviceBuffer<int32_t> positions(pos.size());
  positions.upload(pos);
  AttentionBuffers buffers(sh, 41);
  auto& [q, k, v, dout, out, dq, dk, dv, lse, scratch_floats, scratch] = buffers;
  spillway::compute::AttentionParams params = sh.params();
  params.positions = spillway::compute::positions_of(positions.p, sh.batch, sh.seq);
  auto forward = [&] {
    CHECK_OK(spillway::cuda::attention_forward(out.p, lse.p, q.p, k.p, v.p, sh.batch, sh.seq, sh.hq,
                                               sh.hkv, sh.d, params, nullptr));
  };
  auto backward = [&] {
    CHECK_OK(spillway::cuda::attention_backward(dq.p, dk.p, dv.p, dout.p, q.p, k.p, v.p, out.p,
                                                lse.p, sh.batch, sh.seq, sh.hq, sh.hkv, sh.d,
                                                params, scratch.p, scratch_floats, nullptr));
  };
  std::printf("%-12s packed: %d examples, the longest %d tokens\n", name, bounds.examples,
              bounds.longest);
  forward();
  backward();
  const auto out0 = out.host();
  const auto lse0 = lse.host();
  const auto dq0 = dq.host(), dk0 = dk.host(), dv0 = dv.host();
  const double fwd_flops = 4.0 * sh.hq * sh.d * scores;
  const std::string shape_line = "packed " + shape_text(sh);
  auto line = [&](const char* path, float f_ms, float b_ms) {
    print_rates(name, path, shape_line, fwd_flops, f_ms, b_ms);
  };
  line("flash", time_ms(forward, 20), time_ms(backward, 10));
  if (!g_cudnn) return;
  const spillway::cuda::AttentionShape shape{sh.batch, sh.seq, sh.hq, sh.hkv, sh.d, sh.window};
  bool ran_forward = true, ran_backward = true;
  auto cudnn_forward = [&] {
    auto r = g_cudnn->forward_packed(out.p, lse.p, q.p, k.p, v.p, shape, positions.p, bounds,
                                     sh.sc(), scratch.p, scratch_floats * sizeof(float), nullptr);
    CHECK_OK(r.status());
    ran_forward = ran_forward && *r;
  };
  auto cudnn_backward = [&] {
    auto r = g_cudnn->backward_packed(dq.p, dk.p, dv.p, dout.p, q.p, k.p, v.p, out.p, lse.p, shape,
                                      positions.p, bounds, sh.sc(), scratch.p,
                                      scratch_floats * sizeof(float), nullptr);
    CHECK_OK(r.status());
    ran_backward = ran_backward && *r;
  };
  // Against the flash kernel's outputs (the backward from the flash forward's out and lse, restored
  // after cuDNN's forward wrote its own), and its bits twice.
  cudnn_forward();
  CHECK_CUDA(cudaDeviceSynchronize());
  if (ran_forward) {
    report("cudnn packed out vs flash", compare(out.host(), out0), 1e-2);
    report("cudnn packed lse vs flash", compare(lse.host(), lse0), INFINITY, 2e-3);
    const auto out1 = out.host();
    const auto lse1 = lse.host();
    cudnn_forward();
    report_same_bits("cudnn packed out twice", out, out1);
    report_same_bits("cudnn packed lse twice", lse, lse1);
  } else {
    std::printf("  cudnn packed forward: not covered (the log says why)\n");
  }
  out.upload(out0);
  lse.upload(lse0);
  cudnn_backward();
  CHECK_CUDA(cudaDeviceSynchronize());
  if (ran_backward) {
    report("cudnn packed dq vs flash", compare(dq.host(), dq0), 2e-2);
    report("cudnn packed dk vs flash", compare(dk.host(), dk0), 2e-2);
    report("cudnn packed dv vs flash", compare(dv.host(), dv0), 2e-2);
    const auto dq1 = dq.host(), dk1 = dk.host(), dv1 = dv.host();
    cudnn_backward();
    report_same_bits("cudnn packed dq twice", dq, dq1);
    report_same_bits("cudnn packed dk twice", dk, dk1);
    report_same_bits("cudnn packed dv twice", dv, dv1);
  } else {
    std::printf("  cudnn packed backward: not covered (the log says why)\n");
  }
  if (ran_forward && ran_backward) {
    line("cudnn", time_ms(cudnn_forward, 20), time_ms(cudnn_backward, 10));
  }
}

void bench_key_bias(const Shape& sh, float theta) {
  DeviceBuffer<bf16> q(sh.q_elems()), k(sh.kv_elems()), v(sh.kv_elems()), dout(sh.q_elems());
  fill(q, 31, 1.0f);
  fill(k, 32, 1.0f);
  fill(v, 33, 1.0f);
  fill(dout, 34, 1.0f);
  const size_t scratch_floats =
      spillway::cuda::attention_key_bias_scratch_floats(sh.batch, sh.seq, sh.hq, sh.hkv, sh.d);
  DeviceBuffer<float> scratch(scratch_floats), db(static_cast<size_t>(sh.hkv) * sh.d);
  CHECK_CUDA(cudaMemset(db.p, 0, db.n * sizeof(float)));
  const float ms = time_ms(
      [&] {
        CHECK_OK(spillway::cuda::attention_key_bias_backward(
            db.p, dout.p, q.p, k.p, v.p, sh.batch, sh.seq, sh.hq, sh.hkv, sh.d, theta, {}, nullptr,
            scratch.p, scratch_floats, nullptr));
      },
      3);
  std::printf(
      "key bias     b=%d t=%d hq=%d hkv=%d d=%d  %.3f ms (fwd+bwd attention of the same shape: see "
      "above)\n",
      sh.batch, sh.seq, sh.hq, sh.hkv, sh.d, ms);
}

}  // namespace

int main(int argc, char** argv) {
  const bool check_only = argc > 1 && std::strcmp(argv[1], "--check-only") == 0;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  spillway::set_log_level(spillway::LogLevel::kDebug);  // cuDNN's plans: which engine, or why not
  if (auto cudnn = spillway::cuda::CudnnAttention::create(); cudnn.ok()) {
    g_cudnn = std::move(*cudnn);
    std::printf("attention on %s too\n", g_cudnn->describe().c_str());
  } else {
    std::printf("no cuDNN: %s\n", cudnn.status().to_string().c_str());
  }

  const Shape attention_shapes[] = {
      {1, 2048, 32, 32, 128},  // llama2-7b
      {2, 1024, 28, 4, 128},   // qwen2.5-7b
      {2, 37, 6, 2, 16},       // tiny models, a sequence of no whole tile
      {1, 256, 8, 4, 8},
      {1, 300, 4, 2, 64},  // flash with a partial last tile
      {3, 130, 6, 3, 128},
      {2, 64, 2, 1, 64},  // one tile, group of 2
      {1, 77, 3, 1, 32},
      {1, 40, 2, 2, 200},  // generic with a partial column chunk
      // Sliding windows and a scale of their own (Gemma 3: head_dim 256, query_pre_attn_scalar):
      // shorter than a tile, across tiles, on the generic and the flash kernels.
      {2, 100, 2, 1, 256, 7, 0.0625f},
      {1, 300, 4, 1, 256, 40, 0.0625f},
      {2, 200, 4, 2, 64, 7},
      {1, 333, 4, 1, 128, 100, 0.05f},
      {1, 300, 4, 2, 64, 64},
      // Phi-3's head_dim 96 (its window 2047: here one across tiles) on the flash kernels.
      {1, 300, 4, 4, 96},
      {2, 200, 4, 2, 96, 70},
  };
  for (const Shape& sh : attention_shapes) check_attention(sh);

  spillway::compute::RopeScaling llama3;
  llama3.factor = 8.0f;
  llama3.low_freq_factor = 1.0f;
  llama3.high_freq_factor = 4.0f;
  llama3.original_max_position_embeddings =
      64;  // so that the short test sequence crosses the bands
  check_key_bias({2, 37, 6, 2, 16}, 10000.0f, {});
  check_key_bias({1, 256, 8, 4, 8}, 10000.0f, {});
  check_key_bias({1, 300, 4, 2, 64}, 10000.0f, llama3);
  check_key_bias({1, 512, 28, 4, 128}, 1000000.0f, {});
  check_key_bias({2, 200, 4, 1, 128}, 1000000.0f, {});

  if (g_failures > 0) {
    std::printf("%d check(s) FAILED\n", g_failures);
    return 1;
  }
  std::printf("all checks passed\n");
  if (check_only) return 0;

  bench_attention({4, 2048, 32, 32, 128}, "llama2-7b");
  bench_attention({4, 2048, 28, 4, 128}, "qwen2.5-7b");
  bench_attention({2, 4096, 32, 32, 128}, "llama2-7b");
  bench_attention({1, 8192, 32, 32, 128}, "llama2-7b");
  // Past one sequence's 1.5 GiB, cuDNN's backward runs chunks of heads (cuda-workspace.h):
  // llama2-7b 2 heads a call at 16K, one (2 GiB) at 32K; qwen2.5-7b one group of 7 (3.5 GiB) at
  // 16K.
  bench_attention({1, 16384, 32, 32, 128}, "llama2-7b");
  bench_attention({1, 32768, 32, 32, 128}, "llama2-7b");
  bench_attention({1, 16384, 28, 4, 128}, "qwen2.5-7b");
  bench_attention({1, 2048, 28, 4, 128}, "qwen2.5-7b");
  bench_key_bias({1, 2048, 28, 4, 128}, 1000000.0f);
  // Gemma 3 1B's heads (4 of 256, one key/value head) on the flash kernels: a global layer and a
  // local one (window 512); and a 7B shape with a 512-token window on the flash kernels.
  bench_attention({1, 4096, 4, 1, 256, 0, 0.0625f}, "gemma3-1b");
  bench_attention({1, 4096, 4, 1, 256, 512, 0.0625f}, "gemma3-1b");
  bench_attention({1, 8192, 32, 8, 128, 512}, "window-512");
  // Phi-3-mini: 32 heads of 96, its 2047-token window (one key pair masked at 2048).
  bench_attention({4, 2048, 32, 32, 96, 2047}, "phi-3-mini");
  // Chat fine-tuning's packed rows: examples of 300 to 900 tokens, at llama2-7b and qwen2.5-7b.
  const std::vector<int> chat = {517, 300, 899, 640, 777, 450, 833, 361};
  bench_packed({4, 2048, 32, 32, 128}, chat, "llama2-7b");
  bench_packed({4, 2048, 28, 4, 128}, chat, "qwen2.5-7b");
  if (g_failures > 0) {
    std::printf("%d packed check(s) FAILED\n", g_failures);
    return 1;
  }
  return 0;
}
