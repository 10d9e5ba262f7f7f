// Fuzz target: a model's config.json, read as every command reads it (ModelConfig::load), then
// what the loader derives from an accepted config: validate(), the parameter layout and its
// sizes (UBSan reports an overflow in their arithmetic), the planner's FLOPs, and to_json()
// read back, which must give the same config.
//
// Seeds: the config.json of each model in ../shared/data and of the presets.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "fuzz-util.h"
#include "model/model-config.h"
#include "model/parameter-layout.h"
#include "train/planner.h"

using namespace spillway;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!fuzz::seeds_out()) return 0;
  for (const char* m : {"stories260K", "qwen2-tiny", "llama-mha-tiny"})
    fuzz::add_seed(std::string("data-") + m,
                   fuzz::slurp(fuzz::data_path(std::string("models/") + m + "/config.json")));
  for (const char* p : {"llama-tiny", "llama-1b", "llama-70b"}) {
    auto c = model_preset(p);
    if (c.ok()) fuzz::add_seed(std::string("preset-") + p, c->to_json().dump(2));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::fresh_dir("in");
  fuzz::write_input(dir, "config.json", data, size);
  auto config = ModelConfig::load(dir);
  if (!config.ok() || !config->validate().ok()) return 0;
  // The layout holds a few views per layer; the sizes it computes must not overflow.
  const ParameterLayout layout = ParameterLayout::build(*config);
  (void)layout.total_numel();
  (void)layout.max_block_numel();
  (void)layout.parameter_count();
  (void)step_flops(*config, 4096.0, 2048);
  auto again = ModelConfig::from_json(config->to_json());
  if (!again.ok() || again->to_json() != config->to_json()) {
    std::fprintf(stderr, "config.json does not survive to_json and back: %s\n",
                 again.ok() ? again->to_json().dump().c_str() : again.status().to_string().c_str());
    std::abort();
  }
  return 0;
}
