// Tokenizer::load: picks the implementation from what `path` is (see tokenizer.h).
#include "data/tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "data/sentencepiece-tokenizer.h"
#include "data/tokenizer-config.h"
#include "data/tokenizer-json.h"

namespace spillway {

namespace {

// Runs `read`, a reader of `file` built on nlohmann::json, and turns the exception its accessors
// throw for a field of the wrong type or a missing one (a flag that is null, a number where a
// string belongs: cases the readers do not check one by one) into a clear error naming the file,
// instead of an uncaught exception that aborts the process.
template <typename Read>
auto json_guard(const std::string& file, Read read) -> decltype(read()) {
  try {
    return read();
  } catch (const nlohmann::json::exception& e) {
    return corrupt(file + ": a field has the wrong type or is missing (" + e.what() +
                   "); is it a Hugging Face tokenizer file?");
  }
}

Result<TokenizerConfig> config_of(const std::string& dir) {
  return json_guard((std::filesystem::path(dir) / "tokenizer_config.json").string(),
                    [&] { return load_tokenizer_config(dir); });
}

Result<std::unique_ptr<Tokenizer>> load_json(const std::string& file, const std::string& dir) {
  SPW_ASSIGN_OR_RETURN(TokenizerConfig cfg, config_of(dir));
  SPW_ASSIGN_OR_RETURN(std::string text, read_file(file));
  SPW_ASSIGN_OR_RETURN(
      auto t, json_guard(file, [&] { return JsonTokenizer::from_json_text(text, file, cfg); }));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<std::unique_ptr<Tokenizer>> load_model(const std::string& file, const std::string& dir) {
  SPW_ASSIGN_OR_RETURN(TokenizerConfig cfg, config_of(dir));
  SPW_ASSIGN_OR_RETURN(auto t, SentencePieceTokenizer::load(file, cfg));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace

const std::map<std::string, std::string>& Tokenizer::special_tokens_map() const {
  static const std::map<std::string, std::string> kNone;
  return kNone;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) return invalid_argument("tokenizer path is empty");
  if (fs::is_directory(path, ec)) {
    const std::string json_file = (fs::path(path) / "tokenizer.json").string();
    const std::string model_file = (fs::path(path) / "tokenizer.model").string();
    // exists, not is_regular_file: a tokenizer.json that is a FIFO is an error (read_file says so),
    // not a reason to train with tokenizer.model instead and fail at export.
    if (fs::exists(json_file, ec)) return load_json(json_file, path);
    if (fs::exists(model_file, ec)) return load_model(model_file, path);
    return not_found(path + ": no tokenizer found (looked for tokenizer.json and tokenizer.model)");
  }
  if (!fs::exists(path, ec)) return not_found(path + ": no such file or folder");
  const fs::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  if (p.extension() == ".json") return load_json(path, dir);
  if (p.extension() == ".model") return load_model(path, dir);
  // Unknown extension: a JSON document starts with '{' (after whitespace), a ModelProto never.
  SPW_ASSIGN_OR_RETURN(std::string head, read_file(path));
  const size_t first = head.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && head[first] == '{') return load_json(path, dir);
  return load_model(path, dir);
}

}  // namespace spillway
