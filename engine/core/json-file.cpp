#include "core/json-file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/file-util.h"
#include "core/json-depth.h"

namespace spillway {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

std::string cut_note(size_t bytes) {
  return "... (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

std::string quote_for_message(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  size_t shown = 0;
  for (size_t i = 0; i < s.size();) {
    if (shown >= max_chars) return out + "\"" + cut_note(s.size());
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    char esc[8];
    if (n == 0) {
      std::snprintf(esc, sizeof esc, "\\x%02X", c);
      out += esc;
      ++i;
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(esc, sizeof esc, "\\u%04X", c);
      out += esc;
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
    ++shown;
  }
  return out + "\"";
}

std::string quote_name(std::string_view s) {
  const bool plain =
      !s.empty() && s.size() <= kQuoteChars && std::all_of(s.begin(), s.end(), [](char c) {
        return c >= 0x20 && c < 0x7F && c != '\'' && c != '"' && c != '\\';
      });
  return plain ? "'" + std::string(s) + "'" : quote_for_message(s);
}

std::string describe_json(const nlohmann::json& v, size_t max_chars) {
  if (v.is_string()) return quote_for_message(v.get_ref<const std::string&>(), max_chars);
  std::string text;
  try {
    // A value nested deeper than the parser admits cannot reach here (parse_json refuses it).
    text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (...) {
    return "(a value that cannot be shown)";
  }
  if (text.size() <= max_chars) return text;
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;  // a whole character
  return text.substr(0, cut) + cut_note(text.size());
}

std::string json_kind(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "the string " + describe_json(v);
    case nlohmann::json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return describe_json(v);
    default:
      return "a value of another kind";
  }
}

Result<nlohmann::json> parse_json(std::string_view text, const std::string& what, ErrorCode code,
                                  JsonSyntaxError* syntax) {
  Status depth = check_json_depth(text, what);
  if (!depth.ok())
    return Status(
        code, depth.message() + "; a real file nests fewer than 10 levels: is it the right file?");
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte: 1-based offset of the last character read, where the parser stopped.
    const size_t at = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    const size_t column = at - line_start + 1;
    // nlohmann's reason without its prefix ("[json.exception.parse_error.101] parse error at line
    // 1, column 9: ") and without the token it read last, which may be a whole megabyte string.
    std::string reason = e.what();
    if (size_t p = reason.find(": ");
        p != std::string::npos && reason.rfind("[json.exception", 0) == 0)
      reason.erase(0, p + 2);
    if (size_t p = reason.find("; last read: '"); p != std::string::npos) {
      size_t end = reason.find("'; expected", p);
      reason.erase(p, end == std::string::npos ? std::string::npos : end + 1 - p);
    }
    if (reason.size() > 200) reason = reason.substr(0, 200) + "...";
    std::string where = what;
    if (e.byte > 0) where += ":" + std::to_string(line) + ":" + std::to_string(column);
    std::string near;
    if (at < text.size()) {
      near = ", at " + quote_for_message(text.substr(at, 40), 24);
    } else if (!text.empty()) {
      near = ", at the end of the text (is it cut short?)";
    }
    if (syntax) *syntax = {line, column, reason + near};
    const std::string fix = text.empty()
                                ? "the file is empty; it should hold a JSON document"
                                : "fix the JSON there (python3 -m json.tool shows the place)";
    return Status(code, where + ": not valid JSON: " + reason + near + "; " + fix);
  } catch (const std::exception& e) {
    return Status(code, what + ": not valid JSON: " + std::string(e.what()).substr(0, 200));
  }
}

Result<nlohmann::json> read_json_file(const std::string& path, ErrorCode code) {
  SPW_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_json(text, path, code);
}

// ---- JsonField

namespace {
const nlohmann::json& null_json() {
  static const nlohmann::json kNull;
  return kNull;
}
}  // namespace

JsonField::JsonField(const nlohmann::json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

JsonField JsonField::operator[](std::string_view key) const {
  std::string path = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  JsonField f(null_json(), file_, std::move(path));
  f.value_ = nullptr;
  if (value_ && value_->is_object()) {
    auto it = value_->find(key);
    if (it != value_->end()) f.value_ = &*it;
  }
  return f;
}

JsonField JsonField::operator[](size_t index) const {
  JsonField f(null_json(), file_, path_ + "[" + std::to_string(index) + "]");
  f.value_ = value_ && value_->is_array() && index < value_->size() ? &(*value_)[index] : nullptr;
  return f;
}

const nlohmann::json& JsonField::json() const {
  return value_ ? *value_ : null_json();
}

std::string JsonField::where() const {
  return path_.empty() ? file_ : file_ + ": " + path_;
}

Status JsonField::error(const std::string& expected, const std::string& fix) const {
  std::string m = where() + ": expected " + expected + ", " +
                  (value_ ? "got " + json_kind(*value_) : std::string("but it is missing"));
  if (!fix.empty()) m += "; " + fix;
  return invalid_argument(m);
}

Result<int64_t> JsonField::integer(int64_t lo, int64_t hi) const {
  const std::string range =
      lo == INT64_MIN && hi == INT64_MAX ? "a whole number"
      : hi == INT64_MAX                  ? "a whole number of at least " + std::to_string(lo)
                        : "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (!value_ || !value_->is_number()) return error(range);
  int64_t v = 0;
  if (value_->is_number_unsigned()) {
    const uint64_t u = value_->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return error(range);
    v = static_cast<int64_t>(u);
  } else if (value_->is_number_integer()) {
    v = value_->get<int64_t>();
  } else {
    const double d = value_->get<double>();
    // 2^63 is the first double past int64; a fraction is never truncated (5.9 layers is not 5).
    if (!std::isfinite(d) || d != std::floor(d) || d < -9.2233720368547758e18 ||
        d >= 9.2233720368547758e18)
      return error(range);
    v = static_cast<int64_t>(d);
  }
  if (v < lo || v > hi) return error(range);
  return v;
}

Result<double> JsonField::number() const {
  if (!value_ || !value_->is_number()) return error("a number");
  const double d = value_->get<double>();
  if (!std::isfinite(d)) return error("a finite number");
  return d;
}

Result<bool> JsonField::boolean() const {
  if (!value_ || !value_->is_boolean()) return error("true or false");
  return value_->get<bool>();
}

Result<std::string> JsonField::string() const {
  if (!value_ || !value_->is_string()) return error("a string");
  return value_->get<std::string>();
}

Result<int64_t> JsonField::integer_or(int64_t fallback, int64_t lo, int64_t hi) const {
  if (missing()) return fallback;
  return integer(lo, hi);
}

Result<double> JsonField::number_or(double fallback) const {
  if (missing()) return fallback;
  return number();
}

Result<bool> JsonField::boolean_or(bool fallback) const {
  if (missing()) return fallback;
  return boolean();
}

Result<std::string> JsonField::string_or(std::string fallback) const {
  if (missing()) return fallback;
  return string();
}

}  // namespace spillway
