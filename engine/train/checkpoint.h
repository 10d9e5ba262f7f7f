// Training checkpoints: everything needed to continue a run exactly — master weights, AdamW
// moments, the optimizer step, the data position and the seeds — in a folder per step:
//
//   checkpoints/step-000120/ model.safetensors      fp32 master weights, Hugging Face names
//                            optimizer.safetensors  exp_avg.<name>, exp_avg_sq.<name> (fp32)
//                            trainer_state.json     step, data cursor, seeds, tokens, loss
//                            config.json            the model's config (the folder loads as
//                                                   a model)
//
// Writing is atomic at folder level: files go into `step-N.tmp-<pid>/`, each fsynced, then the
// folder is renamed and its parent fsynced, so a crash or a full disk never leaves a torn
// checkpoint and never touches the last good one. Functions are thread-compatible.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "history/run-folder.h"  // list_checkpoints: the run folder's layout
#include "train/model-state.h"
#include "train/optimizer-state.h"

namespace spillway {

struct TrainerState {
  int64_t step = 0;
  int64_t tokens = 0;  // training tokens processed so far
  double last_loss = 0;
  nlohmann::json data_cursor;  // DataCursor::to_json()
  uint64_t seed = 0;
  double elapsed_s = 0;
  // Saved on request (Save checkpoint, SIGUSR1) rather than by train.checkpoint_every: the user
  // chose this step, so prune_checkpoints never removes it.
  bool manual = false;
};

// Writes `state` (with optimizer moments when present) into `checkpoints_dir/step-NNNNNN`.
// Returns the folder. kNoSpace when the disk is full (nothing is left behind).
// With the AdamW state on the SSD (`state` on_ssd), the moments are streamed block by block into
// optimizer/block-<b>.safetensors instead of one optimizer.safetensors.
Result<std::string> save_checkpoint(const std::string& checkpoints_dir, const ModelState& model,
                                    const TrainerState& trainer,
                                    OptimizerStateStore* state = nullptr);
// Reads a checkpoint folder into `model` (which must have the checkpoint's layout) and returns the
// trainer state. kNotFound / kCorrupt name the file.
// Moments go into ModelState when it has them, else into `state` (the SSD store).
Result<TrainerState> load_checkpoint(const std::string& dir, ModelState& model,
                                     OptimizerStateStore* state = nullptr);
// Removes all but the newest `keep` of the checkpoints saved by the schedule (keep <= 0: keeps
// all); a manual one (trainer_state.json "manual": true) is never removed and does not count.
void prune_checkpoints(const std::string& checkpoints_dir, int keep);

}  // namespace spillway
