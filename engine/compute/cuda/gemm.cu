// The four GEMMs of a linear layer through cuBLASLt, and the bias gradient.
//
// Row-major onto column-major. cuBLASLt computes D[M, N] = op(A)[M, K] · op(B)[K, N] + β·C with
// every matrix column-major. A row-major X[r, c] is, byte for byte, the column-major Xᵀ[c, r]
// with leading dimension c, so a row-major product P[r, c] is computed as the column-major
// Pᵀ[c, r]. All matrices here are packed (ld = rows of the stored column-major matrix):
//   linear_forward(_f32)   y[n, out] = x[n, in] · W[out, in]ᵀ
//       yᵀ[out, n] = W · xᵀ. W's bytes are the column-major Wᵀ[in, out] (ld in): A = W's bytes
//       with op T; x's bytes are xᵀ[in, n] (ld in): B with op N. M = out, N = n, K = in;
//       D[out, n] (ld out) is y. The epilogue bias has length M = out, broadcast over tokens.
//   linear_backward_input  dx[n, in] = dy[n, out] · W[out, in]
//       dxᵀ[in, n] = Wᵀ · dyᵀ. A = W's bytes Wᵀ[in, out] (ld in), op N; B = dy's bytes
//       dyᵀ[out, n] (ld out), op N. M = in, N = n, K = out; D[in, n] (ld in) is dx.
//   linear_backward_weight dW[out, in] += dy[n, out]ᵀ · x[n, in]
//       dWᵀ[in, out] = xᵀ · dy. A = x's bytes xᵀ[in, n] (ld in), op N; B = dy's bytes
//       dyᵀ[out, n] (ld out), op T (giving dy[n, out]). M = in, N = out, K = n;
//       C = D[in, out] (ld in) is dW, β = 1.
// bf16 A and B, fp32 compute and scale (CUBLAS_COMPUTE_32F); D bf16 or fp32 (both are supported
// with bf16 inputs), C always D's type and buffer.
//
// Plans. One plan per (op, M, N, K, flags) holds the descriptors and the heuristic's best
// algorithm, so a call after the first creates nothing. The flags carry the bias epilogue and the
// alignment (up to 256 bytes) of every pointer: cuBLASLt's heuristic assumes 256-byte aligned
// buffers unless told otherwise, and the LM head's row chunks or odd tiny-model shapes give less.
// With no algorithm for a shape and alignment the call fails with kUnsupported naming both.
//
// Determinism. cuBLAS gives the same bits run to run for a fixed algorithm on the same GPU model
// (its "Results reproducibility" section) when, as here, the workspace is the caller's. Every
// split-K reduction scheme keeps the order fixed (INPLACE serialises through counters, the others
// reduce in a separate pass), so none is excluded for determinism; for a bf16 D the INPLACE and
// OUTPUT_TYPE schemes are excluded all the same, because they would sum the K-partials in bf16
// and the contract is fp32 accumulation.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

#include "compute/cuda/cublas-check.cuh"
#include "compute/cuda/gemm.cuh"

namespace spillway::cuda {

namespace {

enum Op : int { kForward = 0, kForwardF32, kBackwardInput, kBackwardWeight };

// Key flags: bit 0 the bias epilogue, then log2 of each pointer's alignment, 4 bits each. β is
// a call argument, not part of the plan.
constexpr int kFlagBias = 1 << 0;
constexpr int kShiftA = 4, kShiftB = 8, kShiftD = 12, kShiftBias = 16;

// A bias vector under this alignment is added by add_bias_kernel rather than the epilogue: we
// have not seen every cuBLASLt version filter its epilogue algorithms by the bias pointer's
// alignment (arena-carved biases are 256-byte aligned, so this is the rare path).
constexpr int kEpilogueBiasAlign = 16;

// log2 of the largest power of two (at most 256) dividing the address.
int align_log2(const void* p) {
  return std::countr_zero(reinterpret_cast<uintptr_t>(p) | uintptr_t{256});
}

int pack_flags(const void* a, const void* b, const void* d, const void* bias) {
  int f = align_log2(a) << kShiftA | align_log2(b) << kShiftB | align_log2(d) << kShiftD;
  if (bias) f |= kFlagBias | align_log2(bias) << kShiftBias;
  return f;
}

uint32_t flag_align_bytes(int flags, int shift) {
  return 1u << ((flags >> shift) & 0xf);
}

// "linear_forward n=37 in=96 out=172 (cuBLASLt M=172 N=37 K=96, alignment A/B/D 256/64/8 bytes)"
std::string describe(const std::tuple<int, int, int, int, int>& key) {
  const auto [op, m, n, k, flags] = key;
  const char* name = "linear_forward";
  int tokens = n, in = k, out = m;
  if (op == kForwardF32) name = "linear_forward_f32";
  if (op == kBackwardInput) {
    name = "linear_backward_input";
    in = m;
    out = k;
  }
  if (op == kBackwardWeight) {
    name = "linear_backward_weight";
    tokens = k;
    in = m;
    out = n;
  }
  std::string s = std::string(name) + " n=" + std::to_string(tokens) + " in=" + std::to_string(in) +
                  " out=" + std::to_string(out) + " (cuBLASLt M=" + std::to_string(m) +
                  " N=" + std::to_string(n) + " K=" + std::to_string(k) + ", alignment A/B/D " +
                  std::to_string(flag_align_bytes(flags, kShiftA)) + "/" +
                  std::to_string(flag_align_bytes(flags, kShiftB)) + "/" +
                  std::to_string(flag_align_bytes(flags, kShiftD));
  if (flags & kFlagBias) s += ", bias " + std::to_string(flag_align_bytes(flags, kShiftBias));
  return s + " bytes)";
}

Status check_args(const char* op, int n, int in, int out, const void* workspace) {
  if (n < 0 || in <= 0 || out <= 0) {
    return invalid_argument(std::string(op) + ": bad shape n=" + std::to_string(n) +
                            " in=" + std::to_string(in) + " out=" + std::to_string(out));
  }
  if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    return invalid_argument(
        std::string(op) + ": needs a 256-byte aligned cuBLASLt workspace of Gemm::kWorkspaceBytes");
  }
  return {};
}

}  // namespace

// ---- kernels ------------------------------------------------------------------------------------

// y[n, out] += bias[out], for a bias vector the epilogue does not take (see kEpilogueBiasAlign).
// y was already rounded to bf16, so this rounds twice where the epilogue rounds once.
__global__ void add_bias_kernel(bf16* __restrict__ y, const bf16* __restrict__ bias, size_t count,
                                int out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    y[i] = __float2bfloat16_rn(__bfloat162float(y[i]) + __bfloat162float(bias[i % out]));
  }
}

// bias_backward in two deterministic passes. Pass 1: block (x, y) sums the kBiasCols columns
// x·kBiasCols.. over rows [y·kBiasRows, (y+1)·kBiasRows): each of kBiasLanes thread rows strides
// over the rows in order, then lane 0 adds the lanes in order. partial[y, col] (fp32).
constexpr int kBiasRows = kBiasBackwardRows;
constexpr int kBiasCols = 32;
constexpr int kBiasLanes = 8;

__global__ void bias_backward_partial_kernel(float* __restrict__ partial,
                                             const bf16* __restrict__ dy, int n, int out) {
  __shared__ float lanes[kBiasLanes][kBiasCols + 1];
  const int col = blockIdx.x * kBiasCols + threadIdx.x;
  const int r1 = min(n, static_cast<int>(blockIdx.y + 1) * kBiasRows);
  float s = 0.0f;
  if (col < out) {
    for (int r = blockIdx.y * kBiasRows + threadIdx.y; r < r1; r += kBiasLanes) {
      s += __bfloat162float(dy[static_cast<size_t>(r) * out + col]);
    }
  }
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < out) {
    float t = 0.0f;
    for (int i = 0; i < kBiasLanes; ++i) t += lanes[i][threadIdx.x];
    partial[static_cast<size_t>(blockIdx.y) * out + col] = t;
  }
}

// Pass 2: db[col] += Σ_b partial[b, col], b in order.
__global__ void bias_backward_final_kernel(float* __restrict__ db,
                                           const float* __restrict__ partial, int row_blocks,
                                           int out) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= out) return;
  float s = 0.0f;
  for (int b = 0; b < row_blocks; ++b) s += partial[static_cast<size_t>(b) * out + col];
  db[col] += s;
}

// ---- plans --------------------------------------------------------------------------------------

struct Gemm::Plan {
  Key key;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // C shares D's layout
  cublasLtMatmulAlgo_t algo{};

  explicit Plan(const Key& k) : key(k) {}
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }

  // Creates the descriptors for `key` and asks the heuristic for the best algorithm.
  Status init(cublasLtHandle_t handle) {
    const auto [op, m, n, k, flags] = key;
    const cublasOperation_t ta = op == kForward || op == kForwardF32 ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = op == kBackwardWeight ? CUBLAS_OP_T : CUBLAS_OP_N;
    const bool f32_out = op == kForwardF32 || op == kBackwardWeight;
    const cudaDataType_t d_type = f32_out ? CUDA_R_32F : CUDA_R_16BF;

    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t op_a = ta, op_b = tb;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    if (flags & kFlagBias) {
      const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const int32_t bias_type = CUDA_R_16BF;
      // The heuristic reads only the bias pointer's alignment; each call sets the real pointer.
      const void* bias_alignment =
          reinterpret_cast<const void*>(uintptr_t{flag_align_bytes(flags, kShiftBias)});
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                  sizeof(epilogue)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                  &bias_type, sizeof(bias_type)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &bias_alignment, sizeof(bias_alignment)));
    }
    // Stored (pre-op) shapes, packed: A is M×K for op N and K×M for op T; B is K×N or N×K.
    const uint64_t a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
    const uint64_t b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
    CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, a_rows, a_cols, static_cast<int64_t>(a_rows)));
    CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, b_rows, b_cols, static_cast<int64_t>(b_rows)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, d_type, m, n, m));

    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const Status s = pick_algorithm(handle, pref, f32_out, flags);
    cublasLtMatmulPreferenceDestroy(pref);
    return s;
  }

  Status pick_algorithm(cublasLtHandle_t handle, cublasLtMatmulPreference_t pref, bool f32_out,
                        int flags) {
    const uint64_t workspace = kWorkspaceBytes;
    // fp32 K-partials only when D is bf16 (see the file comment).
    const uint32_t schemes =
        f32_out ? CUBLASLT_REDUCTION_SCHEME_MASK
                : CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    const uint32_t align_a = flag_align_bytes(flags, kShiftA),
                   align_b = flag_align_bytes(flags, kShiftB),
                   align_d = flag_align_bytes(flags, kShiftD);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, pref, 1, &result, &found);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) {
      return unsupported("cuBLASLt offers no algorithm for this shape and alignment");
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
      return cublas_status(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    }
    algo = result.algo;
    return {};
  }

  // D = op(A)·op(B) + β·D (+ bias).
  Status run(cublasLtHandle_t handle, const void* a_ptr, const void* b_ptr, void* d_ptr, float beta,
             const void* bias, void* workspace, cudaStream_t stream) {
    if (Status s = matmul(handle, a_ptr, b_ptr, d_ptr, beta, bias, workspace, stream); !s.ok()) {
      return s.with_context(describe(key));
    }
    return {};
  }

 private:
  Status matmul(cublasLtHandle_t handle, const void* a_ptr, const void* b_ptr, void* d_ptr,
                float beta, const void* bias, void* workspace, cudaStream_t stream) {
    if (bias) {
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof(bias)));
    }
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(handle, desc, &alpha, a_ptr, a, b_ptr, b, &beta, d_ptr, d, d_ptr, d,
                                &algo, workspace, kWorkspaceBytes, stream));
    return {};
  }
};

Result<std::unique_ptr<Gemm>> Gemm::create() {
  std::unique_ptr<Gemm> gemm(new Gemm());
  CUBLAS_CHECK(cublasLtCreate(&gemm->handle_));
  return Result<std::unique_ptr<Gemm>>(std::move(gemm));
}

Gemm::~Gemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

Result<Gemm::Plan*> Gemm::plan(const Key& key) {
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  auto p = std::make_unique<Plan>(key);
  if (Status s = p->init(handle_); !s.ok()) return s.with_context(describe(key));
  Plan* raw = p.get();
  plans_.emplace(key, std::move(p));
  return raw;
}

// ---- launchers ----------------------------------------------------------------------------------

Status Gemm::linear_forward(bf16* y, const bf16* x, const bf16* w, const bf16* bias, int n, int in,
                            int out, void* workspace, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_args("linear_forward", n, in, out, workspace));
  if (n == 0) return {};
  const bool fused_bias = bias && reinterpret_cast<uintptr_t>(bias) % kEpilogueBiasAlign == 0;
  const bf16* epilogue_bias = fused_bias ? bias : nullptr;
  SPW_ASSIGN_OR_RETURN(Plan * p, plan({kForward, out, n, in, pack_flags(w, x, y, epilogue_bias)}));
  SPW_RETURN_IF_ERROR(p->run(handle_, w, x, y, 0.0f, epilogue_bias, workspace, stream));
  if (!bias || fused_bias) return {};
  const size_t count = static_cast<size_t>(n) * out;
  add_bias_kernel<<<std::min(ceil_div(count, 256), 4096u), 256, 0, stream>>>(y, bias, count, out);
  return CUDA_LAUNCH_CHECK("add_bias_kernel");
}

Status Gemm::linear_forward_f32(float* y, const bf16* x, const bf16* w, int n, int in, int out,
                                void* workspace, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_args("linear_forward_f32", n, in, out, workspace));
  if (n == 0) return {};
  SPW_ASSIGN_OR_RETURN(Plan * p, plan({kForwardF32, out, n, in, pack_flags(w, x, y, nullptr)}));
  return p->run(handle_, w, x, y, 0.0f, nullptr, workspace, stream);
}

Status Gemm::linear_backward_input(bf16* dx, const bf16* dy, const bf16* w, int n, int in, int out,
                                   bool accumulate, void* workspace, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_args("linear_backward_input", n, in, out, workspace));
  if (n == 0) return {};
  SPW_ASSIGN_OR_RETURN(Plan * p,
                       plan({kBackwardInput, in, n, out, pack_flags(w, dy, dx, nullptr)}));
  return p->run(handle_, w, dy, dx, accumulate ? 1.0f : 0.0f, nullptr, workspace, stream);
}

Status Gemm::linear_backward_weight(float* dw, const bf16* dy, const bf16* x, int n, int in,
                                    int out, void* workspace, cudaStream_t stream) {
  SPW_RETURN_IF_ERROR(check_args("linear_backward_weight", n, in, out, workspace));
  if (n == 0) return {};  // dW += 0
  SPW_ASSIGN_OR_RETURN(Plan * p,
                       plan({kBackwardWeight, in, out, n, pack_flags(x, dy, dw, nullptr)}));
  return p->run(handle_, x, dy, dw, 1.0f, nullptr, workspace, stream);
}

Status bias_backward(float* db, const bf16* dy, int n, int out, float* scratch,
                     size_t scratch_floats, cudaStream_t stream) {
  if (n < 0 || out <= 0) {
    return invalid_argument("bias_backward: bad shape n=" + std::to_string(n) +
                            " out=" + std::to_string(out));
  }
  if (n == 0) return {};
  const unsigned row_blocks = ceil_div(n, kBiasRows);
  if (row_blocks > 65535) {
    return invalid_argument("bias_backward: n=" + std::to_string(n) + " exceeds " +
                            std::to_string(65535 * kBiasRows) + " rows");
  }
  const size_t need = bias_backward_scratch_floats(n, out);
  if (scratch == nullptr || scratch_floats < need) {
    return invalid_argument("bias_backward: scratch of " + std::to_string(scratch_floats) +
                            " floats, needs " + std::to_string(need));
  }
  bias_backward_partial_kernel<<<dim3(ceil_div(out, kBiasCols), row_blocks),
                                 dim3(kBiasCols, kBiasLanes), 0, stream>>>(scratch, dy, n, out);
  SPW_RETURN_IF_ERROR(CUDA_LAUNCH_CHECK("bias_backward_partial_kernel"));
  bias_backward_final_kernel<<<ceil_div(out, 256), 256, 0, stream>>>(
      db, scratch, static_cast<int>(row_blocks), out);
  return CUDA_LAUNCH_CHECK("bias_backward_final_kernel");
}

}  // namespace spillway::cuda
