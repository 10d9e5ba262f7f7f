// Whether the start of a dataset file is UTF-8 text (plain text, JSON or JSON lines), and if not,
// why: a binary file read as text trains on garbage without a word. One check for the worker's
// dataset reader and the GUI's preview.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace spillway {

// How much of a file's start not_text_reason looks at.
inline constexpr size_t kTextCheckBytes = 64 * 1024;

// "" when `head` (the first bytes of the file called `name`) reads as UTF-8 text; else a sentence
// saying what it is: a known binary signature (gzip, zip, zstd, xz, Parquet, Arrow), UTF-16 (a
// byte-order mark), a NUL byte, or more than 10% control characters (other than whitespace and
// ESC) or invalid UTF-8 sequences (a few are noise in real text, such as one Latin-1 byte). A
// UTF-8 sequence cut off at the end of `head` is not counted.
std::string not_text_reason(std::string_view head, const std::string& name);

// The length of `s` without a UTF-8 sequence cut off at its end (where a file read in pieces may
// be cut without splitting a character).
size_t utf8_prefix(std::string_view s);

}  // namespace spillway
