#include "data/model-tokenizer.h"

#include <filesystem>

#include "data/byte-tokenizer.h"

namespace spillway {
namespace fs = std::filesystem;

Result<std::unique_ptr<Tokenizer>> load_model_tokenizer(const std::string& path) {
  std::error_code ec;
  if (path == kBuiltinBytesTokenizer || fs::exists(fs::path(path) / kBuiltinTokenizerMarker, ec))
    return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  return Tokenizer::load(path);
}

bool has_tokenizer_files(const std::string& path) {
  std::error_code ec;
  if (path == kBuiltinBytesTokenizer) return true;
  // exists, not is_regular_file: a tokenizer file that is a FIFO or a device is there, and loading
  // it says what is wrong with it.
  if (!fs::is_directory(path, ec)) return fs::exists(path, ec);
  for (const char* name : {"tokenizer.json", "tokenizer.model", kBuiltinTokenizerMarker})
    if (fs::exists(fs::path(path) / name, ec)) return true;
  return false;
}

}  // namespace spillway
