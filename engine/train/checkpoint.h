// Training checkpoints: everything needed to continue a run exactly — master weights, AdamW
// moments, the optimizer step, the data position and the seeds — in a folder per step:
//
//   checkpoints/step-000120/ model.safetensors      fp32 master weights, Hugging Face names
//                            optimizer.safetensors  exp_avg.<name>, exp_avg_sq.<name> (fp32)
//                            trainer_state.json     step, data cursor, seeds, tokens, loss
//                            config.json            the model's config (the folder loads as
//                                                   a model)
//                            manifest.json          written last: the step, the run, and each
//                                                   file's size and CRC-32C
//                                                   (train/checkpoint-manifest.h)
//
// Writing is atomic at folder level: files go into `step-N.tmp-<pid>/`, each fsynced, the manifest
// last, then the folder is renamed and its parent fsynced, so a crash or a full disk never leaves a
// torn checkpoint and never touches the last good one. Reading checks before it uses a byte: every
// file against the manifest, then every value against the others (check_trainer_state), so a
// damaged, edited or mixed checkpoint is refused rather than trained on. Functions are
// thread-compatible.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "history/run-folder.h"  // list_checkpoints: the run folder's layout
#include "train/checkpoint-manifest.h"
#include "train/model-state.h"
#include "train/optimizer-state.h"

namespace spillway {

// Where the data cursor must be at a step: sequences consumed = sequences_before + (step -
// since_step) * sequences_per_step. A run starts a segment at step 0; a resume whose job reads
// another number of sequences per step (micro-batch × gradient accumulation) starts a new one.
struct DataSegment {
  int64_t since_step = 0;
  int64_t sequences_before = 0;
  int64_t sequences_per_step = 0;  // 0: unknown (a checkpoint of format 1)

  // The segment a run at `step` with cursor position `consumed` continues with `per_step`
  // sequences per step: this one when its rate is the same, else a new one from `step`.
  DataSegment continued(int64_t step, int64_t consumed, int64_t per_step) const;
};

// The largest step (and optimizer step) a checkpoint may hold: 2^53, the largest integer every JSON
// reader keeps exactly. A run of more steps is refused when its job is read.
inline constexpr int64_t kMaxCheckpointStep = int64_t{1} << 53;

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
  std::string run_id;  // the run that saved it; "" outside a run (and in format 1)
  DataSegment data;
};

// Checks the values of a checkpoint read from `dir` against each other: step within [0,
// kMaxCheckpointStep] and equal to the folder's (`step-NNNNNN`) and the manifest's, the optimizer's
// step equal to it, tokens, loss and time in range, and the data cursor where its segment puts it
// at that step. kCorrupt naming the value and the checkpoint, with what to do. `optimizer_step`:
// the value read for ModelState::step; `manifest`: null for a checkpoint of format 1.
Status check_trainer_state(const std::string& dir, const TrainerState& t, int64_t optimizer_step,
                           const CheckpointManifest* manifest);

// Writes `state` (with optimizer moments when present) into `checkpoints_dir/step-NNNNNN`.
// Returns the folder. kNoSpace when the disk is full (nothing is left behind).
// The moments go into one optimizer.safetensors whatever the placement, the same bytes: with
// some blocks' moments on the SSD (`state` on_ssd), those are streamed through `state` a block
// and kind at a time as the file is written. (Checkpoints of earlier builds with the state on the
// SSD have optimizer/block-<b>.safetensors instead; load_checkpoint reads both.)
Result<std::string> save_checkpoint(const std::string& checkpoints_dir, const ModelState& model,
                                    const TrainerState& trainer,
                                    OptimizerStateStore* state = nullptr);
// Reads a checkpoint folder into `model` (which must have the checkpoint's layout) and returns the
// trainer state: first verify_checkpoint_files and check_trainer_state, then the weights and
// moments. kNotFound / kCorrupt name the file and what does not match; kUnsupported for a format
// this build does not read. A checkpoint of format 1 (no manifest; before 2026-11-28) loads with
// the value checks, its files unverified (`*legacy` set when given).
// A block's moments go into ModelState when it holds them, else into `state` (the SSD store).
// Only the blocks ModelState holds are read (past one machine, each machine's own), from
// optimizer.safetensors or the index of the machines' parts (checkpoint-parts.h).
Result<TrainerState> load_checkpoint(const std::string& dir, ModelState& model,
                                     OptimizerStateStore* state = nullptr, bool* legacy = nullptr);
// The pieces of a checkpoint that save_checkpoint writes, for checkpoint-parts.h's writers:
// The name of the checkpoint folder of `step`: "step-000120".
std::string checkpoint_folder_name(int64_t step);
// The held blocks' moments into one safetensors file at `path` (exp_avg.<name> and
// exp_avg_sq.<name>), the same bytes wherever they live: read through `state` where ModelState
// does not hold them.
Status save_moments(const std::string& path, ModelState& model, OptimizerStateStore* state,
                    FileDigests* digests);
// trainer_state.json and config.json into `dir`.
Status write_checkpoint_state(const std::string& dir, const ModelState& model,
                              const TrainerState& trainer, FileDigests* digests);
// `st` as the error of a checkpoint of `step` that was not saved, naming the last whole one.
Status checkpoint_not_saved(const Status& st, const std::string& checkpoints_dir, int64_t step);

// Removes all but the newest `keep` of the checkpoints saved by the schedule (keep <= 0: keeps
// all); a manual one (trainer_state.json "manual": true) is never removed and does not count, nor
// is one that holds files its manifest does not list (a user's file: the folder is kept whole and
// named in the returned notes, one line each).
std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int keep);

}  // namespace spillway
