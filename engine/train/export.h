// Export of a trained model as a Hugging Face folder that transformers loads with
// AutoModelForCausalLM.from_pretrained: model.safetensors (fp32, sharded above 5 GB) plus
// config.json, and the tokenizer files copied from `tokenizer_source` (a model folder or a
// tokenizer file). Written into `out.tmp-<pid>` and renamed, so a failed export leaves the
// previous one intact.
//
// Spillway replaces only what it wrote: each export lists its files in kExportManifest
// (history/owned-files.h), and an `out` that exists is replaced only when it is empty or holds an
// earlier export and nothing else (every entry named in its manifest); any other folder is
// refused, untouched, with kInvalidArgument naming what is in it.
#pragma once

#include <functional>
#include <string>

#include "data/model-tokenizer.h"  // the tokenizer of a model folder, and the byte tokenizer's marker
#include "train/model-state.h"

namespace spillway {

// Whether export_model may replace `out`: ok when it does not exist, is an empty folder or holds
// an earlier export and nothing else; kInvalidArgument otherwise, naming up to five of the entries
// Spillway did not write and saying what to do (export_model adds "export to OUT: ").
Status check_export_target(const std::string& out);

// `tokenizer_source`: a model folder, a tokenizer file, "builtin:bytes", or empty for none (a
// model trained on pre-tokenized data). kNotFound when it names no tokenizer (nothing is written).
Status export_model(const ModelState& state, const std::string& tokenizer_source,
                    const std::string& out);

// export_model from a checkpoint folder (checkpoint.h) instead of a state in memory: its weights'
// files (the same fp32 tensors save_weights writes, in one file or under an index) hard-linked
// where the filesystem allows, else copied, and its config. Past one machine the trainer exports
// so, since no machine holds every block (checkpoint-parts.h). Errors as export_model's, and
// ModelConfig::load's for the checkpoint.
Status export_checkpoint(const std::string& checkpoint, const std::string& tokenizer_source,
                         const std::string& out);

// What every export format shares: `fill` writes the files into the temporary folder, then the
// manifest listing them is written and the folder renamed to `out` (check_export_target first and
// again before the swap). Errors get "export to OUT: ".
Status write_export_folder(const std::string& out,
                           const std::function<Status(const std::string& tmp)>& fill);

}  // namespace spillway
