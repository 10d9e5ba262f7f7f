#include "data/text-check.h"

namespace spillway {
namespace {

constexpr const char* kDatasetIs = "A dataset is UTF-8 text: plain text, JSON or JSON lines.";

}  // namespace

size_t utf8_prefix(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation: look further back for its lead byte
    const size_t length = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    return length > back ? n - back : n;
  }
  return n;
}

std::string not_text_reason(std::string_view head, const std::string& name) {
  struct Signature {
    std::string_view magic;
    const char* what;
  };
  static constexpr Signature kSignatures[] = {
      {std::string_view("\x1F\x8B", 2), "a gzip file"},
      {std::string_view("PK\x03\x04", 4), "a zip file"},
      {std::string_view("\x28\xB5\x2F\xFD", 4), "a zstd file"},
      {std::string_view("\xFD"
                        "7zXZ\x00",
                        6),
       "an xz file"},
      {std::string_view("PAR1", 4), "a Parquet file"},
      {std::string_view("ARROW1", 6), "an Arrow file"},
  };
  for (const Signature& s : kSignatures) {
    if (head.substr(0, s.magic.size()) == s.magic)
      return name + " is " + s.what + ", not text. " + kDatasetIs;
  }
  if (head.substr(0, 2) == "\xFF\xFE" || head.substr(0, 2) == "\xFE\xFF")
    return name + " is UTF-16 text: save it as UTF-8. " + kDatasetIs;
  if (const size_t nul = head.find('\0'); nul != std::string_view::npos)
    return name + " is not a text file: byte " + std::to_string(nul) +
           " is NUL (a binary file, or text in UTF-16). " + kDatasetIs;
  size_t bad = 0;
  const size_t n = utf8_prefix(head);
  for (size_t i = 0; i < n;) {
    const auto c = static_cast<unsigned char>(head[i]);
    if (c < 0x80) {
      const bool control = (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' &&
                            c != '\v' && c != 0x1B) ||
                           c == 0x7F;
      bad += control;
      ++i;
      continue;
    }
    const size_t length = (c & 0xE0) == 0xC0 && c >= 0xC2   ? 2
                          : (c & 0xF0) == 0xE0              ? 3
                          : (c & 0xF8) == 0xF0 && c <= 0xF4 ? 4
                                                            : 0;
    bool valid = length > 0 && i + length <= n;
    for (size_t k = 1; valid && k < length; ++k)
      valid = (static_cast<unsigned char>(head[i + k]) & 0xC0) == 0x80;
    if (valid) {
      i += length;
    } else {
      ++bad;
      ++i;
    }
  }
  if (n > 0 && bad * 10 > n)
    return name + " is not a text file: " + std::to_string(bad * 100 / n) + "% of its first " +
           std::to_string(n) + " bytes are control characters or invalid UTF-8. " + kDatasetIs;
  return {};
}

}  // namespace spillway
