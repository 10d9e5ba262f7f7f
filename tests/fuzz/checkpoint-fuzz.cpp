// Fuzz target: a checkpoint folder given to `train --resume` (and `export --checkpoint`). The
// folder is a valid checkpoint of a tiny Llama written by save_checkpoint; the first input byte
// picks which of its files the rest of the input replaces: trainer_state.json, model.safetensors,
// optimizer.safetensors or config.json. The folder is then read as the trainer resumes
// (load_checkpoint into the job's model, DataCursor::from_json of its data cursor, a
// BatchIterator seek and a few batches) and as export reads it (ModelConfig::load of its
// config.json, whose layout must match for the checkpoint to load).
//
// The checkpoint's manifest (train/checkpoint-manifest.h) would refuse every changed file by its
// CRC-32C; with bit 2 of the selector byte set, the manifest is rewritten to match first, so that
// the input reaches the readers behind it.
//
// Seeds: the selector byte followed by each file of the valid checkpoint.
#include <cstdint>
#include <filesystem>

#include "../checkpoint-reseal.h"
#include "data/batch-iterator.h"
#include "data/data-cursor.h"
#include "data/dataset.h"
#include "fuzz-util.h"
#include "tiny-run.h"
#include "train/checkpoint.h"
#include "train/model-state.h"

using namespace spillway;

namespace {

const char* kFiles[] = {"trainer_state.json", "model.safetensors", "optimizer.safetensors",
                        "config.json", "manifest.json"};
constexpr int kNumFiles = 5;

using fuzz::tiny_config;
const Dataset& dataset() {
  return fuzz::tiny_dataset();
}

struct Template {
  std::string files[kNumFiles];
};

// The files of a valid checkpoint at step 3 with a data cursor into dataset().
const Template& valid() {
  static const Template t = [] {
    Template out;
    const std::string dir = fuzz::fresh_dir("template");
    auto state = ModelState::create(ParameterLayout::build(tiny_config()), true);
    (*state)->init_random(1);
    (*state)->step = 3;
    auto it = BatchIterator::create(dataset(), 2, 7);
    for (int i = 0; i < 3; ++i) (void)it->next();
    TrainerState ts;
    ts.step = 3;
    ts.tokens = 48;
    ts.last_loss = 2.5;
    ts.data_cursor = it->cursor().to_json();
    ts.seed = 7;
    ts.elapsed_s = 1.5;
    ts.data = {0, 0, 2};  // two sequences per step, as the iterator above
    auto saved = save_checkpoint(dir, **state, ts);
    for (int f = 0; f < kNumFiles; ++f)
      out.files[f] = saved.ok() ? fuzz::slurp(*saved + "/" + kFiles[f]) : std::string();
    return out;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const Template& t = valid();
  for (int f = 0; f < 4; ++f) {
    fuzz::add_seed(kFiles[f], std::string(1, static_cast<char>(f)) + t.files[f]);
    fuzz::add_seed(std::string("resealed-") + kFiles[f],
                   std::string(1, static_cast<char>(f | 4)) + t.files[f]);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string dir = fuzz::fresh_dir("step-000003");
  const Template& t = valid();
  const int which = data[0] % 4;
  for (int f = 0; f < kNumFiles; ++f) {
    if (f == which)
      fuzz::write_input(dir, kFiles[f], data + 1, size - 1);
    else
      fuzz::spit(dir + "/" + kFiles[f], t.files[f]);
  }
  if (data[0] & 4) testing::reseal_checkpoint(dir);
  // Resume: the job's model, the checkpoint's state, the data position.
  static std::unique_ptr<ModelState> state =
      std::move(ModelState::create(ParameterLayout::build(tiny_config()), true)).value();
  auto ts = load_checkpoint(dir, *state);
  if (ts.ok()) {
    auto cursor = DataCursor::from_json(ts->data_cursor);
    if (cursor.ok()) {
      auto it = BatchIterator::create(dataset(), 2, 7);
      if (it->seek(*cursor).ok()) {
        for (int i = 0; i < 3; ++i) (void)it->next();
        (void)it->cursor().consumed();
        (void)it->cursor().epoch_progress();
      }
    }
  }
  // Export: the checkpoint's own config.json decides the layout it is read with.
  auto config = ModelConfig::load(dir);
  if (config.ok() && config->validate().ok()) {
    const ParameterLayout layout = ParameterLayout::build(*config);
    // Export allocates the whole model: only for configs of a size a test machine holds.
    if (layout.total_numel() <= (size_t{1} << 22)) {
      auto other = ModelState::create(layout, false);
      if (other.ok()) (void)load_checkpoint(dir, **other);
    }
  }
  return 0;
}
