#include "core/crc32c.h"

#include <array>
#include <cstring>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define SPW_CRC32C_X86 1
#endif

namespace spillway {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected 0x1EDC6F41

// tables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8, Intel's 2006 paper).
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

#ifdef SPW_CRC32C_X86
// Operators that advance a CRC over `len` zero bytes, as four byte-indexed tables (Mark Adler's
// crc32c.c, zlib's crc32_combine): shift(crc) == the CRC register after `len` more zero bytes.
// They let three independent streams be merged, see crc32c_sse42.
uint32_t gf2_matrix_times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec; vec >>= 1, ++mat) {
    if (vec & 1) sum ^= *mat;
  }
  return sum;
}

void gf2_matrix_square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = gf2_matrix_times(mat, mat[n]);
}

// `len` must be a power of two.
std::array<std::array<uint32_t, 256>, 4> zeros_tables(size_t len) {
  uint32_t even[32], odd[32];
  odd[0] = kPoly;  // the operator for one zero bit
  for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
  gf2_matrix_square(even, odd);  // two zero bits
  gf2_matrix_square(odd, even);  // four zero bits
  const uint32_t* op = nullptr;
  for (;;) {  // each square doubles: the first gives one zero byte
    gf2_matrix_square(even, odd);
    len >>= 1;
    if (len == 0) {
      op = even;
      break;
    }
    gf2_matrix_square(odd, even);
    len >>= 1;
    if (len == 0) {
      op = odd;
      break;
    }
  }
  std::array<std::array<uint32_t, 256>, 4> z{};
  for (uint32_t n = 0; n < 256; ++n) {
    for (int k = 0; k < 4; ++k) z[k][n] = gf2_matrix_times(op, n << (8 * k));
  }
  return z;
}

inline uint32_t shift(const std::array<std::array<uint32_t, 256>, 4>& z, uint32_t crc) {
  return z[0][crc & 0xFF] ^ z[1][(crc >> 8) & 0xFF] ^ z[2][(crc >> 16) & 0xFF] ^ z[3][crc >> 24];
}

constexpr size_t kLong = 8192, kShort = 256;

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The crc32 instruction has a 3-cycle latency and a throughput of one per cycle, so three
// independent streams over adjacent stretches run about three times faster than one chain; the
// stretches' CRCs are then merged with the zero-shift tables.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const uint8_t* p, size_t n) {
  static const auto long_zeros = zeros_tables(kLong);
  static const auto short_zeros = zeros_tables(kShort);
  uint64_t c0 = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c0 = _mm_crc32_u8(static_cast<uint32_t>(c0), *p++);
    --n;
  }
  for (const auto& [stretch, zeros] :
       {std::pair{kLong, &long_zeros}, std::pair{kShort, &short_zeros}}) {
    while (n >= 3 * stretch) {
      uint64_t c1 = 0, c2 = 0;
      const uint8_t* end = p + stretch;
      do {
        c0 = _mm_crc32_u64(c0, load64(p));
        c1 = _mm_crc32_u64(c1, load64(p + stretch));
        c2 = _mm_crc32_u64(c2, load64(p + 2 * stretch));
        p += 8;
      } while (p < end);
      c0 = shift(*zeros, static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
      c0 = shift(*zeros, static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c2);
      p += 2 * stretch;
      n -= 3 * stretch;
    }
  }
  while (n >= 8) {
    c0 = _mm_crc32_u64(c0, load64(p));
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c0 = _mm_crc32_u8(static_cast<uint32_t>(c0), *p++);
  return ~static_cast<uint32_t>(c0);
}

bool have_sse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  const auto& t = tables().t;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo;
    uint32_t hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian hosts only (x86-64, aarch64)
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

bool crc32c_is_hardware() {
#ifdef SPW_CRC32C_X86
  return have_sse42();
#else
  return false;
#endif
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
#ifdef SPW_CRC32C_X86
  if (have_sse42()) return crc32c_sse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return crc32c_extend_portable(crc, data, n);
}

}  // namespace spillway
