// How deeply a JSON text nests, found by a scan of the text alone (no parse, no recursion), so
// that a reader can refuse a pathological document before anything walks it recursively:
// nlohmann::json parses iteratively but dumps and compares recursively, and a job.json nested
// 100,000 levels deep overflowed the stack (issue 15).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace spillway {

// The deepest nesting of '[' and '{' outside strings (string escapes honoured): 0 for a scalar,
// 1 for {"a": 1}. Malformed text gives some count; the parser reports the syntax error.
size_t json_nesting_depth(std::string_view text);

// Real Hugging Face configs, tokenizers, job files and dataset records nest fewer than 10 levels.
inline constexpr size_t kMaxJsonDepth = 100;

// kInvalidArgument "<what>: JSON nested N levels deep (at most 100)" when `text` nests deeper
// than kMaxJsonDepth, else ok.
Status check_json_depth(std::string_view text, const std::string& what);

}  // namespace spillway
