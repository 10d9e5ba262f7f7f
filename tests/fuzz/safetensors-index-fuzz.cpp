// Fuzz target: a sharded checkpoint's model.safetensors.index.json, opened as the model loader
// opens a folder (TensorStore::open) beside two valid shards. Shard names that leave the folder,
// tensors listed in the wrong shard or missing, and malformed JSON must be errors.
//
// Seeds: the index that write_safetensors_sharded writes for the two shards, and variants.
#include <cstdint>
#include <filesystem>

#include "fuzz-util.h"
#include "model/safetensors.h"

using namespace spillway;

namespace {

const std::string& shard_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::fresh_dir("shards");
    static const float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<TensorToWrite> tensors = {{"embed.weight", DType::kF32, {2, 2}, w},
                                          {"layers.0.w", DType::kF32, {4}, w},
                                          {"lm_head.weight", DType::kF32, {2, 2}, w + 4}};
    // 16-byte shards: one tensor each, three files, and the index.
    (void)write_safetensors_sharded(d, tensors, 16);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string& d = shard_dir();
  fuzz::add_seed("index", fuzz::slurp(d + "/model.safetensors.index.json"));
  fuzz::add_seed("minimal",
                 R"({"weight_map": {"embed.weight": "model-00001-of-00003.safetensors"}})");
  fuzz::add_seed(
      "wrong-shard",
      R"({"metadata": {"total_size": 48}, "weight_map": {"embed.weight": "model-00002-of-00003.safetensors", "x": "model-00003-of-00003.safetensors"}})");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& d = shard_dir();
  fuzz::write_input(d, "model.safetensors.index.json", data, size);
  auto store = TensorStore::open(d);
  if (!store.ok()) return 0;
  for (const TensorInfo* t : store->tensors()) {
    std::vector<float> dst(t->numel());
    (void)store->read_f32(*t, dst.data(), dst.size());
  }
  return 0;
}
