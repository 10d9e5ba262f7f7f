// Branch-free float32 math that the compiler vectorises inside plain loops (internal to cpu/).
//
// expf_fast is Cephes' expf (range reduction x = n·ln2 + r with |r| <= ln2/2, a degree-6
// polynomial, then scaling by 2^n through the exponent bits), written without calls or branches
// so that `#pragma omp simd` loops over it become SIMD code; glibc's expf is a scalar call.
// Relative error below 2e-7 on [-87, 88]; inputs are clamped to that range, so exp(−inf) gives
// about 1e-38 instead of 0 — callers that need an exact 0 (masked positions) write it themselves.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

// SPW_MULTIVERSION compiles a hot function twice, for x86-64-v3 (AVX2 + FMA) and for the
// baseline, and picks one at load time (GCC target_clones), so one binary runs everywhere and
// still uses 8-wide FMAs where they exist. The ISA level, not "arch=haswell": the latter is
// dispatched on the CPU model and so never chosen on later CPUs. Mark whole loop nests, not tiny
// helpers: each call goes through an indirect jump.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define SPW_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SPW_MULTIVERSION
#endif

namespace spillway::compute::cpu {

#pragma omp declare simd
inline float expf_fast(float x) {
  x = std::min(88.0f, std::max(-87.3365447504019f, x));
  // n = round(x·log2 e) by the 1.5·2^23 trick (exact for |n| < 2^22, vectorises without SSE4.1).
  const float shift = 12582912.0f;
  const float fn = (x * 1.44269504088896341f + shift) - shift;
  float r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const int32_t n = static_cast<int32_t>(fn);
  return y * std::bit_cast<float>((n + 127) << 23);
}

// Eight floats as one value (GCC/Clang vector extension): one AVX register in an AVX2 clone, two
// SSE registers in the baseline. Used for register tiles whose shape the compiler must not
// choose; loads and stores are unaligned.
typedef float v8f __attribute__((vector_size(32)));

__attribute__((always_inline)) inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
__attribute__((always_inline)) inline void store8(float* p, v8f v) {
  std::memcpy(p, &v, sizeof(v));
}

}  // namespace spillway::compute::cpu
