// Unicode helpers for the tokenizers: UTF-8 walking and repair, the GPT-2 byte<->unicode table,
// Unicode normalization forms (NFC, NFD, NFKC, NFKD) and the character classes that Hugging Face
// `tokenizers` uses for added-token boundaries (Rust's char::is_alphanumeric / is_whitespace).
//
// Everything here is a free function over immutable tables built on first use; all functions are
// thread-safe. Strings are UTF-8 in std::string; code points are char32_t.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace spillway::tokenizer_unicode {

// Length in bytes of the UTF-8 sequence that starts with lead byte `b` (1 for a stray
// continuation byte, so a walk over invalid input always advances).
inline size_t utf8_len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) return 2;
  if ((b >> 4) == 0xE) return 3;
  if ((b >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at s[i] and advances i; an invalid sequence yields U+FFFD and advances
// by one byte.
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool utf8_valid(std::string_view s);
// `s` with every ill-formed byte replaced by U+FFFD, as Python's errors="replace" and Rust's
// String::from_utf8_lossy do (one U+FFFD per maximal invalid subpart).
std::string utf8_repair(std::string_view s);

// GPT-2's bytes_to_unicode(): every byte maps to a printable code point (printable Latin-1 bytes
// map to themselves, the rest to U+0100 + n). byte_to_utf8()[b] is that code point in UTF-8.
const std::array<std::string, 256>& byte_to_utf8();
// The inverse: the byte of code point `cp`, or -1 when `cp` is not in the table.
int unicode_to_byte(char32_t cp);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// `s` in the normalization form (ICU's unorm2). Returns false when the build has no ICU, in which
// case `out` is `s` unchanged.
bool normalize(NormalForm form, std::string_view s, std::string& out);
bool have_icu();
// Unicode-aware lowercase (Rust's str::to_lowercase; ASCII only without ICU).
std::string to_lower(std::string_view s);

// Rust char::is_alphanumeric (Alphabetic or Numeric) and char::is_whitespace (White_Space).
bool is_alphanumeric(char32_t cp);
bool is_whitespace(char32_t cp);

}  // namespace spillway::tokenizer_unicode
