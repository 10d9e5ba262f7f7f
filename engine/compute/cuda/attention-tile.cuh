// Building blocks of the attention kernels (internal to cuda/: attention.cu,
// attention-key-bias.cu).
//
// Two families:
//   - the generic fp32 tiles: 32 rows of a head staged in shared memory as fp32, row stride
//     generic_ld(d) (d rounded up to 8, plus 4 floats, so that a float4 read by 32 lanes of 32
//     different rows hits every bank once); a block of 8 warps where warp w owns 4 rows and lane l
//     one column of a 32 × 32 score tile.
//   - the tensor-core primitives of the flash kernels (Ampere/Hopper mma.sync): cp.async 16-byte
//     copies into shared memory (zero-filled past the sequence), ldmatrix, and
//     mma.sync.m16n8k16 with bf16 inputs and fp32 accumulators. Fragment layouts are PTX's
//     ("Matrix fragments for mma.m16n8k16"): with g = lane / 4 and c = lane % 4, an A fragment
//     holds rows g and g + 8, columns 2c, 2c + 1 (+ 8); a B fragment columns (n) g, rows (k) 2c, 2c
//     + 1
//     (+ 8); an accumulator rows g, g + 8, columns 2c, 2c + 1.
#pragma once

#include <cstdint>

#include "compute/cuda/cuda-common.cuh"

namespace spillway::cuda::attn {

// Which keys query t of row b sees: first(b, t) .. t, where `first` is the window's edge
// (t − span + 1) or, in packed rows, the first token of t's example (t − pos[b, t]; see
// compute::Positions), whichever is later. `first` never decreases along a row, which lets the
// kernels skip whole tiles: a query tile's first key is its first row's, and a key tile's last
// query tile is the last whose first row still sees the tile's last key. Rows past the sequence
// (tile padding) get the last row's example.
struct KeyRange {
  int span;            // the window clamped to [1, seq] (seq: none)
  int seq;             // tokens per row
  const int32_t* pos;  // [b, seq] positions of packed rows in device memory, or null

  __device__ __forceinline__ int first(int b, int t) const {
    const int w = t - span + 1;
    if (pos == nullptr) return w;
    const int u = min(t, seq - 1);
    return max(w, u - pos[static_cast<size_t>(b) * seq + u]);
  }
  // Token t's position within its example (t < seq): what RoPE rotated it by.
  __device__ __forceinline__ int position(int b, int t) const {
    return pos == nullptr ? t : pos[static_cast<size_t>(b) * seq + t];
  }
};

// ---------------------------------------------------------------------------------------------
// warp reductions: the butterfly gives every lane the same value, in the same order on every call

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

__device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KiB.
template <class Kernel>
Status allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)));
  }
  return Status::ok_status();
}

// ---------------------------------------------------------------------------------------------
// generic fp32 tiles

inline constexpr int kGenRows = 32;  // rows of a tile (queries or keys); lanes of a warp
inline constexpr int kGenWarps = 8;
inline constexpr int kGenThreads = 32 * kGenWarps;
inline constexpr int kGenRowsPerWarp = kGenRows / kGenWarps;  // 4

// Row stride (floats) of a staged tile: 4·(odd number), so 32 lanes reading float4s of 32 rows
// hit every bank once; columns [d, generic_ld(d) − 4) are zero so dot products run over whole
// float4s.
__host__ __device__ inline int generic_ld(int d) {
  return (d + 7) / 8 * 8 + 4;
}

// s[kGenRows][ld] ← rows [0, rows) of x (row r at x + r·stride, d elements), zero elsewhere.
__device__ inline void stage_rows_f32(float* s, int ld, const bf16* x, size_t stride, int rows,
                                      int d) {
  const int width = ld - 4;
  for (int i = threadIdx.x; i < kGenRows * width; i += blockDim.x) {
    const int r = i / width, c = i - r * width;
    s[r * ld + c] = (r < rows && c < d) ? __bfloat162float(x[r * stride + c]) : 0.0f;
  }
}

// out[r] = a_r · b for the 4 rows a_r = a + r·ld (the same for every lane: broadcast reads) and
// one row b per lane, over `width` floats (a multiple of 4; float4-aligned rows).
__device__ __forceinline__ void dot_4rows(float (&out)[kGenRowsPerWarp], const float* a, int ld,
                                          const float* b, int width) {
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) out[r] = 0.0f;
  for (int c = 0; c < width; c += 4) {
    const float4 y = *reinterpret_cast<const float4*>(b + c);
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r) {
      const float4 x = *reinterpret_cast<const float4*>(a + r * ld + c);
      out[r] = fmaf(x.x, y.x, out[r]);
      out[r] = fmaf(x.y, y.y, out[r]);
      out[r] = fmaf(x.z, y.z, out[r]);
      out[r] = fmaf(x.w, y.w, out[r]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// tensor-core primitives

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, asynchronous; zero-fills the destination when !valid (src must still
// be a mapped address: callers pass a row of the same tensor).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's committed groups are pending (a __syncthreads must
// follow before other threads' copies are read).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8 × 8 b16 matrices; lanes 8i .. 8i + 7 give the row addresses of matrix i, and register i
// receives matrix i (thread t: row t / 4, columns 2·(t % 4), +1). Volatile with a memory clobber:
// the same address is read again after the tile changes, so the load must not be cached or moved
// across barriers.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// As ldmatrix_x4, each matrix transposed (thread t: rows 2·(t % 4), +1 of column t / 4).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += a · b: A 16 × 16 (row-major fragment), B 16 × 8 (column fragment b0, b1), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats → bf16x2 (round to nearest even), `lo` in the low half: the element of the lower
// column.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x with the special-function unit (relative error ~2^-22; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// An accumulator pair (c[0], c[1]) and (c[2], c[3]) of two adjacent 16 × 8 tiles → the A fragment
// of the 16 × 16 tile they form (the C layout of m16n8 equals the A layout of m16n8k16 per half).
__device__ __forceinline__ void accum_to_a(uint32_t (&a)[4], const float (&lo)[4],
                                           const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// ---------------------------------------------------------------------------------------------
// flash tiles: 64 rows of one head in shared memory as bf16, row stride D + 8 (the 8 rows an
// ldmatrix reads fall in 8 different 16-byte bank groups); a warp works on 16 rows of one tile
// (the A operand) against rows of another (the B operand).

inline constexpr int kFlashTile = 64;

template <int D>
constexpr int kFlashTileElems = kFlashTile*(D + 8);

// Lane offsets (bytes) into a tile for the three ldmatrix patterns:
//   A:  the lane's row of a 16-row slab (rows lane % 16, columns 8·(lane / 16)) → a 16 × 16 A
//   fragment; B:  rows n of a tile as the n index of two 8-column B fragments (x4: b0, b1 of
//   n-block 2j, then 2j + 1); Bt: rows k of a tile read transposed as the k index of B (x4: b0, b1
//   of column block 2j, then 2j + 1).
template <int D>
__device__ __forceinline__ uint32_t lane_off_a(int lane) {
  return (((lane & 15) * (D + 8)) + (lane >> 4) * 8) * 2;
}
template <int D>
__device__ __forceinline__ uint32_t lane_off_b(int lane) {
  return ((((lane >> 4) * 8 + (lane & 7)) * (D + 8)) + ((lane >> 3) & 1) * 8) * 2;
}
template <int D>
__device__ __forceinline__ uint32_t lane_off_bt(int lane) {
  return (((((lane >> 3) & 1) * 8 + (lane & 7)) * (D + 8)) + (lane >> 4) * 8) * 2;
}

// s[64][D + 8] ← rows [0, rows) of a tile (row r at src + r·stride, D bf16), asynchronously (one
// cp.async group per call site's commit) by a block of Threads threads; rows >= rows are
// zero-filled. rows >= 1.
template <int D, int Threads>
__device__ __forceinline__ void flash_load_tile(bf16* s, const bf16* src, size_t stride, int rows) {
  constexpr int kChunks = D / 8;  // 16-byte pieces of a row
  static_assert(kFlashTile * kChunks % Threads == 0);
  constexpr int kPerThread = kFlashTile * kChunks / Threads;
  const uint32_t base = smem_u32(s);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int idx = threadIdx.x + i * Threads;
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = r < rows;
    cp_async_16(base + (r * (D + 8) + c * 8) * 2, src + (valid ? r : 0) * stride + c * 8, valid);
  }
}

// acc[N/8][4] += A · Bᵀ over k = D. A: the warp's 16 × D slab (lane address a_addr, see
// lane_off_a); B: N rows × D of a tile (lane address b_addr, see lane_off_b).
template <int D, int N>
__device__ __forceinline__ void mma_abt(float (&acc)[N / 8][4], uint32_t a_addr, uint32_t b_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a, a_addr + kk * 32);
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, b_addr + (np * 16 * (D + 8) + kk * 16) * 2);
      mma_bf16(acc[2 * np], a, b[0], b[1]);
      mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc[D/8][4] += P · B over k = K. P: 16 × K in accumulator layout (rounded to bf16 here);
// B: K rows × D of a tile read transposed (lane address t_addr, see lane_off_bt).
template <int D, int K>
__device__ __forceinline__ void mma_pb(float (&acc)[D / 8][4], const float (&p)[K / 8][4],
                                       uint32_t t_addr) {
#pragma unroll
  for (int t = 0; t < K / 16; ++t) {
    uint32_t a[4];
    accum_to_a(a, p[2 * t], p[2 * t + 1]);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, t_addr + (t * 16 * (D + 8) + dp * 16) * 2);
      mma_bf16(acc[2 * dp], a, b[0], b[1]);
      mma_bf16(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

}  // namespace spillway::cuda::attn
