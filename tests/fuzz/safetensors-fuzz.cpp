// Fuzz target: one .safetensors file — the 8-byte header length, the JSON header and the tensor
// table — opened as the model loader does (TensorStore::open), then every tensor's invariants
// checked and the float ones read through read_f32. A tensor whose bytes lie outside the file or
// whose byte size is not shape × dtype after open() returned ok is a bug, reported as a crash.
//
// Seeds: the models and golden files of ../shared/data, cut to their first tensors, and small
// files written here with every dtype, empty tensors and metadata.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "fuzz-util.h"
#include "model/safetensors.h"

using namespace spillway;

namespace {

// A copy of `path` that keeps at most `max_tensors` tensors (header rewritten, data cut to them).
std::string first_tensors(const std::string& path, size_t max_tensors) {
  auto store = TensorStore::open(path);
  if (!store.ok()) return {};
  std::vector<TensorToWrite> keep;
  for (const TensorInfo* t : store->tensors()) {
    if (keep.size() == max_tensors) break;
    if (t->nbytes() > 64 * 1024) continue;
    keep.push_back({t->name, t->dtype, t->shape, store->data(*t)});
  }
  const std::string out = fuzz::scratch_dir() + "/seed.safetensors";
  if (!write_safetensors(out, keep).ok()) return {};
  return fuzz::slurp(out);
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "safetensors invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!fuzz::seeds_out()) return 0;
  int i = 0;
  for (const char* rel :
       {"models/stories260K/model.safetensors", "models/qwen2-tiny/model.safetensors",
        "models/llama-mha-tiny/model.safetensors",
        "golden/stories260K/forward_backward.safetensors"}) {
    for (size_t n : {1, 3}) {
      std::string s = first_tensors(fuzz::data_path(rel), n);
      if (!s.empty()) fuzz::add_seed("data-" + std::to_string(i++), s);
    }
  }
  const float f[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
  const int64_t l[2] = {-1, 1LL << 40};
  const uint8_t u[3] = {1, 2, 3};
  const std::string out = fuzz::scratch_dir() + "/gen.safetensors";
  if (write_safetensors(out,
                        {{"a.weight", DType::kF32, {2, 3}, f},
                         {"b", DType::kBF16, {3}, f},
                         {"c", DType::kF16, {1, 2}, f},
                         {"d", DType::kI64, {2}, l},
                         {"e", DType::kU8, {3}, u},
                         {"empty", DType::kF32, {0, 4}, f},
                         {"scalar", DType::kI32, {}, f}},
                        {{"format", "pt"}, {"note", "x"}})
          .ok())
    fuzz::add_seed("generated", fuzz::slurp(out));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::fresh_dir("in");
  const std::string path = fuzz::write_input(dir, "model.safetensors", data, size);
  auto store = TensorStore::open(path);
  if (!store.ok()) return 0;
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | data[i];
  const uint64_t data_size = size - 8 - header;
  for (const TensorInfo* t : store->tensors()) {
    check(t->begin <= t->end && t->end <= data_size, "tensor bytes outside the data section");
    uint64_t numel = 1;
    for (int64_t d : t->shape) {
      check(d >= 0, "negative dimension");
      check(!__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel),
            "element count overflows");
    }
    uint64_t bytes = 0;
    check(!__builtin_mul_overflow(numel, dtype_size(t->dtype), &bytes), "byte size overflows");
    check(bytes == t->nbytes(), "byte size is not shape x dtype");
    check(store->find(t->name) == t, "find() does not return the tensor");
    if (numel <= (1u << 20)) {
      std::vector<float> dst(numel);
      (void)store->read_f32(*t, dst.data(), dst.size());
    }
  }
  return 0;
}
