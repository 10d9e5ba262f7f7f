// Fuzz target: a checkpoint edited as a user's hands and disk would, structured (issue 28): the
// input is a list of edits of a valid checkpoint at step 3 of a tiny Llama run — a value of
// trainer_state.json set to one of many (0, ±1, the step's neighbours, 2^31, 2^53, 2^63, 2^64,
// 1e300, -0.5, text, null, an object), a file copied in from the same run's step 2 or 4
// checkpoint, a bit flipped, a file cut short, the manifest removed — after which the manifest is
// rewritten to match or not. The folder is then loaded as resume loads it: load_checkpoint, then
// the seek of the job's data to its cursor.
//
// The oracle: a checkpoint that loads (and whose cursor the job's data seeks to) is step 3 with
// optimizer step 3, whatever was edited. Where the manifest still stands (not rewritten, not
// removed along with a downgrade to format 1), it is the genuine step 3: its data cursor and every
// weight and moment equal the unedited checkpoint's. With the manifest rewritten to match one
// edited value of trainer_state.json, the value checks alone must catch it: again the genuine
// cursor or a refusal. (Several values forged to agree with each other, or another step's weights
// under a rewritten manifest, are beyond any check of values.) Informational values (tokens, loss,
// elapsed time, the manual flag) may change. Any other outcome aborts.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../checkpoint-reseal.h"
#include "core/file-util.h"
#include "data/batch-iterator.h"
#include "data/data-cursor.h"
#include "data/dataset.h"
#include "fuzz-util.h"
#include "tiny-run.h"
#include "train/checkpoint.h"
#include "train/model-state.h"

using namespace spillway;
namespace fs = std::filesystem;

namespace {

using fuzz::tiny_config;
const Dataset& dataset() {
  return fuzz::tiny_dataset();
}
constexpr int kRows = 2;  // sequences per step

// A run's checkpoints at steps 2, 3 and 4 (each step moves the weights, the moments and the
// cursor), in the scratch folder's run/checkpoints.
struct Run {
  std::string checkpoints;
  std::unique_ptr<ModelState> at3;  // the state step-000003 holds
  TrainerState state3;
};

const Run& run() {
  static const Run r = [] {
    Run out;
    out.checkpoints = fuzz::fresh_dir("run") + "/checkpoints";
    auto state = std::move(ModelState::create(ParameterLayout::build(tiny_config()), true)).value();
    state->init_random(1);
    auto it = BatchIterator::create(dataset(), kRows, 7);
    for (int step = 1; step <= 4; ++step) {
      (void)it->next();
      state->step = step;
      for (size_t b = 0; b < state->num_blocks(); ++b) {
        const size_t n = state->layout().blocks()[b].numel;
        for (size_t i = 0; i < n; ++i) {
          state->master(b)[i] += 0.01f * static_cast<float>(step);
          state->exp_avg(b)[i] = 0.1f * static_cast<float>(step);
          state->exp_avg_sq(b)[i] = 0.001f * static_cast<float>(step);
        }
      }
      if (step < 2) continue;
      TrainerState ts;
      ts.step = step;
      ts.tokens = 16 * step;
      ts.last_loss = 2.5;
      ts.data_cursor = it->cursor().to_json();
      ts.seed = 7;
      ts.run_id = "fuzz-run";
      ts.data = {0, 0, kRows};
      if (!save_checkpoint(out.checkpoints, *state, ts).ok()) std::abort();
      if (step == 3) {
        out.state3 = ts;
        out.at3 = std::move(ModelState::create(state->layout(), true)).value();
        if (!load_checkpoint(out.checkpoints + "/step-000003", *out.at3).ok()) std::abort();
      }
    }
    return out;
  }();
  return r;
}

const char* kFiles[] = {"trainer_state.json", "model.safetensors", "optimizer.safetensors",
                        "config.json", "manifest.json"};
const char* kKeys[] = {"step",
                       "optimizer_step",
                       "tokens",
                       "last_loss",
                       "elapsed_s",
                       "seed",
                       "manual",
                       "run_id",
                       "format_version",
                       "data_cursor.epoch",
                       "data_cursor.index",
                       "data_cursor.dataset_size",
                       "data_cursor.seed",
                       "data_cursor.shuffle",
                       "data_segment.since_step",
                       "data_segment.sequences_before",
                       "data_segment.sequences_per_step"};

nlohmann::json a_value(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 17)) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return -1;
    case 3:
      return 2;
    case 4:
      return 4;
    case 5:
      return int64_t{1} << 31;
    case 6:
      return int64_t{1} << 53;
    case 7:
      return (int64_t{1} << 53) + 1;
    case 8:
      return INT64_MAX;
    case 9:
      return UINT64_MAX;
    case 10:
      return 1.8446744073709552e19;  // 2^64, as a JSON reader keeps it
    case 11:
      return 1e300;
    case 12:
      return -0.5;
    case 13:
      return "3";
    case 14:
      return nullptr;
    case 15:
      return nlohmann::json::object();
    case 16:
      return true;
    default:
      return in.ConsumeIntegral<int64_t>();
  }
}

void set_key(nlohmann::json& j, const std::string& key, const nlohmann::json& v) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos) {
    j[key] = v;
  } else if (j[key.substr(0, dot)].is_object()) {
    j[key.substr(0, dot)][key.substr(dot + 1)] = v;
  }
}

// `trust`: what the checks must have held to the genuine step 3 (see the top of the file).
enum class Trust { kStepOnly, kGenuine };

void check_genuine(const ModelState& got, const TrainerState& t, Trust trust) {
  const Run& r = run();
  // The cursor as resume reads it (a key it does not read, or the seed as a number or its
  // decimal text, is the same position).
  const auto cursor = DataCursor::from_json(t.data_cursor);
  const bool genuine_cursor =
      cursor.ok() && *cursor == *DataCursor::from_json(r.state3.data_cursor);
  if (t.step != 3 || got.step != 3 || (trust == Trust::kGenuine && !genuine_cursor)) {
    std::fprintf(stderr, "accepted a checkpoint of step %lld, optimizer step %lld, cursor %s\n",
                 static_cast<long long>(t.step), static_cast<long long>(got.step),
                 t.data_cursor.dump().c_str());
    std::abort();
  }
  if (trust != Trust::kGenuine) return;
  auto& a = const_cast<ModelState&>(got);
  auto& b = *r.at3;
  for (size_t k = 0; k < a.num_blocks(); ++k) {
    const size_t n = a.layout().blocks()[k].numel;
    if (std::memcmp(a.master(k), b.master(k), n * 4) != 0 ||
        std::memcmp(a.exp_avg(k), b.exp_avg(k), n * 4) != 0 ||
        std::memcmp(a.exp_avg_sq(k), b.exp_avg_sq(k), n * 4) != 0) {
      std::fprintf(stderr, "accepted a checkpoint whose block %zu is not step 3's\n", k);
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)run();
  for (int i = 0; i < 8; ++i)
    fuzz::add_seed("edit" + std::to_string(i), std::string(8, static_cast<char>(i * 37)));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Run& r = run();
  FuzzedDataProvider in(data, size);
  const std::string dir = fuzz::fresh_dir("step-000003");
  fs::remove_all(dir);
  fs::copy(r.checkpoints + "/step-000003", dir, fs::copy_options::recursive);
  const int edits = in.ConsumeIntegralInRange(1, 4);
  int value_edits = 0, other_edits = 0;
  for (int e = 0; e < edits && in.remaining_bytes() > 0; ++e) {
    const std::string file = kFiles[in.ConsumeIntegralInRange(0, 4)];
    const std::string path = dir + "/" + file;
    const int kind = in.ConsumeIntegralInRange(0, 4);
    ++(kind == 0 ? value_edits : other_edits);
    switch (kind) {
      case 0: {  // a value of trainer_state.json
        auto text = read_file(dir + "/trainer_state.json");
        if (!text.ok()) break;
        nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
        if (!j.is_object()) break;
        set_key(j, kKeys[in.ConsumeIntegralInRange<size_t>(0, std::size(kKeys) - 1)], a_value(in));
        fuzz::spit(dir + "/trainer_state.json", j.dump(2));
        break;
      }
      case 1: {  // a file copied in from step 2 or 4
        const std::string from =
            r.checkpoints + (in.ConsumeBool() ? "/step-000002/" : "/step-000004/");
        std::error_code ec;
        fs::copy_file(from + file, path, fs::copy_options::overwrite_existing, ec);
        break;
      }
      case 2: {  // one bit flipped
        std::string bytes = fuzz::slurp(path);
        if (bytes.empty()) break;
        const size_t at = in.ConsumeIntegralInRange<size_t>(0, bytes.size() - 1);
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << in.ConsumeIntegralInRange(0, 7)));
        fuzz::spit(path, bytes);
        break;
      }
      case 3: {  // cut short
        std::error_code ec;
        const auto n = fs::file_size(path, ec);
        if (!ec && n > 0) fs::resize_file(path, in.ConsumeIntegralInRange<uint64_t>(0, n - 1), ec);
        break;
      }
      default: {  // removed
        std::error_code ec;
        fs::remove(path, ec);
      }
    }
  }
  const bool resealed = in.ConsumeBool();
  if (resealed) testing::reseal_checkpoint(dir);
  const bool manifest_stands = !resealed && fs::exists(dir + "/manifest.json");
  const bool one_forged_value = resealed && value_edits == 1 && other_edits == 0;
  const Trust trust = manifest_stands || one_forged_value ? Trust::kGenuine : Trust::kStepOnly;
  static std::unique_ptr<ModelState> state =
      std::move(ModelState::create(ParameterLayout::build(tiny_config()), true)).value();
  auto t = load_checkpoint(dir, *state);
  if (!t.ok()) return 0;
  // Resume then seeks the job's data (seed 7, shuffled, dataset()) to the cursor, which refuses
  // a cursor of another seed, order or dataset size.
  auto cursor = DataCursor::from_json(t->data_cursor);
  auto it = BatchIterator::create(dataset(), kRows, 7);
  if (cursor.ok() && it->seek(*cursor).ok()) check_genuine(*state, *t, trust);
  return 0;
}
