// SHA-256 (FIPS 180-4) of a byte string, as a lowercase hex digest: what Python's
// hashlib.sha256(data).hexdigest() gives. Used where a file format identifies content by its
// SHA-256 (llama.cpp's tokenizer pre-tokenizer check, GGUF export). Pure and thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace spillway {

std::string sha256_hex(std::string_view data);

}  // namespace spillway
