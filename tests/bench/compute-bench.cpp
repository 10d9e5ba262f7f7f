// bench-compute: throughput of the CPU backend's hot ops at a ~50M-parameter Llama shape
// (dim 512, 8 heads of 64, seq 256, FFN 1408, vocab 32000). Prints one line per op:
// milliseconds per call and GFLOP/s (multiply-add = 2 FLOPs; causal attention counts the
// triangle only), both per wall second and per CPU-second of all threads (the figure that stays
// meaningful on a loaded machine; OpenBLAS threads that spin while waiting inflate it a little).
// Not a test: built, never run by ctest.
//
//   bench-compute [--batch B] [--seq T] [--reps R] [--blas-threads N] [--only NAME-PART]
//                 [--window W]   (the attention's sliding window; its FLOPs count the band only)
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "compute/cpu/cpu-backend.h"
#include "core/thread-pool.h"

using namespace spillway;
using namespace spillway::compute;

namespace {

std::vector<float> filled(size_t n, float scale) {
  std::vector<float> v(n);
  uint32_t s = 12345;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(s >> 8) / 16777216.0f - 0.5f);
  }
  return v;
}

// Process CPU time (all threads): on a shared machine this, not wall time, measures the work.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::string g_only;  // --only SUBSTRING: run only the ops whose name contains it

void run(const char* name, double flops, int reps, const std::function<Status()>& fn) {
  if (!g_only.empty() && std::string(name).find(g_only) == std::string::npos) return;
  if (Status st = fn(); !st.ok()) {  // warm-up, and a failure is reported once
    std::printf("%-28s failed: %s\n", name, st.to_string().c_str());
    return;
  }
  const double c0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) (void)fn();
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  const double cpu = (cpu_seconds() - c0) / reps;
  std::printf("%-24s %9.3f ms %8.2f GFLOP/s | cpu %9.3f ms %7.2f GFLOP/s per core\n", name, s * 1e3,
              flops / s * 1e-9, cpu * 1e3, flops / cpu * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 4, seq = 256, reps = 5, blas_threads = 0, window = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--batch")
      batch = v;
    else if (a == "--seq")
      seq = v;
    else if (a == "--reps")
      reps = v;
    else if (a == "--blas-threads")
      blas_threads = v;
    else if (a == "--only")
      g_only = argv[i + 1];
    else if (a == "--window")
      window = v;
  }
  const int dim = 512, heads = 8, hd = 64, ffn = 1408, vocab = 32000;
  const int n = batch * seq;
  std::printf(
      "bench-compute: batch %d, seq %d, dim %d, heads %d x %d, ffn %d, vocab %d, "
      "%zu threads\n",
      batch, seq, dim, heads, hd, ffn, vocab, ThreadPool::global().size());
  auto be = make_cpu_backend(CpuBackendOptions{.blas_threads = blas_threads});
  const int lm_chunk = 256;
  OpShapes shapes;
  shapes.tokens = n, shapes.batch = batch, shapes.seq = seq, shapes.hidden = dim,
  shapes.heads = heads;
  shapes.kv_heads = heads, shapes.head_dim = hd, shapes.intermediate = ffn, shapes.vocab = vocab;
  shapes.lm_head_chunk = lm_chunk;
  const size_t ws_bytes = be->workspace_bytes(shapes);
  auto ws = be->device().device_alloc(ws_bytes);
  if (!ws.ok()) {
    std::fprintf(stderr, "bench-compute: workspace: %s\n", ws.status().to_string().c_str());
    return 1;
  }
  if (Status st = be->set_workspace(*ws, ws_bytes, shapes); !st.ok()) {
    std::fprintf(stderr, "bench-compute: set_workspace: %s\n", st.to_string().c_str());
    return 1;
  }
  std::printf("workspace %.1f MiB\n", ws_bytes / 1048576.0);

  auto x = filled(size_t(n) * dim, 1.0f), w = filled(size_t(ffn) * dim, 0.05f);
  std::vector<float> y(size_t(n) * ffn), dx(size_t(n) * dim), dw(size_t(ffn) * dim);
  const double gemm = 2.0 * n * dim * ffn;
  run("linear fwd 512->1408", gemm, reps, [&] {
    return be->linear_forward(Tensor(y.data(), (*be).act_dtype(), {n, ffn}),
                              ConstTensor(x.data(), (*be).act_dtype(), {n, dim}),
                              ConstTensor(w.data(), (*be).act_dtype(), {ffn, dim}),
                              ConstTensor(nullptr, (*be).act_dtype(), {ffn}), 0);
  });
  run("linear bwd 512->1408", 2 * gemm, reps, [&] {
    return be->linear_backward(Tensor(dx.data(), (*be).act_dtype(), {n, dim}),
                               f32(dw.data(), {ffn, dim}), Tensor(nullptr, DType::kF32, {ffn}),
                               ConstTensor(y.data(), (*be).act_dtype(), {n, ffn}),
                               ConstTensor(x.data(), (*be).act_dtype(), {n, dim}),
                               ConstTensor(w.data(), (*be).act_dtype(), {ffn, dim}), false, 0);
  });

  auto q = filled(size_t(n) * dim, 1.0f), k = filled(size_t(n) * dim, 1.0f),
       v = filled(size_t(n) * dim, 1.0f), dout = filled(size_t(n) * dim, 1.0f);
  std::vector<float> out(size_t(n) * dim), lse(size_t(batch) * heads * seq), dq(q.size()),
      dk(k.size()), dv(v.size());
  // QKᵀ and PV over the causal triangle (or the window's band): 2 · (2 · scores · d) per (b, h).
  double scores = 0;
  for (int t = 0; t < seq; ++t) scores += window > 0 && window <= t ? window : t + 1;
  const double attn = 4.0 * batch * heads * scores * hd;
  const AttentionParams params{0.0f, window};
  run("attention fwd", attn, reps, [&] {
    return be->attention_forward(Tensor(out.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
                                 f32(lse.data(), {batch, heads, seq}),
                                 ConstTensor(q.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
                                 ConstTensor(k.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
                                 ConstTensor(v.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
                                 0, params);
  });
  run("attention bwd", 2.5 * attn, reps, [&] {
    return be->attention_backward(
        Tensor(dq.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
        Tensor(dk.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
        Tensor(dv.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
        ConstTensor(dout.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
        ConstTensor(q.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
        ConstTensor(k.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
        ConstTensor(v.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
        ConstTensor(out.data(), (*be).act_dtype(), {batch, seq, heads, hd}),
        f32(lse.data(), {batch, heads, seq}), 0, params);
  });

  // Qwen2's key bias, in double: 3 dot/axpy products of d per (query, key) pair.
  std::vector<float> dbk(size_t(heads) * hd);
  run("attention key-bias bwd (fp64)", 1.5 * attn, reps, [&] {
    return be->attention_key_bias_backward(
        f32(dbk.data(), {heads, hd}), f32(dout.data(), {batch, seq, heads, hd}),
        f32(q.data(), {batch, seq, heads, hd}), f32(k.data(), {batch, seq, heads, hd}),
        f32(v.data(), {batch, seq, heads, hd}), 10000.0f, RopeScaling{}, 0);
  });

  std::vector<float> rq = q;
  run("rope fwd (q)", 6.0 * n * dim / 2, reps, [&] {
    return be->rope_forward(Tensor(rq.data(), (*be).act_dtype(), {batch, seq, heads, hd}), 10000.0f,
                            RopeScaling{}, 0);
  });
  std::vector<float> rstd(n), nw = filled(dim, 1.0f);
  run("rmsnorm fwd", 3.0 * n * dim, reps, [&] {
    return be->rmsnorm_forward(Tensor(out.data(), (*be).act_dtype(), {n, dim}),
                               f32(rstd.data(), {n}),
                               ConstTensor(x.data(), (*be).act_dtype(), {n, dim}),
                               ConstTensor(nw.data(), (*be).act_dtype(), {dim}), 1e-5f, 0);
  });
  std::vector<float> res_sum(x.size());
  run("residual+rmsnorm fwd", 4.0 * n * dim, reps, [&] {
    return be->residual_rmsnorm_forward(Tensor(res_sum.data(), (*be).act_dtype(), {n, dim}),
                                        Tensor(out.data(), (*be).act_dtype(), {n, dim}),
                                        f32(rstd.data(), {n}),
                                        ConstTensor(x.data(), (*be).act_dtype(), {n, dim}),
                                        ConstTensor(q.data(), (*be).act_dtype(), {n, dim}),
                                        ConstTensor(nw.data(), (*be).act_dtype(), {dim}), 1e-5f, 0);
  });

  auto gate = filled(size_t(n) * ffn, 2.0f), up = filled(size_t(n) * ffn, 1.0f);
  std::vector<float> act(gate.size()), dgate(gate.size()), dup(gate.size());
  run("swiglu fwd", 4.0 * n * ffn, reps, [&] {
    return be->swiglu_forward(Tensor(act.data(), (*be).act_dtype(), {n, ffn}),
                              ConstTensor(gate.data(), (*be).act_dtype(), {n, ffn}),
                              ConstTensor(up.data(), (*be).act_dtype(), {n, ffn}), 0);
  });
  run("swiglu bwd", 8.0 * n * ffn, reps, [&] {
    return be->swiglu_backward(Tensor(dgate.data(), (*be).act_dtype(), {n, ffn}),
                               Tensor(dup.data(), (*be).act_dtype(), {n, ffn}),
                               ConstTensor(act.data(), (*be).act_dtype(), {n, ffn}),
                               ConstTensor(gate.data(), (*be).act_dtype(), {n, ffn}),
                               ConstTensor(up.data(), (*be).act_dtype(), {n, ffn}), 0);
  });
  std::vector<float> dnw(dim);
  run("rmsnorm bwd", 8.0 * n * dim, reps, [&] {
    return be->rmsnorm_backward(
        Tensor(dx.data(), (*be).act_dtype(), {n, dim}), f32(dnw.data(), {dim}),
        ConstTensor(out.data(), (*be).act_dtype(), {n, dim}),
        ConstTensor(x.data(), (*be).act_dtype(), {n, dim}),
        ConstTensor(nw.data(), (*be).act_dtype(), {dim}), f32(rstd.data(), {n}), false, 0);
  });

  auto head = filled(size_t(vocab) * dim, 0.05f);
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = (i * 7919) % vocab;
  std::vector<float> dhead(head.size()), losses(n);
  run("lm_head_loss fwd+bwd", 3 * 2.0 * n * dim * vocab, std::max(1, reps / 2), [&] {
    return be->lm_head_loss(
        f32(losses.data(), {n}), Tensor(dx.data(), (*be).act_dtype(), {n, dim}),
        f32(dhead.data(), {vocab, dim}), ConstTensor(x.data(), (*be).act_dtype(), {n, dim}),
        ConstTensor(head.data(), (*be).act_dtype(), {vocab, dim}), i32(labels.data(), {n}),
        1.0f / n, Tensor(nullptr, DType::kF32, {n, vocab}), lm_chunk, 0);
  });
  return 0;
}
