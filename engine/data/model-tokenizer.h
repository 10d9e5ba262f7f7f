// The tokenizer of a model folder, as the trainer, `eval`, `generate`, export and the GUI's
// dataset preview find it: a model folder's tokenizer files, a tokenizer file, or the built-in byte
// tokenizer ("builtin:bytes", or a folder holding the marker an export of such a model carries).
// Free functions; thread-safe; the tokenizer returned is owned by the caller.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "data/tokenizer.h"

namespace spillway {

// Marks a model folder exported from a run that used the built-in byte tokenizer.
inline constexpr const char* kBuiltinTokenizerMarker = "spillway_tokenizer.json";

// Names the built-in byte tokenizer where a tokenizer path is expected (job.json model.tokenizer).
inline constexpr const char* kBuiltinBytesTokenizer = "builtin:bytes";

// A tokenizer by path: the built-in byte tokenizer for "builtin:bytes" or a model folder holding
// the marker, else Tokenizer::load(path). Errors: those of Tokenizer::load.
Result<std::unique_ptr<Tokenizer>> load_model_tokenizer(const std::string& path);

// Whether `path` names a tokenizer: "builtin:bytes", a file, or a folder holding tokenizer.json,
// tokenizer.model or the marker. False for a model folder shipped without tokenizer files, which
// can still be trained on pre-tokenized data and exported without a tokenizer.
bool has_tokenizer_files(const std::string& path);

}  // namespace spillway
