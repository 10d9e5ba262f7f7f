#include "train/export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/fail-point.h"
#include "core/file-util.h"

namespace spillway {
namespace fs = std::filesystem;

Status export_model(const ModelState& state, const std::string& tokenizer_source,
                    const std::string& out) {
  Status st = write_folder_atomic(out, [&](const std::string& tmp) -> Status {
    SPW_RETURN_IF_ERROR(state.save_weights(tmp));
    if (fail_point("export.write")) return io_error("export.write: failed by SPILLWAY_FAIL_POINTS");
    nlohmann::json config = state.config().to_json();
    config["transformers_version"] = "4.40.0";
    SPW_RETURN_IF_ERROR(
        write_file_atomic((fs::path(tmp) / "config.json").string(), config.dump(2) + "\n"));
    if (tokenizer_source == kBuiltinBytesTokenizer) {
      // No tokenizer file exists for the built-in byte tokenizer; this marker lets eval/generate
      // find it.
      return write_file_atomic((fs::path(tmp) / kBuiltinTokenizerMarker).string(),
                               "{\"tokenizer\": \"builtin:bytes\"}\n");
    }
    if (tokenizer_source.empty()) return {};
    std::error_code ec;
    std::vector<fs::path> files;
    if (fs::is_directory(tokenizer_source, ec)) {
      for (const char* name :
           {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
            "generation_config.json", "chat_template.jinja", kBuiltinTokenizerMarker}) {
        fs::path p = fs::path(tokenizer_source) / name;
        if (fs::exists(p, ec)) files.push_back(p);
      }
    } else if (fs::exists(tokenizer_source, ec)) {
      files.push_back(tokenizer_source);
    }
    if (files.empty()) {
      return not_found("no tokenizer at " + tokenizer_source +
                       " (looked for tokenizer.json and tokenizer.model); pass the tokenizer the "
                       "model was trained with");
    }
    for (const auto& f : files) {
      fs::copy_file(f, fs::path(tmp) / f.filename(), fs::copy_options::overwrite_existing, ec);
      if (ec) return io_error("cannot copy " + f.string() + ": " + ec.message());
    }
    return {};
  });
  return st.ok() ? st : st.with_context("export to " + out);
}

}  // namespace spillway
