// Element types of tensors on disk and in memory, with the float16/bfloat16 conversions.
//
// Conversions are exact for the widening direction (f16/bf16 -> f32) and round to nearest even
// for the narrowing one (f32 -> bf16, as torch's .to(torch.bfloat16); f32 -> f16 as IEEE 754).
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace spillway {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8 };

// Bytes per element.
size_t dtype_size(DType t);
// The safetensors spelling: "F32", "F16", "BF16", "I32", "I64", "U8".
const char* dtype_name(DType t);
// Parses the safetensors spelling; nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu)) return 0x7fc0;  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts `n` elements of `src` (of type `from`) into float32 `dst`. kI32/kI64/kU8 convert by
// value. `src` needs no alignment (tensors mmap'd from a safetensors file start wherever its header
// ends).
void convert_to_f32(const void* src, DType from, float* dst, size_t n);
// Converts `n` float32 elements into `dst` of type `to` (kF32, kF16 or kBF16).
void convert_from_f32(const float* src, DType to, void* dst, size_t n);

}  // namespace spillway
