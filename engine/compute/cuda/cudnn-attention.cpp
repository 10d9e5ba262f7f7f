#include "compute/cuda/cudnn-attention.h"

#if SPILLWAY_HAVE_CUDNN

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "compute/cuda/cudnn-ragged.cuh"
#include "core/log.h"

namespace spillway::cuda {

namespace {

// cuDNN 9.0: the graph API of cudnn_graph.h with GEN_INDEX, and the fused flash-attention engines.
constexpr size_t kMinCudnnVersion = 90000;

// The uids of the tensors bound at execute() (cudnn-frontend's SDPA graphs, as written down in
// docs/engine.md, "Attention on cuDNN").
enum Uid : int64_t {
  kQ = 1,
  kK,  // bound to K, seen as Kᵀ [b, hkv, d, t]
  kV,  // bound to V (the backward sees it as Vᵀ)
  kO,
  kStats,
  kScale,
  kNegInf,
  kWindow,
  kWindowNegInf,
  kDO,
  kDQ,
  kDK,
  kDV,
  kOne,
  kSoftmaxSum,
  // Packed rows: each sequence's length (as Q's rows and as K/V's), first elements, padding value.
  kSeqLenQ,
  kSeqLenKV,
  kQOffsets,  // Q and dQ
  kKOffsets,  // K and dK
  kVOffsets,  // V and dV
  kOOffsets,  // O and dO
  kPaddingValue,
};

// The dims and strides of the graphs' tensors for one shape: Q, K, V, O and their gradients are
// [b, t, h, d] in memory (attention.cuh), seen by cuDNN as (b, h, t, d). hq and hkv are the heads
// the graph computes, layout_hq and layout_hkv those of the rows in memory: fewer for a chunk of
// heads (AttentionShape::heads), whose bound tensors keep the layout's strides.
struct Dims {
  int64_t b, t, hq, hkv, d, layout_hq, layout_hkv;
  explicit Dims(const AttentionShape& s)
      : b(s.batch),
        t(s.seq),
        hq(s.heads > 0 ? s.heads : s.hq),
        hkv(s.heads > 0 ? s.heads / (s.hq / s.hkv) : s.hkv),
        d(s.head_dim),
        layout_hq(s.hq),
        layout_hkv(s.hkv) {}
};

// Q·Kᵀ's tensors: [b, hq, t, t], and a value per query row [b, hq, t, 1].
int scores(CudnnGraph& g, const Dims& x, cudnnDataType_t type) {
  return g.virtual_tensor({x.b, x.hq, x.t, x.t}, {x.hq * x.t * x.t, x.t * x.t, x.t, 1}, type);
}
int rows(CudnnGraph& g, const Dims& x) {
  return g.virtual_tensor({x.b, x.hq, x.t, 1}, {x.hq * x.t, x.t, 1, 1}, CUDNN_DATA_FLOAT);
}
// The same scores transposed (keys by queries), as the backward's dV and dK GEMMs read them.
int scores_transposed(CudnnGraph& g, const Dims& x, cudnnDataType_t type) {
  return g.virtual_tensor({x.b, x.hq, x.t, x.t}, {x.hq * x.t * x.t, x.t * x.t, 1, x.t}, type);
}
// h heads of a [b, t, layout_h, d] tensor bound at execute(), and their transposed view
// (b, h, d, t); `ragged`: the offsets of packed sequences (CudnnGraph::tensor), or -1.
int heads(CudnnGraph& g, int64_t uid, const Dims& x, int64_t h, int64_t layout_h, int ragged = -1) {
  return g.tensor(uid, {x.b, h, x.t, x.d}, {x.t * layout_h * x.d, x.d, layout_h * x.d, 1},
                  CUDNN_DATA_BFLOAT16, ragged);
}
int heads_transposed(CudnnGraph& g, int64_t uid, const Dims& x, int64_t h, int64_t layout_h,
                     int ragged = -1) {
  return g.tensor(uid, {x.b, h, x.d, x.t}, {x.t * layout_h * x.d, x.d, 1, layout_h * x.d},
                  CUDNN_DATA_BFLOAT16, ragged);
}
// A value per query row [b, hq, t] of `layout_h` heads (the lse: the layout's; the backward's
// softmax sum: the graph's own).
int stats(CudnnGraph& g, int64_t uid, const Dims& x, int64_t layout_h) {
  return g.tensor(uid, {x.b, x.hq, x.t, 1}, {layout_h * x.t, x.t, 1, 1}, CUDNN_DATA_FLOAT);
}

// The causal mask (key j visible to query i when j <= i) and, with a window w, the band
// (j + w > i): masked scores become -inf.
int masked(CudnnGraph& g, const Dims& x, int in, int window, cudnnDataType_t index_prec) {
  const int row = scores(g, x, CUDNN_DATA_INT32);
  g.gen_index(in, 2, row, index_prec);
  const int col = scores(g, x, CUDNN_DATA_INT32);
  g.gen_index(in, 3, col, index_prec);
  const int keep = scores(g, x, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, CUDNN_DATA_BOOLEAN);
  int out = scores(g, x, CUDNN_DATA_FLOAT);
  g.select(in, g.scalar(kNegInf, CUDNN_DATA_FLOAT), keep, out);
  if (window > 0) {
    const int row2 = scores(g, x, CUDNN_DATA_INT32);
    g.gen_index(out, 2, row2, index_prec);
    const int col2 = scores(g, x, CUDNN_DATA_INT32);
    g.gen_index(out, 3, col2, index_prec);
    const int shifted = scores(g, x, CUDNN_DATA_FLOAT);
    g.pointwise(CUDNN_POINTWISE_ADD, col2, g.scalar(kWindow, CUDNN_DATA_FLOAT), shifted);
    const int in_band = scores(g, x, CUDNN_DATA_BOOLEAN);
    g.pointwise(CUDNN_POINTWISE_CMP_GT, shifted, row2, in_band, CUDNN_DATA_BOOLEAN);
    const int banded = scores(g, x, CUDNN_DATA_FLOAT);
    g.select(out, g.scalar(kWindowNegInf, CUDNN_DATA_FLOAT), in_band, banded);
    out = banded;
  }
  return out;
}

// Packed rows as ragged sequences: int32 tensors per sequence bound at execute(): lengths
// [b, 1, 1, 1] and first elements [b + 1, 1, 1, 1]. All -1 for rows that are not packed, which
// then have none of what follows from them.
struct Ragged {
  int seq_q = -1, seq_kv = -1, q = -1, k = -1, v = -1, o = -1;
  bool packed() const { return seq_q >= 0; }
};
Ragged ragged_tensors(CudnnGraph& g, const Dims& x) {
  auto lengths = [&](int64_t uid) {
    return g.tensor(uid, {x.b, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32);
  };
  auto offsets = [&](int64_t uid) {
    return g.tensor(uid, {x.b + 1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32);
  };
  Ragged r;
  r.seq_q = lengths(kSeqLenQ);
  r.seq_kv = lengths(kSeqLenKV);
  r.q = offsets(kQOffsets);
  r.k = offsets(kKOffsets);
  r.v = offsets(kVOffsets);
  r.o = offsets(kOOffsets);
  return r;
}

// The padding mask of ragged sequences (cudnn-frontend's padding_mask): scores of a row past the
// sequence's queries or a column past its keys become the lowest float. `in` itself for rows
// that are not packed.
int padded(CudnnGraph& g, const Dims& x, int in, const Ragged& r) {
  if (!r.packed()) return in;
  const int row = scores(g, x, CUDNN_DATA_INT32);
  g.gen_index(in, 2, row, CUDNN_DATA_INT32);
  const int col = scores(g, x, CUDNN_DATA_INT32);
  g.gen_index(in, 3, col, CUDNN_DATA_INT32);
  const int row_in = scores(g, x, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, row, r.seq_q, row_in, CUDNN_DATA_BOOLEAN);
  const int col_in = scores(g, x, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, col, r.seq_kv, col_in, CUDNN_DATA_BOOLEAN);
  const int keep = scores(g, x, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, row_in, col_in, keep, CUDNN_DATA_BOOLEAN);
  const int out = scores(g, x, CUDNN_DATA_FLOAT);
  g.select(in, g.scalar(kPaddingValue, CUDNN_DATA_FLOAT), keep, out);
  return out;
}

// The forward: S = scale·Q·Kᵀ masked; stats = max + ln Σ exp(S - max); O = softmax(S)·V. With
// ragged sequences, their offsets on Q, K, V and O, each GEMM told the sequence's sizes, and the
// padding mask before the causal one; the statistics dense [x.b, hq, x.t] either way.
void forward_ops(CudnnGraph& g, const Dims& x, int window, cudnnDataType_t index_prec,
                 const Ragged& r) {
  const int q = heads(g, kQ, x, x.hq, x.layout_hq, r.q);
  const int kt = heads_transposed(g, kK, x, x.hkv, x.layout_hkv, r.k);
  const int v = heads(g, kV, x, x.hkv, x.layout_hkv, r.v);
  const int o = heads(g, kO, x, x.hq, x.layout_hq, r.o);
  const int lse = stats(g, kStats, x, x.layout_hq);
  const int qk = scores(g, x, CUDNN_DATA_FLOAT);
  g.matmul(q, kt, qk, /*m=*/r.seq_q, /*n=*/r.seq_kv);
  const int scaled = scores(g, x, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, g.scalar(kScale, CUDNN_DATA_FLOAT), scaled);
  const int sc = masked(g, x, padded(g, x, scaled, r), window, index_prec);
  const int max = rows(g, x);
  g.reduce(CUDNN_REDUCE_TENSOR_MAX, sc, max);
  const int centred = scores(g, x, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, sc, max, centred);
  const int e = scores(g, x, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, centred, -1, e);
  const int sum = rows(g, x);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const int log_sum = rows(g, x);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, -1, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, max, log_sum, lse);
  const int p = scores(g, x, CUDNN_DATA_BFLOAT16);  // the second GEMM's A is bf16
  g.pointwise(CUDNN_POINTWISE_DIV, e, sum, p);
  g.matmul(p, v, o, /*m=*/r.seq_q, /*n=*/-1, /*k=*/r.seq_kv);
}

// `out` = the (b, hq, t, d) product `full` summed over each KV head's group of query heads, or
// the product itself without GQA.
int per_kv_head(CudnnGraph& g, const Dims& x, int out) {
  if (x.hq == x.hkv) return out;
  return g.virtual_tensor({x.b, x.hq, x.t, x.d}, {x.hq * x.t * x.d, x.t * x.d, x.d, 1},
                          CUDNN_DATA_BFLOAT16);
}

// The backward, deterministic (no fp32 dQ accumulator: cuDNN then keeps dS in its workspace and
// computes dQ by a GEMM of its own): softmax_sum = rowsum(dO·O); P = exp(S - stats);
// dV = Pᵀ·dO; dS = scale·P·(dO·Vᵀ - softmax_sum); dK = dSᵀ·Q; dQ = dS·K. With ragged sequences
// as the forward: dO takes O's offsets, dQ Q's, dK K's, dV V's and the view of K the dQ GEMM
// reads K's; the statistics and softmax sum stay dense [x.b, hq, x.t]. A chunk of heads reads and
// writes its heads of the layout (Dims) and keeps its own softmax sum [x.b, heads, x.t].
void backward_ops(CudnnGraph& g, const Dims& x, int window, cudnnDataType_t index_prec,
                  const Ragged& r) {
  const int q = heads(g, kQ, x, x.hq, x.layout_hq, r.q);
  const int kt = heads_transposed(g, kK, x, x.hkv, x.layout_hkv, r.k);
  const int vt = heads_transposed(g, kV, x, x.hkv, x.layout_hkv, r.v);
  const int o = heads(g, kO, x, x.hq, x.layout_hq, r.o);
  const int lse = stats(g, kStats, x, x.layout_hq);
  const int dout = heads(g, kDO, x, x.hq, x.layout_hq, r.o);
  const int dq = heads(g, kDQ, x, x.hq, x.layout_hq, r.q);
  const int dk = heads(g, kDK, x, x.hkv, x.layout_hkv, r.k);
  const int dv = heads(g, kDV, x, x.hkv, x.layout_hkv, r.v);
  const int scale = g.scalar(kScale, CUDNN_DATA_FLOAT);

  const int dout_o = g.virtual_tensor({x.b, x.hq, x.t, x.d}, {x.hq * x.t * x.d, x.t * x.d, x.d, 1},
                                      CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, dout, o, dout_o);
  const int row_sum = rows(g, x);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, dout_o, row_sum);
  const int softmax_sum = stats(g, kSoftmaxSum, x, x.hq);
  g.pointwise(CUDNN_POINTWISE_MUL, row_sum, g.scalar(kOne, CUDNN_DATA_FLOAT), softmax_sum);

  const int qk = scores(g, x, CUDNN_DATA_FLOAT);
  g.matmul(q, kt, qk, /*m=*/r.seq_q, /*n=*/r.seq_kv);
  const int scaled = scores(g, x, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, scale, scaled);
  const int centred = scores(g, x, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, lse, centred);
  const int sc = masked(g, x, padded(g, x, centred, r), window, index_prec);
  const int p = scores(g, x, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, sc, -1, p);

  const int pt = scores_transposed(g, x, CUDNN_DATA_BFLOAT16);
  g.reshape(p, pt);
  const int dv_full = per_kv_head(g, x, dv);
  g.matmul(pt, dout, dv_full, /*m=*/r.seq_kv, /*n=*/-1, /*k=*/r.seq_q);
  if (dv_full != dv) g.reduce(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);

  const int dp = scores(g, x, CUDNN_DATA_FLOAT);
  g.matmul(dout, vt, dp, /*m=*/r.seq_q, /*n=*/r.seq_kv);
  const int diff = scores(g, x, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, softmax_sum, diff);
  const int prod = scores(g, x, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, diff, p, prod);
  const int ds = scores(g, x, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, prod, scale, ds);

  const int dst = scores_transposed(g, x, CUDNN_DATA_BFLOAT16);
  g.reshape(ds, dst);
  const int dk_full = per_kv_head(g, x, dk);
  g.matmul(dst, q, dk_full, /*m=*/r.seq_kv, /*n=*/-1, /*k=*/r.seq_q);
  if (dk_full != dk) g.reduce(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);

  const int k = g.virtual_tensor({x.b, x.hkv, x.t, x.d},
                                 {x.t * x.layout_hkv * x.d, x.d, x.layout_hkv * x.d, 1},
                                 CUDNN_DATA_FLOAT, r.k);
  g.reshape(kt, k);
  g.matmul(ds, k, dq, /*m=*/r.seq_q, /*n=*/-1, /*k=*/r.seq_kv);
}

// The graphs of rows that are not packed, and of x.b ragged sequences of up to x.t tokens.
void forward_graph(CudnnGraph& g, const AttentionShape& s, cudnnDataType_t index_prec) {
  forward_ops(g, Dims(s), s.window, index_prec, Ragged{});
}
void backward_graph(CudnnGraph& g, const AttentionShape& s, cudnnDataType_t index_prec) {
  backward_ops(g, Dims(s), s.window, index_prec, Ragged{});
}
Dims ragged_dims(const RaggedShape& s) {
  return Dims(AttentionShape{s.entries, s.length, s.hq, s.hkv, s.head_dim, s.window});
}
void ragged_forward_graph(CudnnGraph& g, const RaggedShape& s, cudnnDataType_t index_prec) {
  const Dims x = ragged_dims(s);
  forward_ops(g, x, s.window, index_prec, ragged_tensors(g, x));
}
void ragged_backward_graph(CudnnGraph& g, const RaggedShape& s, cudnnDataType_t index_prec) {
  const Dims x = ragged_dims(s);
  backward_ops(g, x, s.window, index_prec, ragged_tensors(g, x));
}

// The value that masks a score: -inf, or the lowest float before cuDNN 9.10, whose engines
// wanted a finite one (cudnn-frontend's choice).
float masked_value(size_t version) {
  return version >= 91000 ? -std::numeric_limits<float>::infinity()
                          : std::numeric_limits<float>::lowest();
}

std::string shape_text(const RaggedShape& s) {
  return std::to_string(s.entries) + " sequences of up to " + std::to_string(s.length) +
         " tokens, hq=" + std::to_string(s.hq) + " hkv=" + std::to_string(s.hkv) +
         " d=" + std::to_string(s.head_dim) + " window=" + std::to_string(s.window);
}

// A variant pack's bindings: each uid with its pointer (device memory, or a host scalar).
struct Bindings {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  Bindings& operator()(int64_t uid, const void* p) {
    uids.push_back(uid);
    ptrs.push_back(const_cast<void*>(p));
    return *this;
  }
};

// The by-value scalars the graphs read, bound by address: they must outlive the call.
struct Scalars {
  float scale, masked, window, one = 1.0f, padding = std::numeric_limits<float>::lowest();
  Scalars(float scale, size_t version, int window)
      : scale(scale), masked(masked_value(version)), window(static_cast<float>(window)) {}
};

// The scalars every graph of `s` reads: the scale, the masked value and, with a window, the
// window and its masked value.
void bind_scalars(Bindings& b, const Scalars& v, const AttentionShape& s) {
  b(kScale, &v.scale)(kNegInf, &v.masked);
  if (s.window > 0) b(kWindow, &v.window)(kWindowNegInf, &v.masked);
}

// A ragged chunk's index (cuda-workspace.h: `ints` int32 in four equal parts, the sequences'
// lengths, then the offsets of Q/O, of K/V and the first tokens): the lengths of both sides, the
// offsets of each tensor, and the padding mask's value.
void bind_ragged(Bindings& b, const Scalars& v, const int32_t* index, int ints) {
  const int32_t *lengths = index, *q_offsets = index + ints / 4, *kv_offsets = index + ints / 2;
  b(kSeqLenQ, lengths)(kSeqLenKV, lengths)(kQOffsets, q_offsets)(kOOffsets, q_offsets);
  b(kKOffsets, kv_offsets)(kVOffsets, kv_offsets)(kPaddingValue, &v.padding);
}

std::string shape_text(const AttentionShape& s) {
  return "b=" + std::to_string(s.batch) + " t=" + std::to_string(s.seq) +
         " hq=" + std::to_string(s.hq) + " hkv=" + std::to_string(s.hkv) +
         " d=" + std::to_string(s.head_dim) + " window=" + std::to_string(s.window) +
         (s.heads > 0 ? " in chunks of " + std::to_string(s.heads) + " query heads" : "");
}

// The graph `make` adds to a fresh CudnnGraph, built: GEN_INDEX computing in fp32
// (cudnn-frontend today), else in int32 (its earlier releases), since cuDNN versions accept one or
// the other. Logs the engine that runs `what`, or why cuDNN does not (the module's kernel then
// does: null).
template <class Make>
std::unique_ptr<CudnnGraph> built_graph(const CudnnApi* api, cudnnHandle_t handle,
                                        const std::string& what, Make&& make) {
  Status built;
  for (cudnnDataType_t index_prec : {CUDNN_DATA_FLOAT, CUDNN_DATA_INT32}) {
    auto g = std::make_unique<CudnnGraph>(api);
    make(*g, index_prec);
    built = g->build(handle, {CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC});
    if (built.ok()) {
      log_debug("attention: cuDNN engine " + std::to_string(g->engine_index()) + " runs the " +
                what + " with " + std::to_string(g->workspace_bytes()) + " bytes of workspace");
      return g;
    }
  }
  log_info("attention: cuDNN does not run the " + what +
           "; the module's kernel does: " + built.message());
  return nullptr;
}

}  // namespace

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::create() {
  if (const char* off = std::getenv("SPILLWAY_CUDNN"); off && std::string(off) == "0") {
    return unsupported("cuDNN is turned off (SPILLWAY_CUDNN=0)");
  }
  SPW_ASSIGN_OR_RETURN(const CudnnApi* api, load_cudnn(kMinCudnnVersion));
  // 9.10.0 and 9.10.1 compute bf16 attention wrongly (cudnn-frontend refuses them).
  if (api->version >= 91000 && api->version < 91002) {
    return unsupported("cuDNN 9.10.0 and 9.10.1 have a known bf16 attention bug: update cuDNN");
  }
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t s = api->create(&handle);
  if (s != CUDNN_STATUS_SUCCESS) return unsupported(api->error(s, "cudnnCreate"));
  std::unique_ptr<CudnnAttention> a(new CudnnAttention(api, handle));
  // Two ints the ragged index kernel writes and the host reads without waiting (no check without).
  void* host = nullptr;
  void* device = nullptr;
  if (cudaHostAlloc(&host, 2 * sizeof(int), cudaHostAllocMapped) == cudaSuccess &&
      cudaHostGetDevicePointer(&device, host, 0) == cudaSuccess) {
    a->violation_host_ = static_cast<int*>(host);
    a->violation_device_ = static_cast<int*>(device);
    a->violation_host_[0] = a->violation_host_[1] = 0;
  } else {
    if (host) cudaFreeHost(host);
    cudaGetLastError();  // clear it: the backend goes on without the check
    log_info("attention: no mapped host memory; packed rows' bounds go unchecked on the GPU");
  }
  return a;
}

CudnnAttention::~CudnnAttention() {
  forward_.clear();
  backward_.clear();
  ragged_forward_.clear();
  ragged_backward_.clear();
  if (violation_host_) cudaFreeHost(violation_host_);
  if (handle_) api_->destroy(handle_);
}

std::string CudnnAttention::describe() const {
  const size_t v = api_->version;
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

Result<const CudnnGraph*> CudnnAttention::plan(
    std::map<AttentionShape, std::unique_ptr<CudnnGraph>>* plans, const AttentionShape& s,
    bool backward) {
  if (auto it = plans->find(s); it != plans->end()) return it->second.get();
  // Before 9.16 the backward wants whole 128-key tiles (cudnn-frontend adds a padding mask
  // otherwise); the sliding window needs 9.2.
  const bool refused = (backward && api_->version < 91600 && s.seq % 128 != 0) ||
                       (s.window > 0 && api_->version < 90200);
  const std::string what = std::string(backward ? "backward" : "forward") + " of " + shape_text(s);
  std::unique_ptr<CudnnGraph> g;
  if (refused) {
    log_info("attention: cuDNN does not run the " + what +
             "; the module's kernel does: this cuDNN version does not cover the shape");
  } else {
    g = built_graph(api_, handle_, what, [&](CudnnGraph& graph, cudnnDataType_t index_prec) {
      backward ? backward_graph(graph, s, index_prec) : forward_graph(graph, s, index_prec);
    });
  }
  auto& slot = (*plans)[s];
  slot = std::move(g);
  return slot.get();
}

Status CudnnAttention::run(const CudnnGraph& g, const std::vector<int64_t>& uids,
                           const std::vector<void*>& pointers, void* workspace,
                           cudaStream_t stream) {
  const cudnnStatus_t st = api_->set_stream(handle_, stream);
  if (st != CUDNN_STATUS_SUCCESS) return internal_error(api_->error(st, "cudnnSetStream"));
  return g.execute(handle_, uids, pointers, workspace);
}

Result<bool> CudnnAttention::forward(bf16* out, float* lse, const bf16* q, const bf16* k,
                                     const bf16* v, const AttentionShape& s, float scale,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (!cudnn_attention_covers(s.hq, s.hkv, s.head_dim)) return false;
  SPW_ASSIGN_OR_RETURN(const CudnnGraph* g, plan(&forward_, s, /*backward=*/false));
  if (g == nullptr || static_cast<size_t>(g->workspace_bytes()) > workspace_bytes) return false;
  const Scalars scalars(scale, api_->version, s.window);
  Bindings b;
  b(kQ, q)(kK, k)(kV, v)(kO, out)(kStats, lse);
  bind_scalars(b, scalars, s);
  SPW_RETURN_IF_ERROR(run(*g, b.uids, b.ptrs, workspace, stream));
  return true;
}

Result<bool> CudnnAttention::backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                                      const bf16* k, const bf16* v, const bf16* out,
                                      const float* lse, const AttentionShape& s, float scale,
                                      void* workspace, size_t workspace_bytes,
                                      cudaStream_t stream) {
  if (!cudnn_attention_backward_takes_window(s.window, s.seq)) return false;
  // The chunk cuda-workspace.h plans for, or a smaller one where cuDNN's workspace came out larger
  // than its estimate: [softmax sum [sequences, heads, t]][cuDNN's own].
  const CudnnGraph* g = nullptr;
  CudnnBackwardChunk chunk =
      cudnn_attention_backward_chunk(s.batch, s.seq, s.hq, s.hkv, s.head_dim);
  size_t sum_bytes = 0;
  for (; chunk.covered();
       chunk = cudnn_attention_backward_next_chunk(chunk, s.batch, s.seq, s.hq, s.hkv)) {
    AttentionShape cs = s;
    cs.batch = chunk.sequences;
    cs.heads = chunk.heads < s.hq ? chunk.heads : 0;
    SPW_ASSIGN_OR_RETURN(g, plan(&backward_, cs, /*backward=*/true));
    if (g == nullptr) return false;
    sum_bytes = compute::align_to_device(static_cast<size_t>(chunk.sequences) * chunk.heads *
                                         s.seq * sizeof(float));
    if (sum_bytes + static_cast<size_t>(g->workspace_bytes()) <= workspace_bytes) break;
  }
  if (!chunk.covered()) return false;
  char* ws = static_cast<char*>(workspace);
  const Scalars scalars(scale, api_->version, s.window);
  // Where a call's first sequence b0 and query head h0 start: q-like tensors [b, t, hq, d], k-like
  // [b, t, hkv, d] (the chunk's first KV head h0 / group), lse [b, hq, t].
  const int group = s.hq / s.hkv;
  const size_t d = s.head_dim;
  for (int b0 = 0; b0 < s.batch; b0 += chunk.sequences) {
    for (int h0 = 0; h0 < s.hq; h0 += chunk.heads) {
      const size_t qo = static_cast<size_t>(b0) * s.seq * s.hq * d + h0 * d;
      const size_t kvo = static_cast<size_t>(b0) * s.seq * s.hkv * d + h0 / group * d;
      const size_t lo = (static_cast<size_t>(b0) * s.hq + h0) * s.seq;
      Bindings b;
      b(kQ, q + qo)(kK, k + kvo)(kV, v + kvo)(kO, out + qo);
      b(kStats, lse + lo)(kDO, dout + qo);
      b(kDQ, dq + qo)(kDK, dk + kvo)(kDV, dv + kvo);
      b(kOne, &scalars.one)(kSoftmaxSum, ws);
      bind_scalars(b, scalars, s);
      SPW_RETURN_IF_ERROR(run(*g, b.uids, b.ptrs, ws + sum_bytes, stream));
    }
  }
  return true;
}

// --- packed rows ---------------------------------------------------------------------------------

void CudnnAttention::say_once(const std::string& message) {
  if (said_.insert(message).second) log_info("attention: " + message);
}

Status CudnnAttention::check_bounds_kept() const {
  if (violation_host_ == nullptr) return Status::ok_status();
  const volatile int* v = violation_host_;
  const int examples = v[0], longest = v[1];
  if (examples == 0 && longest == 0) return Status::ok_status();
  return internal_error(
      "packed rows: a call's positions had " +
      (examples ? std::to_string(examples) + " examples"
                : "an example of " + std::to_string(longest) + " tokens") +
      ", more than its PackedBounds said, and its attention left the rest out: compute the "
      "bounds with compute::packed_bounds on the positions the call passes");
}

Result<const CudnnGraph*> CudnnAttention::ragged_plan(const RaggedShape& s, bool backward) {
  auto& plans = backward ? ragged_backward_ : ragged_forward_;
  if (auto it = plans.find(s); it != plans.end()) return it->second.get();
  const std::string what =
      std::string("packed ") + (backward ? "backward" : "forward") + " of " + shape_text(s);
  std::unique_ptr<CudnnGraph> g =
      built_graph(api_, handle_, what, [&](CudnnGraph& graph, cudnnDataType_t index_prec) {
        backward ? ragged_backward_graph(graph, s, index_prec)
                 : ragged_forward_graph(graph, s, index_prec);
      });
  auto& slot = plans[s];
  slot = std::move(g);
  return slot.get();
}

Result<bool> CudnnAttention::plan_packed(const AttentionShape& s, compute::PackedBounds bounds,
                                         bool backward, size_t workspace_bytes, RaggedRun* run) {
  const char* pass = backward ? "backward" : "forward";
  const std::string why = std::string("the packed ") + pass + " stays on the module's kernel: ";
  if (!cudnn_attention_covers(s.hq, s.hkv, s.head_dim)) return false;
  if (!bounds.known()) {
    say_once(why + "the caller gave no bounds on its examples (compute::PackedBounds)");
    return false;
  }
  // Ragged sequences with GQA: cuDNN 9.6 (cudnn-frontend's support surface).
  if (api_->version < 90600) {
    say_once(why + "ragged sequences need cuDNN 9.6 or newer, this is " + describe());
    return false;
  }
  const int64_t tokens = static_cast<int64_t>(s.batch) * s.seq;
  if (tokens * s.hq * s.head_dim > std::numeric_limits<int32_t>::max()) {
    say_once(why + "its offsets of " + std::to_string(tokens) + " tokens overflow int32");
    return false;
  }
  if (bounds.examples > kCudnnRaggedMaxExamples) {
    say_once(why + std::to_string(bounds.examples) + " examples are more than a plan's " +
             std::to_string(kCudnnRaggedMaxExamples));
    return false;
  }
  if (tokens < static_cast<int64_t>(bounds.examples) * kCudnnRaggedMinAverageLength) {
    say_once(why + std::to_string(bounds.examples) + " examples in " + std::to_string(tokens) +
             " tokens are shorter than " + std::to_string(kCudnnRaggedMinAverageLength) +
             " tokens on average");
    return false;
  }
  const int entries = cudnn_ragged_examples_bucket(bounds.examples);
  const int length = cudnn_ragged_length_bucket(std::min(bounds.longest, s.seq), s.seq);
  // A window narrower than the sequences: as the unpacked backward (cuDNN computes each whole
  // causal triangle; the module's kernel skips the tiles outside the band).
  if (backward && s.window > 0 && s.window < length) {
    say_once(why + "its window " + std::to_string(s.window) + " is narrower than its examples (" +
             std::to_string(length) + " tokens)");
    return false;
  }
  // The most sequences per launch whose statistics and cuDNN workspace fit the scratch; the
  // backward's plans are not built for chunks its estimate already rules out.
  for (int chunk = entries; chunk > 0; chunk /= 2) {
    const int launches = (bounds.examples + chunk - 1) / chunk;
    if (launches > kCudnnRaggedMaxChunks) break;
    const size_t index = cudnn_ragged_index_bytes(entries, chunk);
    const size_t stats = cudnn_ragged_stats_bytes(chunk, s.hq, length);
    const size_t sum = backward ? stats : 0;
    if (backward && index + stats +
                            static_cast<size_t>(chunk) *
                                cudnn_attention_backward_bytes(length, s.hq, s.hkv, s.head_dim) >
                        workspace_bytes) {
      continue;
    }
    const RaggedShape shape{chunk, length, s.hq, s.hkv, s.head_dim, s.window};
    SPW_ASSIGN_OR_RETURN(const CudnnGraph* g, ragged_plan(shape, backward));
    if (g == nullptr) return false;  // ragged_plan said why
    if (index + stats + sum + static_cast<size_t>(g->workspace_bytes()) <= workspace_bytes) {
      *run = RaggedRun{shape, entries, launches, g, index, stats, sum};
      return true;
    }
  }
  say_once(why + std::to_string(entries) + " sequences of up to " + std::to_string(length) +
           " tokens do not fit the " + std::to_string(workspace_bytes) +
           " bytes of scratch in at most " + std::to_string(kCudnnRaggedMaxChunks) + " launches");
  return false;
}

Result<bool> CudnnAttention::start_packed(const AttentionShape& s, const int32_t* positions,
                                          compute::PackedBounds bounds, bool backward,
                                          void* workspace, size_t workspace_bytes,
                                          cudaStream_t stream, RaggedRun* run) {
  SPW_RETURN_IF_ERROR(check_bounds_kept());
  SPW_ASSIGN_OR_RETURN(bool runs, plan_packed(s, bounds, backward, workspace_bytes, run));
  if (!runs) return false;
  SPW_RETURN_IF_ERROR(ragged_index(positions, s.batch, s.seq, s.hq, s.hkv, s.head_dim, run->entries,
                                   run->shape.entries, run->shape.length,
                                   static_cast<int32_t*>(workspace), violation_device_, stream));
  char* ws = static_cast<char*>(workspace);
  run->index = static_cast<const int32_t*>(workspace);
  run->stats = reinterpret_cast<float*>(ws + run->index_bytes);
  run->softmax_sum = ws + run->index_bytes + run->stats_bytes;
  run->own = ws + run->index_bytes + run->stats_bytes + run->sum_bytes;
  run->index_ints = cudnn_ragged_chunk_index_ints(run->shape.entries);
  return true;
}

Result<bool> CudnnAttention::forward_packed(bf16* out, float* lse, const bf16* q, const bf16* k,
                                            const bf16* v, const AttentionShape& s,
                                            const int32_t* positions, compute::PackedBounds bounds,
                                            float scale, void* workspace, size_t workspace_bytes,
                                            cudaStream_t stream) {
  RaggedRun r;
  SPW_ASSIGN_OR_RETURN(bool runs, start_packed(s, positions, bounds, /*backward=*/false, workspace,
                                               workspace_bytes, stream, &r));
  if (!runs) return false;
  const Scalars scalars(scale, api_->version, s.window);
  for (int c = 0; c < r.launches; ++c) {
    Bindings b;
    b(kQ, q)(kK, k)(kV, v)(kO, out)(kStats, r.stats);
    bind_ragged(b, scalars, r.chunk_index(c), r.index_ints);
    bind_scalars(b, scalars, s);
    SPW_RETURN_IF_ERROR(run(*r.plan, b.uids, b.ptrs, r.own, stream));
    SPW_RETURN_IF_ERROR(ragged_stats_scatter(lse, r.stats, r.chunk_index(c), r.shape.entries, s.hq,
                                             r.shape.length, s.seq, stream));
  }
  return true;
}

Result<bool> CudnnAttention::backward_packed(bf16* dq, bf16* dk, bf16* dv, const bf16* dout,
                                             const bf16* q, const bf16* k, const bf16* v,
                                             const bf16* out, const float* lse,
                                             const AttentionShape& s, const int32_t* positions,
                                             compute::PackedBounds bounds, float scale,
                                             void* workspace, size_t workspace_bytes,
                                             cudaStream_t stream) {
  RaggedRun r;
  SPW_ASSIGN_OR_RETURN(bool runs, start_packed(s, positions, bounds, /*backward=*/true, workspace,
                                               workspace_bytes, stream, &r));
  if (!runs) return false;
  const Scalars scalars(scale, api_->version, s.window);
  for (int c = 0; c < r.launches; ++c) {
    SPW_RETURN_IF_ERROR(ragged_stats_gather(r.stats, lse, r.chunk_index(c), r.shape.entries, s.hq,
                                            r.shape.length, s.seq, stream));
    Bindings b;
    b(kQ, q)(kK, k)(kV, v)(kO, out)(kStats, r.stats)(kDO, dout)(kDQ, dq)(kDK, dk)(kDV, dv);
    b(kOne, &scalars.one)(kSoftmaxSum, r.softmax_sum);
    bind_ragged(b, scalars, r.chunk_index(c), r.index_ints);
    bind_scalars(b, scalars, s);
    SPW_RETURN_IF_ERROR(run(*r.plan, b.uids, b.ptrs, r.own, stream));
  }
  return true;
}

}  // namespace spillway::cuda

#endif  // SPILLWAY_HAVE_CUDNN
