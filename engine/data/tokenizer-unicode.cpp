#include "data/tokenizer-unicode.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <vector>

#ifdef SPILLWAY_HAVE_ICU
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

namespace spillway::tokenizer_unicode {

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode 15, table 3-7), or 0 with `bad` set
// to the length of the maximal invalid subpart (at least 1).
size_t well_formed_len(std::string_view s, size_t i, size_t& bad) {
  const auto at = [&](size_t k) -> unsigned { return static_cast<unsigned char>(s[k]); };
  const unsigned b0 = at(i);
  bad = 1;
  if (b0 < 0x80) return 1;
  unsigned lo = 0x80, hi = 0xBF;
  size_t n;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) {
      bad = k;
      return 0;
    }
    const unsigned b = at(i + k);
    const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      bad = k;
      return 0;
    }
  }
  return n;
}

// A compiled one-character class test through PCRE2, so the class tables are the regex engine's
// own (the same Unicode version as the pre-tokenizer patterns).
class CharClass {
 public:
  explicit CharClass(const char* pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr);
  }
  ~CharClass() { pcre2_code_free(code_); }
  bool test(char32_t cp) const {
    if (!code_) return false;
    std::string s;
    utf8_append(s, cp);
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    const int rc =
        pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr);
    pcre2_match_data_free(md);
    return rc > 0;
  }

 private:
  pcre2_code* code_ = nullptr;
};

}  // namespace

char32_t utf8_next(std::string_view s, size_t& i) {
  size_t bad = 0;
  const size_t n = well_formed_len(s, i, bad);
  if (n == 0) {
    i += 1;
    return 0xFFFD;
  }
  const auto b = [&](size_t k) -> char32_t { return static_cast<unsigned char>(s[i + k]); };
  char32_t cp;
  switch (n) {
    case 1:
      cp = b(0);
      break;
    case 2:
      cp = ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
      break;
    case 3:
      cp = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
      break;
    default:
      cp = ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
  i += n;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool utf8_valid(std::string_view s) {
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = well_formed_len(s, i, bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_repair(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    const size_t n = well_formed_len(s, i, bad);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += bad;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

const std::array<std::string, 256>& byte_to_utf8() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      utf8_append(t[b], printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++));
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t cp) {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    const auto& t = byte_to_utf8();
    for (int b = 0; b < 256; ++b) {
      size_t i = 0;
      inv[utf8_next(t[b], i)] = b;
    }
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

bool have_icu() {
#ifdef SPILLWAY_HAVE_ICU
  return true;
#else
  return false;
#endif
}

bool normalize(NormalForm form, std::string_view s, std::string& out) {
#ifdef SPILLWAY_HAVE_ICU
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNfc:
      n = unorm2_getNFCInstance(&st);
      break;
    case NormalForm::kNfd:
      n = unorm2_getNFDInstance(&st);
      break;
    case NormalForm::kNfkc:
      n = unorm2_getNFKCInstance(&st);
      break;
    case NormalForm::kNfkd:
      n = unorm2_getNFKDInstance(&st);
      break;
  }
  if (U_FAILURE(st) || !n) {
    out.assign(s);
    return false;
  }
  // Fast path: ASCII is invariant under every form.
  bool ascii = true;
  for (char c : s) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) {
    out.assign(s);
    return true;
  }
  // UTF-8 -> UTF-16 -> normalize -> UTF-8.
  std::u16string in16(s.size() + 1, u'\0');
  int32_t len16 = 0;
  st = U_ZERO_ERROR;
  u_strFromUTF8WithSub(in16.data(), static_cast<int32_t>(in16.size()), &len16, s.data(),
                       static_cast<int32_t>(s.size()), 0xFFFD, nullptr, &st);
  if (U_FAILURE(st)) {
    out.assign(s);
    return false;
  }
  if (unorm2_isNormalized(n, in16.data(), len16, &st) && U_SUCCESS(st)) {
    out.assign(s);
    return true;
  }
  st = U_ZERO_ERROR;
  std::u16string norm(static_cast<size_t>(len16) * 4 + 16, u'\0');
  int32_t nlen =
      unorm2_normalize(n, in16.data(), len16, norm.data(), static_cast<int32_t>(norm.size()), &st);
  if (st == U_BUFFER_OVERFLOW_ERROR) {
    norm.assign(static_cast<size_t>(nlen) + 1, u'\0');
    st = U_ZERO_ERROR;
    nlen = unorm2_normalize(n, in16.data(), len16, norm.data(), static_cast<int32_t>(norm.size()),
                            &st);
  }
  if (U_FAILURE(st)) {
    out.assign(s);
    return false;
  }
  out.assign(static_cast<size_t>(nlen) * 3 + 4, '\0');
  int32_t len8 = 0;
  st = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &len8, norm.data(), nlen, &st);
  out.resize(U_SUCCESS(st) ? static_cast<size_t>(len8) : 0);
  if (U_FAILURE(st)) out.assign(s);
  return U_SUCCESS(st);
#else
  (void)form;
  out.assign(s);
  return false;
#endif
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = utf8_next(s, i);
#ifdef SPILLWAY_HAVE_ICU
    cp = static_cast<char32_t>(u_tolower(static_cast<UChar32>(cp)));
#else
    if (cp >= 'A' && cp <= 'Z') cp += 'a' - 'A';
#endif
    utf8_append(out, cp);
  }
  return out;
}

bool is_alphanumeric(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
  static const CharClass cls("[\\p{Alphabetic}\\p{N}]");
  return cls.test(cp);
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  static const CharClass cls("\\p{White_Space}");
  return cls.test(cp);
}

}  // namespace spillway::tokenizer_unicode
