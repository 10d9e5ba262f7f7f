// Reading JSON that a user brings: config.json, a safetensors header and
// model.safetensors.index.json, tokenizer.json and tokenizer_config.json, job files, a checkpoint's
// state and data cursor, dataset records, events and runs.db's JSON columns. One way for all of
// them (issue 15):
//   - the text is refused past kMaxJsonDepth levels of nesting before anything walks it
//     recursively (core/json-depth.h);
//   - a syntax error names the file, the line and the column, what the parser expected, and shows
//     the text there, escaped and cut short;
//   - typed access (JsonField) returns a Status naming the file and the key path ("config.json:
//     rope_scaling.factor: expected a finite number, got \"x\"") instead of throwing; an integer
//     field holding 5.9 or 2^40 is an error, never truncated or wrapped;
//   - nothing here throws: nlohmann::json's exceptions are caught inside.
// Every value quoted into a message goes through quote_for_message/describe_json: escaped (no raw
// newline or control byte, valid UTF-8) and cut to a few dozen characters, so that a megabyte
// value is never echoed.
//
// Plain functions and a small value type; thread-safe. A JsonField borrows the json it views,
// which must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace spillway {

// The longest value, in characters of its escaped form, that a message quotes.
inline constexpr size_t kQuoteChars = 60;

// `s` as a JSON string literal for a message: in quotes, control bytes and quotes escaped
// (\n, \", \u001b), bytes of invalid UTF-8 as \xNN; past `max_chars` cut and followed by
// "... (N bytes)".
std::string quote_for_message(std::string_view s, size_t max_chars = kQuoteChars);
// A name the user gave (a format, a role, a template) for a message: 'csv' in single quotes when it
// is a short run of printable ASCII without quotes or backslashes, else quote_for_message(s).
std::string quote_name(std::string_view s);
// A JSON value for a message: a string quoted as above, anything else as compact JSON cut to
// `max_chars` ("[1, 2, 3, ... (5000 bytes)"). Never throws.
std::string describe_json(const nlohmann::json& v, size_t max_chars = kQuoteChars);
// "a string", "a number 5.9", "an object", ... : what a value is, for "expected X, got Y".
std::string json_kind(const nlohmann::json& v);

// Where and why a text is not JSON, for a reader that places the error itself (a dataset record
// inside a file): 1-based line and column within the text, and the reason with the text there
// ("syntax error while parsing value - invalid literal, at \"oops}\"").
struct JsonSyntaxError {
  size_t line = 0, column = 0;
  std::string reason;
};

// Parses `text`, a whole JSON document read from `what` (a path, or "events.jsonl line 12").
// Errors carry `code` (kInvalidArgument by default; kCorrupt for files the program wrote):
//   "WHAT: JSON nested 5000 levels deep (at most 100)"
//   "WHAT:3:19: not valid JSON: syntax error while parsing object - unexpected '}'; expected
//    string literal, at \"}, \\\"b\\\": 2\"; fix the file there (python3 -m json.tool WHAT shows
//    the place)"
// With `syntax`, a syntax error also fills it.
Result<nlohmann::json> parse_json(std::string_view text, const std::string& what,
                                  ErrorCode code = ErrorCode::kInvalidArgument,
                                  JsonSyntaxError* syntax = nullptr);
// read_file(path) (a regular file only: a FIFO is an error, not a hang) and parse_json.
Result<nlohmann::json> read_json_file(const std::string& path,
                                      ErrorCode code = ErrorCode::kInvalidArgument);

// A value inside a parsed document, named by its file and key path, with typed access that
// returns a Status instead of throwing. A missing key gives a field that does not exist(); so does
// any key below a value that is not an object.
class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string file, std::string path = "");

  JsonField operator[](std::string_view key) const;
  JsonField operator[](size_t index) const;

  bool exists() const { return value_ != nullptr; }
  // Absent or JSON null: what an optional key may be.
  bool missing() const { return value_ == nullptr || value_->is_null(); }
  // The value viewed; a null json when the field does not exist.
  const nlohmann::json& json() const;
  // "config.json: rope_scaling.factor" (just the file at the root).
  std::string where() const;
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // A whole number in [lo, hi]: an integer, or a float with no fraction (2.0). 5.9, 1e300, "5",
  // true and null are errors, as is anything outside the range.
  Result<int64_t> integer(int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const;
  // A finite number.
  Result<double> number() const;
  Result<bool> boolean() const;
  Result<std::string> string() const;
  // The optional forms: `fallback` when missing(), else as above.
  Result<int64_t> integer_or(int64_t fallback, int64_t lo = INT64_MIN,
                             int64_t hi = INT64_MAX) const;
  Result<double> number_or(double fallback) const;
  Result<bool> boolean_or(bool fallback) const;
  Result<std::string> string_or(std::string fallback) const;

  // kInvalidArgument "WHERE: expected EXPECTED, got VALUE[; FIX]", the value escaped and cut short
  // ("is missing" when it does not exist). For the checks a caller adds (a range, an enum).
  Status error(const std::string& expected, const std::string& fix = "") const;

 private:
  const nlohmann::json* value_;
  std::string file_, path_;
};

}  // namespace spillway
