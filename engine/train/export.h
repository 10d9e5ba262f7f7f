// Export of a trained model as a Hugging Face folder that transformers loads with
// AutoModelForCausalLM.from_pretrained: model.safetensors (fp32, sharded above 5 GB) plus
// config.json, and the tokenizer files copied from `tokenizer_source` (a model folder or a
// tokenizer file). Written into `out.tmp-<pid>` and renamed, so a failed export leaves the
// previous one intact.
#pragma once

#include <string>

#include "data/model-tokenizer.h"  // the tokenizer of a model folder, and the byte tokenizer's marker
#include "train/model-state.h"

namespace spillway {

// `tokenizer_source`: a model folder, a tokenizer file, "builtin:bytes", or empty for none (a
// model trained on pre-tokenized data). kNotFound when it names no tokenizer (nothing is written).
Status export_model(const ModelState& state, const std::string& tokenizer_source,
                    const std::string& out);

}  // namespace spillway
