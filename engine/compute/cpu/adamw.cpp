#include "compute/cpu/adamw.h"

namespace spillway::compute::cpu {

// The vector body: fixed-size tiles the compiler turns into SIMD without aliasing worries, compiled
// for AVX2 and for the baseline and picked at load time (GCC target_clones by ISA level, as
// SPW_MULTIVERSION in compute/cpu/vec-math.h). Two flags of this file make that possible and exact
// (engine/compute/CMakeLists.txt): -fno-math-errno, without which sqrt is a scalar call that may
// set errno and the loop stays scalar (3x slower on 256M parameters with 2 threads, 7x in cache),
// and -ffp-contract=off, so that no clone fuses a·b + c: every clone and the scalar tail round
// alike, and the result is the same bits on every x86-64 CPU and on the GPU (cuda/adamw.cu).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void adamw_tiles(float* __restrict p, float* __restrict m, float* __restrict v,
                 const float* __restrict g, size_t tiles, float grad_scale, const AdamWCoeffs& k) {
  for (size_t t = 0; t < tiles; ++t) {
    float* pt = p + t * kAdamWTile;
    float* mt = m + t * kAdamWTile;
    float* vt = v + t * kAdamWTile;
    const float* gt = g + t * kAdamWTile;
#pragma GCC ivdep
    for (size_t i = 0; i < kAdamWTile; ++i)
      adamw_element(pt[i], mt[i], vt[i], gt[i], grad_scale, k);
  }
}

void adamw(float* p, float* m, float* v, const float* g, size_t count, float grad_scale,
           const AdamWCoeffs& k) {
  const size_t tiles = count / kAdamWTile;
  adamw_tiles(p, m, v, g, tiles, grad_scale, k);
  for (size_t i = tiles * kAdamWTile; i < count; ++i)
    adamw_element(p[i], m[i], v[i], g[i], grad_scale, k);
}

}  // namespace spillway::compute::cpu
