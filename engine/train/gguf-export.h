// Export of a trained model as one GGUF file for llama.cpp, Ollama and LM Studio: model.gguf
// (weights in F16, BF16 or Q8_0, the tokenizer and chat template in its metadata, laid out as
// llama.cpp's convert_hf_to_gguf.py writes the same model; model/gguf-arch.h, data/gguf-vocab.h)
// and an Ollama Modelfile beside it (FROM ./model.gguf and a stop per end-of-turn token; no
// TEMPLATE: Ollama matches the file's tokenizer.chat_template to the closest of its own templates
// within 100 edits, ollama/ollama template/template.go Named, else sends the prompt as it is).
//
// The folder is written as export_model's (train/export.h): into `out.tmp-<pid>`, listed in
// spillway-export.json, renamed into place, and an `out` holding files Spillway did not write is
// refused untouched.
#pragma once

#include <string>
#include <vector>

#include "data/gguf-vocab.h"
#include "model/gguf-arch.h"
#include "train/model-state.h"

namespace spillway {

inline constexpr const char* kGgufFileName = "model.gguf";
inline constexpr const char* kModelfileName = "Modelfile";

// "f16", "bf16", "q8_0" (as convert's --outtype); kInvalidArgument naming the choices otherwise.
Result<GgufFileType> parse_gguf_type(const std::string& name);
const char* gguf_type_label(GgufFileType t);  // "f16", ...

struct GgufExportResult {
  std::string architecture;  // llama.cpp's ("llama", "qwen2", ...)
  GgufVocabInfo vocab;
  size_t tensors = 0;
  size_t f16_fallbacks = 0;  // Q8_0 tensors written as F16 (a row length not a multiple of 32)
  std::vector<std::string> notes;
};

// The Modelfile text for `vocab` (tests).
std::string ollama_modelfile(const GgufVocabInfo& vocab);

// Writes `out`/model.gguf and `out`/Modelfile. `tokenizer_source`: a tokenizer folder or file
// (data/gguf-vocab.h); the built-in byte tokenizer and none are kInvalidArgument (llama.cpp
// needs a tokenizer it knows). Errors get "export to OUT: ".
Result<GgufExportResult> export_gguf(const ModelState& state, const std::string& tokenizer_source,
                                     const std::string& out, GgufFileType type);

}  // namespace spillway
