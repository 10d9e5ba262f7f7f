// bench-gpu-ops: the bandwidth of the CUDA backend's memory-bound ops at a llama2-7b layer's shapes
// (micro-batch 4 x sequence 2048 = 8192 tokens, hidden 4096, MLP 11008, 32 heads of 128, vocab
// 32000; bf16 activations, the backend's act_dtype), against a device-to-device copy measured the
// same way in the same run. Not a test: built with the GPU tests, never run by ctest.
//
//   build/tests/gpu/bench-gpu-ops [--json] [--op NAME]
//
// Each op goes through the Backend interface (compute::make_backend, kind "cuda") on stream 0,
// with the workspace set up as the trainer does (workspace_bytes(OpShapes) + set_workspace): 3
// warm-up calls, then 20 calls, each between two timing events (record_event, elapsed_s) and each
// preceded, outside the events, by a 256 MiB fill_zero so that no call finds the last one's data in
// L2 (50 MB on an H100); the median is reported. Inputs are a fixed-seed random pattern uploaded
// with copy_h2d (bf16 ones converted on the device), so no op sees zeros.
//
// One line per op: name, shape, bytes moved, microseconds (median), GB/s = bytes / time, that GB/s
// as a fraction of copy_d2d's (1 GiB read + 1 GiB written), and for lm_head_loss TFLOPS. "Bytes
// moved" is the least the op must read plus write (each op's formula is beside it): intermediate
// traffic (scratch partial sums, the LM head's logits chunk) is not counted, so about 1.0 of the
// copy is the ceiling. --json prints one JSON object per line instead (keys op, shape, bytes, us,
// gb_s, copy_fraction, copy_gb_s, device, and tflops for lm_head_loss). --op NAME times the copy
// and that op only and prints that op's line alone (`--json --op adamw`: one JSON line, the HBM
// state tier's AdamW on one layer against the copy). Exit status 1, with one line saying why, when
// there is no usable CUDA GPU or a call fails; 2 for a bad argument or an unknown op.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compute/backend-loader.h"
#include "compute/backend.h"
#include "core/dtype.h"
#include "core/status.h"
#include "train/adamw.h"

namespace spillway::compute {
namespace {

// llama2-7b at micro-batch 4 x sequence 2048.
constexpr int kBatch = 4, kSeq = 2048, kTokens = kBatch * kSeq;
constexpr int kHidden = 4096, kIntermediate = 11008, kHeads = 32, kHeadDim = 128, kVocab = 32000;
// One layer's weights: q, k, v, o [4096, 4096]; gate, up [11008, 4096]; down [4096, 11008]; two
// norms [4096].
constexpr size_t kLayerParams =
    4ull * kHidden * kHidden + 3ull * kHidden * kIntermediate + 2ull * kHidden;
static_assert(kLayerParams == 202'383'360);
constexpr int kLmHeadChunk = 256;  // the trainer's default (StreamingConfig::lm_head_chunk)
constexpr float kTheta = 10000.0f, kEps = 1e-5f;

constexpr size_t kCopyBytes = size_t{1} << 30;
constexpr size_t kFlushBytes = size_t{256} << 20;
constexpr int kWarmup = 3, kRuns = 20;
constexpr size_t kStageFloats = size_t{16} << 20;  // 64 MiB pieces of an upload

// 64 random bits, a function of (seed, i) alone (splitmix64's finaliser).
uint64_t mix(uint64_t seed, uint64_t i) {
  uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1).
float pattern(uint64_t seed, uint64_t i) {
  return static_cast<float>(mix(seed, i) >> 40) * 0x1p-23f - 1.0f;
}

// "[8192,4096]"
std::string dims(std::initializer_list<int64_t> sizes) {
  std::string s = "[";
  for (int64_t v : sizes) {
    if (s.size() > 1) s += ',';
    s += std::to_string(v);
  }
  return s + "]";
}

// Device tensors of the benchmark, freed together when it goes (the backend must outlive it),
// filled through a pinned staging buffer: fp32 straight from the host, other dtypes converted on
// the device from fp32 (as the trainer makes its compute weights).
class Tensors {
 public:
  explicit Tensors(Backend& be) : be_(be) {}
  Tensors(const Tensors&) = delete;
  Tensors& operator=(const Tensors&) = delete;
  ~Tensors() {
    (void)be_.device().synchronize_stream(0);
    for (void* p : device_) be_.device().device_free(p);
    if (host_) be_.device().host_free_pinned(host_);
  }

  Result<void*> alloc(size_t bytes) {
    SPW_ASSIGN_OR_RETURN(void* p, be_.device().device_alloc(bytes));
    device_.push_back(p);
    return p;
  }

  // `count` elements of `type` (F32 or the act dtype), element i = scale · pattern(seed, i).
  Result<void*> random(DType type, size_t count, uint64_t seed, float scale = 1.0f) {
    SPW_ASSIGN_OR_RETURN(void* dst, alloc(count * dtype_size(type)));
    if (host_ == nullptr) {
      SPW_ASSIGN_OR_RETURN(void* h, be_.device().host_alloc_pinned(kStageFloats * sizeof(float)));
      host_ = static_cast<float*>(h);
      SPW_ASSIGN_OR_RETURN(void* d, alloc(kStageFloats * sizeof(float)));
      stage_ = static_cast<float*>(d);
    }
    for (size_t off = 0; off < count; off += kStageFloats) {
      const size_t m = std::min(kStageFloats, count - off);
      for (size_t i = 0; i < m; ++i) host_[i] = scale * pattern(seed, off + i);
      char* out = static_cast<char*>(dst) + off * dtype_size(type);
      if (type == DType::kF32) {
        SPW_RETURN_IF_ERROR(be_.device().copy_h2d(out, host_, m * sizeof(float), 0));
      } else {
        SPW_RETURN_IF_ERROR(be_.device().copy_h2d(stage_, host_, m * sizeof(float), 0));
        SPW_RETURN_IF_ERROR(be_.device().convert(out, type, stage_, DType::kF32, m, 0));
      }
      SPW_RETURN_IF_ERROR(be_.device().synchronize_stream(0));  // the next piece reuses the staging
    }
    return dst;
  }

  Result<int32_t*> upload(const std::vector<int32_t>& v) {
    SPW_ASSIGN_OR_RETURN(void* p, alloc(v.size() * sizeof(int32_t)));
    SPW_RETURN_IF_ERROR(be_.device().copy_h2d(p, v.data(), v.size() * sizeof(int32_t), 0));
    SPW_RETURN_IF_ERROR(be_.device().synchronize_stream(0));  // `v` may go before the copy runs
    return static_cast<int32_t*>(p);
  }

 private:
  Backend& be_;
  std::vector<void*> device_;
  float* host_ = nullptr;   // [kStageFloats], pinned
  float* stage_ = nullptr;  // [kStageFloats], device
};

// Times an op on stream 0 with the backend's timing events, as the file's comment says.
class Timer {
 public:
  Timer(Backend& be, void* flush) : be_(be), flush_(flush) {}

  Status init() {
    for (int i = 0; i < kRuns; ++i) {
      SPW_ASSIGN_OR_RETURN(Event start, be_.device().create_event(true));
      SPW_ASSIGN_OR_RETURN(Event end, be_.device().create_event(true));
      starts_.push_back(std::move(start));
      ends_.push_back(std::move(end));
    }
    return Status::ok_status();
  }

  // Median seconds of one call of `op`.
  Result<double> median_s(const std::function<Status()>& op) {
    for (int i = 0; i < kWarmup; ++i) SPW_RETURN_IF_ERROR(op());
    for (int i = 0; i < kRuns; ++i) {
      SPW_RETURN_IF_ERROR(be_.device().fill_zero(flush_, kFlushBytes, 0));
      SPW_RETURN_IF_ERROR(be_.device().record_event(starts_[i], 0));
      SPW_RETURN_IF_ERROR(op());
      SPW_RETURN_IF_ERROR(be_.device().record_event(ends_[i], 0));
    }
    SPW_RETURN_IF_ERROR(be_.device().synchronize_stream(0));
    std::vector<double> t(kRuns);
    for (int i = 0; i < kRuns; ++i) {
      SPW_ASSIGN_OR_RETURN(t[i], be_.device().elapsed_s(starts_[i], ends_[i]));
    }
    std::sort(t.begin(), t.end());
    return kRuns % 2 ? t[kRuns / 2] : 0.5 * (t[kRuns / 2 - 1] + t[kRuns / 2]);
  }

 private:
  Backend& be_;
  void* flush_;  // [kFlushBytes]
  std::vector<Event> starts_, ends_;
};

struct Op {
  std::string name, shape;
  uint64_t bytes;  // the least the op reads plus writes
  double flops;    // GEMM work (2 per multiply-add); 0 for the memory-bound ops
  std::function<Status()> run;
};

// Prints the table or the JSON lines; the first op printed is the copy, the reference of the rest.
class Report {
 public:
  Report(bool json, std::string device) : json_(json), device_(std::move(device)) {}

  void header() const {
    if (json_) return;
    std::printf(
        "# %s: llama2-7b layer, %d tokens (%d x %d), bf16; median of %d runs after %d "
        "warm-up, L2 flushed before each\n",
        device_.c_str(), kTokens, kBatch, kSeq, kRuns, kWarmup);
    std::printf("%-26s %-38s %12s %10s %8s %8s %7s\n", "op", "shape", "bytes", "us", "GB/s",
                "of copy", "TFLOPS");
  }

  // The first row is the copy's; `print` false records it without printing it.
  void row(const Op& op, double seconds, bool print = true) {
    const double gb_s = op.bytes / seconds * 1e-9;
    if (copy_gb_s_ == 0) copy_gb_s_ = gb_s;
    if (!print) return;
    const double fraction = gb_s / copy_gb_s_;
    if (json_) {
      nlohmann::json j = {
          {"op", op.name},           {"shape", op.shape}, {"bytes", op.bytes},
          {"us", seconds * 1e6},     {"gb_s", gb_s},      {"copy_fraction", fraction},
          {"copy_gb_s", copy_gb_s_}, {"device", device_}};
      if (op.flops > 0) j["tflops"] = op.flops / seconds * 1e-12;
      std::printf("%s\n", j.dump().c_str());
    } else {
      char tflops[32] = "-";
      if (op.flops > 0) std::snprintf(tflops, sizeof(tflops), "%.0f", op.flops / seconds * 1e-12);
      std::printf("%-26s %-38s %12llu %10.1f %8.0f %8.2f %7s\n", op.name.c_str(), op.shape.c_str(),
                  static_cast<unsigned long long>(op.bytes), seconds * 1e6, gb_s, fraction, tflops);
    }
    std::fflush(stdout);
  }

 private:
  bool json_;
  std::string device_;
  double copy_gb_s_ = 0;
};

OpShapes layer_shapes() {
  OpShapes s;
  s.tokens = kTokens;
  s.batch = kBatch;
  s.seq = kSeq;
  s.hidden = kHidden;
  s.heads = kHeads;
  s.kv_heads = kHeads;  // llama2-7b: multi-head attention
  s.head_dim = kHeadDim;
  s.intermediate = kIntermediate;
  s.vocab = kVocab;
  s.lm_head_chunk = kLmHeadChunk;
  return s;
}

// `only`: the one op to time beside the copy (empty: all of them).
Status run(Backend& be, bool json, const std::string& only) {
  Tensors t(be);
  const OpShapes shapes = layer_shapes();
  const size_t ws_bytes = be.workspace_bytes(shapes);
  SPW_ASSIGN_OR_RETURN(void* ws, t.alloc(ws_bytes));
  SPW_RETURN_IF_ERROR(be.set_workspace(ws, ws_bytes, shapes));
  SPW_ASSIGN_OR_RETURN(void* flush, t.alloc(kFlushBytes));
  Timer timer(be, flush);
  SPW_RETURN_IF_ERROR(timer.init());

  const DType act = be.act_dtype();
  const uint64_t A = dtype_size(act);  // bytes of an activation or weight element (2: bf16)
  const uint64_t F = sizeof(float), I = sizeof(int32_t);
  const int n = kTokens, d = kHidden, f = kIntermediate, v = kVocab;
  const uint64_t nd = uint64_t{1} * n * d, nf = uint64_t{1} * n * f, vd = uint64_t{1} * v * d;
  const uint64_t q_elems = uint64_t{1} * kBatch * kSeq * kHeads * kHeadDim;
  std::vector<Op> ops;

  // Both ways: read kCopyBytes + write kCopyBytes.
  SPW_ASSIGN_OR_RETURN(void* copy_src, t.random(DType::kF32, kCopyBytes / F, 1));
  SPW_ASSIGN_OR_RETURN(void* copy_dst, t.alloc(kCopyBytes));
  ops.push_back({"copy_d2d", "src,dst[1 GiB]", 2 * kCopyBytes, 0,
                 [&] { return be.device().copy_d2d(copy_dst, copy_src, kCopyBytes, 0); }});

  // RMSNorm over the residual stream x[n, d] with weight w[d].
  SPW_ASSIGN_OR_RETURN(void* x, t.random(act, nd, 2));
  SPW_ASSIGN_OR_RETURN(void* r, t.random(act, nd, 3));
  SPW_ASSIGN_OR_RETURN(void* w_norm, t.random(act, d, 4));
  SPW_ASSIGN_OR_RETURN(void* normed, t.alloc(nd * A));
  SPW_ASSIGN_OR_RETURN(void* sum, t.alloc(nd * A));
  SPW_ASSIGN_OR_RETURN(void* rstd_p, t.alloc(n * F));
  float* rstd = static_cast<float*>(rstd_p);
  // rmsnorm_backward's saved statistics, as the forward leaves them.
  SPW_RETURN_IF_ERROR(be.rmsnorm_forward(
      Tensor(normed, be.act_dtype(), {n, d}), Tensor(rstd, DType::kF32, {n}),
      ConstTensor(x, be.act_dtype(), {n, d}), ConstTensor(w_norm, be.act_dtype(), {d}), kEps, 0));
  // Reads x[n, d] and w[d], writes out[n, d] and rstd[n] (fp32): 2·n·d·A + d·A + 4·n.
  ops.push_back({"rmsnorm_forward", "x" + dims({n, d}), 2 * nd * A + d * A + n * F, 0, [&] {
                   return be.rmsnorm_forward(Tensor(normed, be.act_dtype(), {n, d}),
                                             Tensor(rstd, DType::kF32, {n}),
                                             ConstTensor(x, be.act_dtype(), {n, d}),
                                             ConstTensor(w_norm, be.act_dtype(), {d}), kEps, 0);
                 }});
  // Reads x, r [n, d] and w[d], writes sum, out [n, d] and rstd[n]: 4·n·d·A + d·A + 4·n. (`sum`
  // apart from x so that every run sees the same inputs; aliased, the traffic is the same.)
  ops.push_back(
      {"residual_rmsnorm_forward", "x,r" + dims({n, d}), 4 * nd * A + d * A + n * F, 0, [&] {
         return be.residual_rmsnorm_forward(
             Tensor(sum, be.act_dtype(), {n, d}), Tensor(normed, be.act_dtype(), {n, d}),
             Tensor(rstd, DType::kF32, {n}), ConstTensor(x, be.act_dtype(), {n, d}),
             ConstTensor(r, be.act_dtype(), {n, d}), ConstTensor(w_norm, be.act_dtype(), {d}), kEps,
             0);
       }});
  // As a layer calls it, adding dx into the residual gradient (accumulate_dx): reads dout, x and
  // dx [n, d], w[d], rstd[n], dw[d] (fp32); writes dx[n, d], dw[d]: 4·n·d·A + d·A + 4·n + 8·d.
  SPW_ASSIGN_OR_RETURN(void* dout, t.random(act, nd, 5));
  SPW_ASSIGN_OR_RETURN(void* dx, t.random(act, nd, 6));
  SPW_ASSIGN_OR_RETURN(void* dw_norm, t.random(DType::kF32, d, 7, 0.01f));
  ops.push_back({"rmsnorm_backward", "x" + dims({n, d}) + " accumulate_dx",
                 4 * nd * A + d * A + n * F + 2 * d * F, 0, [&] {
                   return be.rmsnorm_backward(
                       Tensor(dx, be.act_dtype(), {n, d}),
                       Tensor(static_cast<float*>(dw_norm), DType::kF32, {d}),
                       ConstTensor(dout, be.act_dtype(), {n, d}),
                       ConstTensor(x, be.act_dtype(), {n, d}),
                       ConstTensor(w_norm, be.act_dtype(), {d}),
                       ConstTensor(rstd, DType::kF32, {n}), true, 0);
                 }});

  // RoPE in place on q[b, t, heads, head_dim]: reads and writes q, 2·b·t·heads·head_dim·A (the
  // angles are computed on the chip, not read).
  SPW_ASSIGN_OR_RETURN(void* q, t.random(act, q_elems, 8));
  const std::string q_shape = "q" + dims({kBatch, kSeq, kHeads, kHeadDim});
  ops.push_back({"rope_forward", q_shape, 2 * q_elems * A, 0, [&] {
                   return be.rope_forward(
                       Tensor(q, be.act_dtype(), {kBatch, kSeq, kHeads, kHeadDim}), kTheta,
                       RopeScaling{}, 0);
                 }});
  ops.push_back({"rope_backward", q_shape, 2 * q_elems * A, 0, [&] {
                   return be.rope_backward(
                       Tensor(q, be.act_dtype(), {kBatch, kSeq, kHeads, kHeadDim}), kTheta,
                       RopeScaling{}, 0);
                 }});

  // SwiGLU over the MLP's [n, f] (gate in [-4, 4] so that silu sees its curved part).
  SPW_ASSIGN_OR_RETURN(void* gate, t.random(act, nf, 9, 4.0f));
  SPW_ASSIGN_OR_RETURN(void* up, t.random(act, nf, 10));
  SPW_ASSIGN_OR_RETURN(void* dout_f, t.random(act, nf, 11));
  SPW_ASSIGN_OR_RETURN(void* out_f, t.alloc(nf * A));
  SPW_ASSIGN_OR_RETURN(void* dgate, t.alloc(nf * A));
  SPW_ASSIGN_OR_RETURN(void* dup, t.alloc(nf * A));
  // Reads gate, up; writes out: 3·n·f·A.
  ops.push_back({"swiglu_forward", "gate,up" + dims({n, f}), 3 * nf * A, 0, [&] {
                   return be.swiglu_forward(Tensor(out_f, be.act_dtype(), {n, f}),
                                            ConstTensor(gate, be.act_dtype(), {n, f}),
                                            ConstTensor(up, be.act_dtype(), {n, f}), 0);
                 }});
  // Reads dout, gate, up; writes dgate, dup: 5·n·f·A.
  ops.push_back({"swiglu_backward", "gate,up" + dims({n, f}), 5 * nf * A, 0, [&] {
                   return be.swiglu_backward(Tensor(dgate, be.act_dtype(), {n, f}),
                                             Tensor(dup, be.act_dtype(), {n, f}),
                                             ConstTensor(dout_f, be.act_dtype(), {n, f}),
                                             ConstTensor(gate, be.act_dtype(), {n, f}),
                                             ConstTensor(up, be.act_dtype(), {n, f}), 0);
                 }});

  // The residual add y[n, d] += x[n, d]: reads y, x; writes y: 3·n·d·A.
  SPW_ASSIGN_OR_RETURN(void* y, t.random(act, nd, 12));
  ops.push_back({"add_inplace", "y,x" + dims({n, d}), 3 * nd * A, 0, [&] {
                   return be.add_inplace(Tensor(y, be.act_dtype(), {static_cast<int64_t>(nd)}),
                                         ConstTensor(r, be.act_dtype(), {static_cast<int64_t>(nd)}),
                                         0);
                 }});

  // A layer's weights, fp32 master <-> bf16 compute copy: reads count·4 and writes count·2, or
  // the reverse: count·6 either way.
  SPW_ASSIGN_OR_RETURN(void* w_f32, t.random(DType::kF32, kLayerParams, 13));
  SPW_ASSIGN_OR_RETURN(void* w_act, t.random(act, kLayerParams, 14));
  SPW_ASSIGN_OR_RETURN(void* w_back, t.alloc(kLayerParams * F));
  const std::string layer = dims({int64_t(kLayerParams)});
  ops.push_back({"convert_f32_bf16", layer, kLayerParams * (F + A), 0, [&] {
                   return be.device().convert(w_act, act, w_f32, DType::kF32, kLayerParams, 0);
                 }});
  ops.push_back({"convert_bf16_f32", layer, kLayerParams * (A + F), 0, [&] {
                   return be.device().convert(w_back, DType::kF32, w_act, act, kLayerParams, 0);
                 }});

  // The embedding gather out[n, d] = table[ids[n], :]: reads ids[n] and each distinct row of the
  // table once, writes out: 4·n + distinct(ids)·d·A + n·d·A.
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(mix(15, i) % v);
  const uint64_t distinct = std::unordered_set<int32_t>(ids.begin(), ids.end()).size();
  SPW_ASSIGN_OR_RETURN(int32_t * ids_d, t.upload(ids));
  SPW_ASSIGN_OR_RETURN(void* table, t.random(act, vd, 16));
  SPW_ASSIGN_OR_RETURN(void* embedded, t.alloc(nd * A));
  ops.push_back({"embedding_forward", "ids" + dims({n}) + " table" + dims({v, d}),
                 n * I + distinct * d * A + nd * A, 0, [&] {
                   return be.embedding_forward(Tensor(embedded, be.act_dtype(), {n, d}),
                                               i32(ids_d, {n}),
                                               ConstTensor(table, be.act_dtype(), {v, d}), 0);
                 }});

  // Σ x² of a layer's fp32 gradient: reads count·4, writes one double.
  SPW_ASSIGN_OR_RETURN(void* sumsq, t.alloc(sizeof(double)));
  ops.push_back({"sum_squares", layer + " f32", kLayerParams * F + sizeof(double), 0, [&] {
                   return be.sum_squares(
                       static_cast<double*>(sumsq),
                       f32(static_cast<const float*>(w_f32), {static_cast<int64_t>(kLayerParams)}),
                       0);
                 }});

  // AdamW on one layer's fp32 state (the HBM state tier's update, Backend::adamw): reads param, m,
  // v, grad and writes param, m, v, 7·4 bytes per parameter. v starts at zero (then g²·(1 − β2),
  // never negative); each timed call is one more step on the same state.
  SPW_ASSIGN_OR_RETURN(void* adam_p, t.random(DType::kF32, kLayerParams, 21));
  SPW_ASSIGN_OR_RETURN(void* adam_m, t.random(DType::kF32, kLayerParams, 22, 0.01f));
  SPW_ASSIGN_OR_RETURN(void* adam_v, t.alloc(kLayerParams * F));
  SPW_RETURN_IF_ERROR(be.device().fill_zero(adam_v, kLayerParams * F, 0));
  SPW_ASSIGN_OR_RETURN(void* adam_g, t.random(DType::kF32, kLayerParams, 23, 0.01f));
  const AdamWCoeffs adam_k = adamw_coeffs(AdamWConfig{3e-4, 0.9, 0.95, 1e-8, 0.1}, 10, true);
  ops.push_back({"adamw", layer + " f32", 7 * kLayerParams * F, 0, [&] {
                   const Shape n_params{static_cast<int64_t>(kLayerParams)};
                   return be.adamw(f32(static_cast<float*>(adam_p), n_params),
                                   f32(static_cast<float*>(adam_m), n_params),
                                   f32(static_cast<float*>(adam_v), n_params),
                                   f32(static_cast<const float*>(adam_g), n_params), adam_k, 0.8f,
                                   0);
                 }});

  // The fused LM head + cross-entropy, forward and backward. Reads x[n, d], w[v, d], labels[n],
  // dw[v, d] (fp32); writes losses[n] (fp32), dx[n, d], dw: 2·n·d·A + v·d·A + 8·n + 8·v·d (the
  // logits chunks in the workspace and w's reread per chunk are not counted). GEMM work: logits
  // x·wᵀ, dx = dlogits·w, dw += dlogitsᵀ·x, 2·n·d·v each.
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(mix(17, i) % v);
  SPW_ASSIGN_OR_RETURN(int32_t * labels_d, t.upload(labels));
  SPW_ASSIGN_OR_RETURN(void* xn, t.random(act, nd, 18));
  SPW_ASSIGN_OR_RETURN(void* w_lm, t.random(act, vd, 19, 4.0f / std::sqrt(float(d))));
  SPW_ASSIGN_OR_RETURN(void* dw_lm, t.random(DType::kF32, vd, 20, 0.01f));
  SPW_ASSIGN_OR_RETURN(void* dx_lm, t.alloc(nd * A));
  SPW_ASSIGN_OR_RETURN(void* losses, t.alloc(n * F));
  ops.push_back(
      {"lm_head_loss",
       "x" + dims({n, d}) + " w" + dims({v, d}) + " chunk " + std::to_string(kLmHeadChunk),
       2 * nd * A + vd * A + n * (I + F) + 2 * vd * F, 3 * 2.0 * n * d * v, [&] {
         return be.lm_head_loss(Tensor(static_cast<float*>(losses), DType::kF32, {n}),
                                Tensor(dx_lm, be.act_dtype(), {n, d}),
                                Tensor(static_cast<float*>(dw_lm), DType::kF32, {v, d}),
                                ConstTensor(xn, be.act_dtype(), {n, d}),
                                ConstTensor(w_lm, be.act_dtype(), {v, d}), i32(labels_d, {n}),
                                1.0f / n, Tensor(nullptr, DType::kF32, {n, v}), kLmHeadChunk, 0);
       }});

  if (!only.empty() &&
      std::none_of(ops.begin(), ops.end(), [&](const Op& op) { return op.name == only; })) {
    std::string names;
    for (const Op& op : ops) names += (names.empty() ? "" : ", ") + op.name;
    return not_found("no op " + only + "; the ops: " + names);
  }
  Report report(json, be.device_info().name);
  report.header();
  for (const Op& op : ops) {
    const bool wanted = only.empty() || op.name == only;
    if (!wanted && &op != &ops.front()) continue;  // the copy always runs: the reference
    Result<double> s = timer.median_s(op.run);
    if (!s.ok()) return s.status().with_context(op.name);
    report.row(op, *s, wanted);
  }
  return Status::ok_status();
}

int bench_main(int argc, char** argv) {
  bool json = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--op") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--json] [--op NAME]\n", argv[0]);
      return 2;
    }
  }
  auto choice = make_backend({.kind = "cuda"});
  if (!choice.ok()) {
    std::fprintf(stderr, "bench-gpu-ops: no usable CUDA GPU: %s\n",
                 choice.status().to_string().c_str());
    return 1;
  }
  if (Status s = run(*choice->backend, json, only); !s.ok()) {
    std::fprintf(stderr, "bench-gpu-ops: %s\n", s.to_string().c_str());
    return s.code() == ErrorCode::kNotFound ? 2 : 1;  // kNotFound: only an unknown --op
  }
  return 0;
}

}  // namespace
}  // namespace spillway::compute

int main(int argc, char** argv) {
  return spillway::compute::bench_main(argc, argv);
}
