#include "train/export.h"

#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "data/byte-tokenizer.h"

namespace spillway {
namespace fs = std::filesystem;

Result<std::unique_ptr<Tokenizer>> load_model_tokenizer(const std::string& model_dir) {
  std::error_code ec;
  if (fs::exists(fs::path(model_dir) / kBuiltinTokenizerMarker, ec)) return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  return Tokenizer::load(model_dir);
}

Status export_model(const ModelState& state, const std::string& tokenizer_source, const std::string& out) {
  std::error_code ec;
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return io_error("cannot create " + tmp + ": " + ec.message());
  auto fail = [&](Status st) {
    std::error_code ignore;
    fs::remove_all(tmp, ignore);
    return st.with_context("export to " + out);
  };
  Status st = state.save_weights(tmp);
  if (!st.ok()) return fail(st);
  nlohmann::json config = state.config().to_json();
  config["transformers_version"] = "4.40.0";
  st = write_file_atomic((fs::path(tmp) / "config.json").string(), config.dump(2) + "\n");
  if (!st.ok()) return fail(st);
  if (tokenizer_source == "builtin:bytes") {
    // No tokenizer file exists for the built-in byte tokenizer; this marker lets eval/generate find it.
    st = write_file_atomic((fs::path(tmp) / kBuiltinTokenizerMarker).string(), "{\"tokenizer\": \"builtin:bytes\"}\n");
    if (!st.ok()) return fail(st);
  } else if (!tokenizer_source.empty()) {
    std::vector<fs::path> files;
    if (fs::is_directory(tokenizer_source, ec)) {
      for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                               "generation_config.json", "chat_template.jinja"}) {
        fs::path p = fs::path(tokenizer_source) / name;
        if (fs::exists(p, ec)) files.push_back(p);
      }
    } else if (fs::exists(tokenizer_source, ec)) {
      files.push_back(tokenizer_source);
    }
    for (const auto& f : files) {
      fs::copy_file(f, fs::path(tmp) / f.filename(), fs::copy_options::overwrite_existing, ec);
      if (ec) return fail(io_error("cannot copy " + f.string() + ": " + ec.message()));
    }
  }
  fs::remove_all(out, ec);
  fs::rename(tmp, out, ec);
  if (ec) return fail(io_error("cannot rename " + tmp + " to " + out + ": " + ec.message()));
  return fsync_directory(fs::path(out).parent_path().string());
}

}  // namespace spillway
