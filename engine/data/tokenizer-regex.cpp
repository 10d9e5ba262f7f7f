#include "data/tokenizer-regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <utility>

#include "data/tokenizer-unicode.h"

namespace spillway {

TokenizerRegex::~TokenizerRegex() {
  pcre2_code_free(code_);
}

TokenizerRegex::TokenizerRegex(TokenizerRegex&& o) noexcept
    : code_(std::exchange(o.code_, nullptr)), jit_(o.jit_), pattern_(std::move(o.pattern_)) {}

TokenizerRegex& TokenizerRegex::operator=(TokenizerRegex&& o) noexcept {
  if (this != &o) {
    pcre2_code_free(code_);
    code_ = std::exchange(o.code_, nullptr);
    jit_ = o.jit_;
    pattern_ = std::move(o.pattern_);
  }
  return *this;
}

Result<TokenizerRegex> TokenizerRegex::compile(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return invalid_argument("regex '" + pattern + "' does not compile at offset " +
                            std::to_string(offset) + ": " + reinterpret_cast<const char*>(msg));
  }
  TokenizerRegex re;
  re.code_ = code;
  re.pattern_ = pattern;
  re.jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

Result<TokenizerRegex> TokenizerRegex::literal(std::string_view text) {
  // \Q...\E quotes everything but a literal "\E", which is split out and escaped.
  std::string p;
  size_t pos = 0;
  while (true) {
    const size_t e = text.find("\\E", pos);
    p += "\\Q";
    p.append(text.substr(pos, e == std::string_view::npos ? std::string_view::npos : e - pos));
    p += "\\E";
    if (e == std::string_view::npos) break;
    p += "\\\\E";
    pos = e + 2;
  }
  return compile(p);
}

namespace {

// `s` cut to `max` bytes (at a character boundary) with control characters escaped, for messages.
std::string shown(std::string_view s, size_t max) {
  std::string out;
  size_t i = 0;
  while (i < s.size() && out.size() < max) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = std::min(tokenizer_unicode::utf8_len(c), s.size() - i);
    if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += c == '\n' ? std::string("\\n") : std::string("\\x") + hex[c >> 4] + hex[c & 15];
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  if (i < s.size()) out += "...";
  return out;
}

}  // namespace

Status TokenizerRegex::find_all(std::string_view text,
                                const std::function<void(size_t, size_t)>& on_match) const {
  if (!code_) return internal_error("tokenizer regex used before it was compiled");
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* mctx = nullptr;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  int failure = 0;
  while (pos <= text.size()) {
    // The subject was validated by the caller; skipping the check keeps matching linear.
    int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), pos, 0, md, mctx)
                  : pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && jit_ && !stack) {
      stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
      mctx = pcre2_match_context_create(nullptr);
      pcre2_jit_stack_assign(mctx, nullptr, stack);
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      failure = rc;
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0], e = ov[1];
    if (e == s) {
      // Empty match: not a piece; step over one character.
      if (s >= text.size()) break;
      pos = s + tokenizer_unicode::utf8_len(static_cast<unsigned char>(text[s]));
      continue;
    }
    on_match(s, e);
    pos = e;
  }
  pcre2_match_data_free(md);
  if (mctx) pcre2_match_context_free(mctx);
  if (stack) pcre2_jit_stack_free(stack);
  if (failure == 0) return {};
  PCRE2_UCHAR msg[256];
  pcre2_get_error_message(failure, msg, sizeof(msg));
  return invalid_argument(
      "tokenizer regex '" + shown(pattern_, 80) + "' gave up on a piece of " +
      std::to_string(text.size()) + " bytes at byte " + std::to_string(pos) + " ('" +
      shown(text.substr(pos), 40) + "'): PCRE2: " + reinterpret_cast<const char*>(msg) +
      "; the pattern backtracks too much on this text, so it cannot be split as the "
      "tokenizer was trained (shorten such runs in the data or fix the pattern)");
}

}  // namespace spillway
