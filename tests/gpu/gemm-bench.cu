// GPU self-test and benchmark of compute/cuda/gemm.cu and cross-entropy.cu (no gtest).
//
// Build from the repository root (CUDA 12 or 13, an sm_90 GPU), one line:
// clang-format off
//   /usr/local/cuda/bin/nvcc -std=c++20 -O3 -arch=sm_90 --expt-relaxed-constexpr -Iengine tests/gpu/gemm-bench.cu engine/compute/cuda/gemm.cu engine/compute/cuda/cross-entropy.cu engine/core/status.cpp -lcublasLt -lcublas -o /tmp/gemm-bench
// clang-format on
// Run: /tmp/gemm-bench [--check-only]
//
// Checks, on odd tiny-model shapes (and row-offset pointers, as the LM head's chunks give), each of
// the four GEMM calls against a naive fp32 GPU kernel (relative L2 < 1e-2), bias_backward and
// cross_entropy_forward_backward against double-precision host references, and that repeated
// calls give the same bits. Exit status 1 when any check fails, before the benchmark.
// Then times the llama2-7b and qwen2.5-7b layer GEMMs at 8192 and 16384 tokens and each LM head at
// its default chunk (forward, backward-input, backward-weight), printing TFLOPS = 2·n·in·out /
// time, and the cross-entropy kernel's GB/s.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compute/cuda/cross-entropy.cuh"
#include "compute/cuda/gemm.cuh"

using spillway::Status;
using spillway::cuda::bf16;
using spillway::cuda::Gemm;

#define CHECK_CUDA(stmt)                                                                          \
  do {                                                                                            \
    if (cudaError_t e_ = (stmt); e_ != cudaSuccess) {                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #stmt, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

#define CHECK_OK(expr)                                                                 \
  do {                                                                                 \
    if (Status s_ = (expr); !s_.ok()) {                                                \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_.to_string().c_str()); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// In a check: a failed call is a failed check (the rest of that check is skipped).
#define EXPECT_OK(expr)                 \
  do {                                  \
    if (Status s_ = (expr); !s_.ok()) { \
      report_status(#expr, s_);         \
      return;                           \
    }                                   \
  } while (0)

namespace {

// Device memory owned for the scope.
template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) {
    CHECK_CUDA(cudaMalloc(&p, sizeof(T) * (n ? n : 1)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> host(size_t offset = 0, size_t n = SIZE_MAX) const {
    if (n == SIZE_MAX) n = count - offset;
    std::vector<T> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), p + offset, sizeof(T) * n, cudaMemcpyDeviceToHost));
    return h;
  }
  void upload(const std::vector<T>& h) {
    CHECK_CUDA(cudaMemcpy(p, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice));
  }
};

__device__ float hash_uniform(size_t i, uint32_t seed) {  // in [-1, 1)
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t{seed} << 32 | seed);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_kernel(bf16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] = __float2bfloat16_rn(scale * hash_uniform(i, seed));
}
__global__ void fill_kernel(float* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] = scale * hash_uniform(i, seed);
}
template <typename T>
void fill(DeviceBuffer<T>& b, uint32_t seed, float scale = 1.0f) {
  fill_kernel<<<1024, 256>>>(b.p, b.count, seed, scale);
  CHECK_CUDA(cudaGetLastError());
}

// c[i, j] (row-major [M, N], fp32) = beta·c[i, j] + Σ_k a(i, k)·b(k, j) + bias[j], with
// a(i, k) = a[i·a_i + k·a_k] and b(k, j) = b[k·b_k + j·b_j].
__global__ void ref_gemm_kernel(float* c, const bf16* a, int64_t a_i, int64_t a_k, const bf16* b,
                                int64_t b_k, int64_t b_j, const bf16* bias, int M, int N, int K,
                                float beta) {
  const int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= N) return;
  float s = bias ? __bfloat162float(bias[j]) : 0.0f;
  for (int k = 0; k < K; ++k)
    s += __bfloat162float(a[i * a_i + k * a_k]) * __bfloat162float(b[k * b_k + j * b_j]);
  float& out = c[static_cast<size_t>(i) * N + j];
  out = beta * out + s;
}
void ref_gemm(float* c, const bf16* a, int64_t a_i, int64_t a_k, const bf16* b, int64_t b_k,
              int64_t b_j, const bf16* bias, int M, int N, int K, float beta) {
  ref_gemm_kernel<<<dim3((N + 127) / 128, M), 128>>>(c, a, a_i, a_k, b, b_k, b_j, bias, M, N, K,
                                                     beta);
  CHECK_CUDA(cudaGetLastError());
}

__global__ void bf16_to_f32_kernel(float* dst, const bf16* src, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}
void to_f32(float* dst, const bf16* src, size_t n) {
  bf16_to_f32_kernel<<<256, 256>>>(dst, src, n);
  CHECK_CUDA(cudaGetLastError());
}

float to_float(float x) {
  return x;
}
float to_float(bf16 x) {
  return __bfloat162float(x);
}

template <typename T>
double rel_l2(const std::vector<T>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(to_float(got[i])) - want[i];
    num += d * d;
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1.0));
}

int g_failures = 0;

void report(const std::string& what, double err, double tol) {
  const bool ok = err < tol;  // false for NaN too
  if (!ok) ++g_failures;
  std::printf("%-4s %-64s rel L2 %.3e (< %.0e)\n", ok ? "ok" : "FAIL", what.c_str(), err, tol);
}

void report_bool(const std::string& what, bool ok) {
  if (!ok) ++g_failures;
  std::printf("%-4s %s\n", ok ? "ok" : "FAIL", what.c_str());
}

void report_status(const char* call, const Status& s) {
  ++g_failures;
  std::printf("FAIL %s: %s\n", call, s.to_string().c_str());
}

template <typename T>
bool same_bits(const DeviceBuffer<T>& a, const DeviceBuffer<T>& b) {
  const std::vector<T> ha = a.host(), hb = b.host();
  return std::memcmp(ha.data(), hb.data(), sizeof(T) * ha.size()) == 0;
}

// ---- GEMM checks --------------------------------------------------------------------------------

struct GemmCase {
  int n, in, out;
  int offset_rows;  // token-major buffers start this many rows in (an LM-head chunk's alignment)
};

void check_gemm(Gemm& gemm, void* workspace, const GemmCase& c) {
  const int n = c.n, in = c.in, out = c.out, r = c.offset_rows;
  const std::string shape = "n=" + std::to_string(n) + " in=" + std::to_string(in) +
                            " out=" + std::to_string(out) +
                            (r ? " offset " + std::to_string(r) + " rows" : "");
  const size_t rows = static_cast<size_t>(n + r);
  DeviceBuffer<bf16> xb(rows * in), dyb(rows * out), w(static_cast<size_t>(out) * in),
      bias(out + 1);
  DeviceBuffer<bf16> yb(rows * out), dxb(rows * in);
  DeviceBuffer<float> yf(rows * out), dw(static_cast<size_t>(out) * in),
      ref(static_cast<size_t>(n) * std::max(in, out)), dw_ref(static_cast<size_t>(out) * in);
  fill(xb, 1), fill(dyb, 2), fill(w, 3), fill(bias, 4), fill(dxb, 5), fill(dw, 6);
  const bf16* x = xb.p + static_cast<size_t>(r) * in;
  const bf16* dy = dyb.p + static_cast<size_t>(r) * out;
  bf16* y = yb.p + static_cast<size_t>(r) * out;
  bf16* dx = dxb.p + static_cast<size_t>(r) * in;
  const size_t y_off = static_cast<size_t>(r) * out, dx_off = static_cast<size_t>(r) * in;
  const size_t ny = static_cast<size_t>(n) * out, nx = static_cast<size_t>(n) * in;

  // y = x·Wᵀ (+ bias, once through the epilogue, once 2-byte aligned through the fallback kernel)
  const bf16* biases[] = {nullptr, bias.p, bias.p + 1};
  for (const bf16* b : biases) {
    EXPECT_OK(gemm.linear_forward(y, x, w.p, b, n, in, out, workspace, nullptr));
    ref_gemm(ref.p, x, in, 1, w.p, 1, in, b, n, out, in, 0.0f);
    const char* what = !b ? "" : b == bias.p ? " +bias" : " +bias(unaligned)";
    report("linear_forward" + std::string(what) + " " + shape,
           rel_l2(yb.host(y_off, ny), ref.host(0, ny)), 1e-2);
  }
  EXPECT_OK(gemm.linear_forward_f32(yf.p + y_off, x, w.p, n, in, out, workspace, nullptr));
  ref_gemm(ref.p, x, in, 1, w.p, 1, in, nullptr, n, out, in, 0.0f);
  report("linear_forward_f32 " + shape, rel_l2(yf.host(y_off, ny), ref.host(0, ny)), 1e-2);

  // dx = dy·W, overwritten and then accumulated onto the previous dx
  EXPECT_OK(gemm.linear_backward_input(dx, dy, w.p, n, in, out, false, workspace, nullptr));
  ref_gemm(ref.p, dy, out, 1, w.p, in, 1, nullptr, n, in, out, 0.0f);
  report("linear_backward_input " + shape, rel_l2(dxb.host(dx_off, nx), ref.host(0, nx)), 1e-2);
  to_f32(ref.p, dx, nx);
  EXPECT_OK(gemm.linear_backward_input(dx, dy, w.p, n, in, out, true, workspace, nullptr));
  ref_gemm(ref.p, dy, out, 1, w.p, in, 1, nullptr, n, in, out, 1.0f);
  report("linear_backward_input accumulate " + shape, rel_l2(dxb.host(dx_off, nx), ref.host(0, nx)),
         1e-2);

  // dW += dyᵀ·x onto random fp32 values
  CHECK_CUDA(cudaMemcpy(dw_ref.p, dw.p, sizeof(float) * dw.count, cudaMemcpyDeviceToDevice));
  EXPECT_OK(gemm.linear_backward_weight(dw.p, dy, x, n, in, out, workspace, nullptr));
  ref_gemm(dw_ref.p, dy, 1, out, x, in, 1, nullptr, out, in, n, 1.0f);
  report("linear_backward_weight " + shape, rel_l2(dw.host(), dw_ref.host()), 1e-2);
}

void check_gemm_determinism(Gemm& gemm, void* workspace) {
  const int n = 2048, in = 4096, out = 1024;
  DeviceBuffer<bf16> x(static_cast<size_t>(n) * in), dy(static_cast<size_t>(n) * out),
      w(static_cast<size_t>(out) * in);
  DeviceBuffer<bf16> y1(dy.count), y2(dy.count), dx1(x.count), dx2(x.count);
  DeviceBuffer<float> dw1(w.count), dw2(w.count);
  fill(x, 11), fill(dy, 12), fill(w, 13), fill(dw1, 14);
  CHECK_CUDA(cudaMemcpy(dw2.p, dw1.p, sizeof(float) * dw1.count, cudaMemcpyDeviceToDevice));
  for (int rep = 0; rep < 2; ++rep) {
    EXPECT_OK(
        gemm.linear_forward(rep ? y2.p : y1.p, x.p, w.p, nullptr, n, in, out, workspace, nullptr));
    EXPECT_OK(gemm.linear_backward_input(rep ? dx2.p : dx1.p, dy.p, w.p, n, in, out, false,
                                         workspace, nullptr));
    EXPECT_OK(gemm.linear_backward_weight(rep ? dw2.p : dw1.p, dy.p, x.p, n, in, out, workspace,
                                          nullptr));
  }
  report_bool("GEMMs twice give the same bits (n=2048 in=4096 out=1024)",
              same_bits(y1, y2) && same_bits(dx1, dx2) && same_bits(dw1, dw2));
}

void check_bias_backward(int n, int out) {
  DeviceBuffer<bf16> dy(static_cast<size_t>(n) * out);
  DeviceBuffer<float> db(out), db2(out),
      scratch(spillway::cuda::bias_backward_scratch_floats(n, out));
  fill(dy, 21), fill(db, 22);
  CHECK_CUDA(cudaMemcpy(db2.p, db.p, sizeof(float) * out, cudaMemcpyDeviceToDevice));
  const std::vector<bf16> h_dy = dy.host();
  std::vector<float> want = db.host();
  for (int j = 0; j < out; ++j) {
    double s = want[j];
    for (int i = 0; i < n; ++i) s += __bfloat162float(h_dy[static_cast<size_t>(i) * out + j]);
    want[j] = static_cast<float>(s);
  }
  EXPECT_OK(spillway::cuda::bias_backward(db.p, dy.p, n, out, scratch.p, scratch.count, nullptr));
  EXPECT_OK(spillway::cuda::bias_backward(db2.p, dy.p, n, out, scratch.p, scratch.count, nullptr));
  const std::string shape = "n=" + std::to_string(n) + " out=" + std::to_string(out);
  report("bias_backward " + shape, rel_l2(db.host(), want), 1e-5);
  report_bool("bias_backward twice gives the same bits " + shape, same_bits(db, db2));
}

// ---- cross-entropy checks -----------------------------------------------------------------------

void check_cross_entropy(int rows, int v) {
  const float loss_scale = 1.0f / 37.0f;
  DeviceBuffer<float> logits(static_cast<size_t>(rows) * v), logits_out(logits.count), losses(rows),
      losses2(rows);
  DeviceBuffer<bf16> dlogits(logits.count), dlogits2(logits.count);
  DeviceBuffer<int32_t> labels(rows);
  fill(logits, 31, 6.0f);
  std::vector<int32_t> h_labels(rows);
  for (int r = 0; r < rows; ++r)
    h_labels[r] = r % 5 == 3 ? -100 : static_cast<int32_t>((r * 7919ull + 13) % v);
  if (rows > 2) h_labels[rows - 1] = v;  // out of range: NaN loss, zero gradient
  labels.upload(h_labels);

  EXPECT_OK(spillway::cuda::cross_entropy_forward_backward(
      losses.p, dlogits.p, logits_out.p, logits.p, labels.p, rows, v, loss_scale, nullptr));
  EXPECT_OK(spillway::cuda::cross_entropy_forward_backward(losses2.p, nullptr, nullptr, logits.p,
                                                           labels.p, rows, v, loss_scale, nullptr));

  const std::vector<float> h_logits = logits.host();
  std::vector<float> want_loss(rows), want_grad(logits.count, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* x = &h_logits[static_cast<size_t>(r) * v];
    const int label = h_labels[r];
    if (label < 0 || label >= v) continue;
    double m = x[0], sum = 0.0;
    for (int j = 1; j < v; ++j) m = std::max(m, double(x[j]));
    for (int j = 0; j < v; ++j) sum += std::exp(x[j] - m);
    want_loss[r] = static_cast<float>(m + std::log(sum) - x[label]);
    for (int j = 0; j < v; ++j)
      want_grad[static_cast<size_t>(r) * v + j] =
          static_cast<float>(loss_scale * (std::exp(x[j] - m) / sum - (j == label)));
  }
  std::vector<float> got_loss = losses.host(), got_loss2 = losses2.host();
  const std::vector<bf16> got_grad = dlogits.host();
  bool ignored_ok = true, bad_ok = true;
  for (int r = 0; r < rows; ++r) {
    const bool ignored = h_labels[r] == -100, bad = !ignored && h_labels[r] >= v;
    for (int j = 0; j < v && (ignored || bad); ++j) {
      if (to_float(got_grad[static_cast<size_t>(r) * v + j]) != 0.0f)
        (ignored ? ignored_ok : bad_ok) = false;
    }
    if (ignored && got_loss[r] != 0.0f) ignored_ok = false;
    if (bad) {
      bad_ok &= std::isnan(got_loss[r]) && std::isnan(got_loss2[r]);
      got_loss[r] = got_loss2[r] = 0.0f;  // out of the L2 below
    }
  }
  const std::string shape = "rows=" + std::to_string(rows) + " v=" + std::to_string(v);
  report("cross_entropy loss " + shape, rel_l2(got_loss, want_loss), 1e-5);
  report("cross_entropy loss without dlogits " + shape, rel_l2(got_loss2, want_loss), 1e-5);
  report("cross_entropy dlogits " + shape, rel_l2(got_grad, want_grad), 1e-2);
  report_bool("cross_entropy ignored rows: loss 0, dlogits 0 " + shape, ignored_ok);
  report_bool("cross_entropy out-of-range label: loss NaN, dlogits 0 " + shape, bad_ok);
  report_bool("cross_entropy logits_out is an exact copy " + shape, same_bits(logits, logits_out));

  EXPECT_OK(spillway::cuda::cross_entropy_forward_backward(losses2.p, dlogits2.p, nullptr, logits.p,
                                                           labels.p, rows, v, loss_scale, nullptr));
  report_bool(
      "cross_entropy twice gives the same bits " + shape, same_bits(dlogits, dlogits2) && [&] {
        const std::vector<float> a = losses.host(), b = losses2.host();
        return std::memcmp(a.data(), b.data(), sizeof(float) * rows) == 0;
      }());
}

// ---- benchmark ----------------------------------------------------------------------------------

template <typename F>
double time_ms(F&& f, int iters) {
  for (int i = 0; i < 2; ++i) f();  // warm-up: plan creation, clocks
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
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

void bench(Gemm& gemm, void* workspace) {
  // Each model's layer GEMMs at 8192 and 16384 tokens, and its LM head at the trainer's default
  // chunk (StreamingEngine::lm_head_chunk: the most tokens whose fp32 logits fit 1 GiB).
  struct Shape {
    const char* name;
    int in, out;
    bool lm_head;
  };
  struct Model {
    const char* name;
    std::vector<Shape> shapes;
    int lm_head_tokens;
  };
  const Model models[] = {{"llama2-7b",
                           {{"q|k|v|o 4096->4096", 4096, 4096, false},
                            {"qkv fused 4096->12288", 4096, 12288, false},
                            {"gate|up 4096->11008", 4096, 11008, false},
                            {"down 11008->4096", 11008, 4096, false},
                            {"lm_head 4096->32000", 4096, 32000, true}},
                           4096},
                          {"qwen2.5-7b",
                           {{"q|o 3584->3584", 3584, 3584, false},
                            {"k|v 3584->512", 3584, 512, false},
                            {"gate|up 3584->18944", 3584, 18944, false},
                            {"down 18944->3584", 18944, 3584, false},
                            {"lm_head 3584->152064", 3584, 152064, true}},
                           512}};
  const size_t max_x = size_t{16384} * 18944, max_w = size_t{152064} * 4096,
               max_y = size_t{16384} * 18944;
  DeviceBuffer<bf16> x(max_x), dx(x.count), w(max_w);
  DeviceBuffer<bf16> y(max_y), dy(y.count);
  DeviceBuffer<float> yf(size_t{8192} * 32000), dw(w.count);  // the cross-entropy's 8192 rows too
  fill(x, 41), fill(w, 42, 0.02f), fill(dy, 43, 0.01f), fill(dw, 44, 0.0f);

  std::printf("\n%-11s %6s  %-24s %-22s %10s %9s\n", "model", "tokens", "shape", "call", "ms",
              "TFLOPS");
  for (const Model& m : models) {
    for (const int tokens : {8192, 16384}) {
      for (const Shape& s : m.shapes) {
        if (s.lm_head && tokens != 8192) continue;
        const int n = s.lm_head ? m.lm_head_tokens : tokens;
        const double flop = 2.0 * n * s.in * s.out;
        const int iters = flop > 2e12 ? 10 : 30;
        auto timed = [&](const char* call, auto&& gemm_call) {
          const double ms = time_ms([&] { CHECK_OK(gemm_call()); }, iters);
          std::printf("%-11s %6d  %-24s %-22s %10.3f %9.1f\n", m.name, n, s.name, call, ms,
                      flop / (ms * 1e-3) / 1e12);
        };
        timed("forward", [&] {
          return gemm.linear_forward(y.p, x.p, w.p, nullptr, n, s.in, s.out, workspace, nullptr);
        });
        if (s.lm_head) {
          timed("forward_f32", [&] {
            return gemm.linear_forward_f32(yf.p, x.p, w.p, n, s.in, s.out, workspace, nullptr);
          });
        }
        timed("backward_input", [&] {
          return gemm.linear_backward_input(dx.p, dy.p, w.p, n, s.in, s.out, false, workspace,
                                            nullptr);
        });
        timed("backward_weight", [&] {
          return gemm.linear_backward_weight(dw.p, dy.p, x.p, n, s.in, s.out, workspace, nullptr);
        });
      }
    }
  }

  // Cross-entropy over an LM-head chunk: reads the fp32 logits twice, writes bf16 dlogits.
  const int rows = 8192, v = 32000;
  DeviceBuffer<int32_t> labels(rows);
  DeviceBuffer<float> losses(rows);
  std::vector<int32_t> h_labels(rows);
  for (int r = 0; r < rows; ++r) h_labels[r] = static_cast<int32_t>((r * 7919ull) % v);
  labels.upload(h_labels);
  fill(yf, 45, 4.0f);
  const double ms = time_ms(
      [&] {
        CHECK_OK(spillway::cuda::cross_entropy_forward_backward(
            losses.p, dy.p, nullptr, yf.p, labels.p, rows, v, 1.0f / rows, nullptr));
      },
      20);
  std::printf("%6d  %-24s %-22s %10.3f %7.0f GB/s\n", rows, "cross-entropy v=32000",
              "forward+backward", ms, 10.0 * rows * v / (ms * 1e-3) / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const bool check_only = argc > 1 && std::strcmp(argv[1], "--check-only") == 0;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, CUDA runtime %d\n", prop.name, prop.multiProcessorCount, CUDART_VERSION);

  auto gemm_or = Gemm::create();
  CHECK_OK(gemm_or.status());
  Gemm& gemm = **gemm_or;
  DeviceBuffer<char> workspace(Gemm::kWorkspaceBytes);  // cudaMalloc: 256-byte aligned

  const GemmCase cases[] = {{37, 96, 172, 0}, {129, 172, 96, 0},  {64, 344, 1000, 0},
                            {7, 64, 700, 3},  {300, 128, 224, 1}, {45, 45, 33, 1},
                            {1, 224, 128, 0}};
  for (const GemmCase& c : cases) check_gemm(gemm, workspace.p, c);
  check_gemm_determinism(gemm, workspace.p);
  check_bias_backward(37, 96);
  check_bias_backward(1300, 172);
  check_cross_entropy(37, 1000);
  check_cross_entropy(20, 700);
  check_cross_entropy(9, 513);
  check_cross_entropy(4, 152064);
  CHECK_CUDA(cudaDeviceSynchronize());
  if (g_failures) {
    std::printf("%d check(s) FAILED\n", g_failures);
    return 1;
  }
  std::printf("all checks passed\n");
  if (!check_only) bench(gemm, workspace.p);
  return 0;
}
