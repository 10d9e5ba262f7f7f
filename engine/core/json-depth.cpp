#include "core/json-depth.h"

#include <algorithm>

namespace spillway {

size_t json_nesting_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Status check_json_depth(std::string_view text, const std::string& what) {
  const size_t depth = json_nesting_depth(text);
  if (depth <= kMaxJsonDepth) return {};
  return invalid_argument(what + ": JSON nested " + std::to_string(depth) +
                          " levels deep (at most " + std::to_string(kMaxJsonDepth) + ")");
}

}  // namespace spillway
