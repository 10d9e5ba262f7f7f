// Fuzz target: the worker's job file, read as `spillway-worker plan` and `train` read it
// (worker::load_job_file on the file, its resolved JSON written out), then planned as `plan`
// plans it: the model config from the preset, the config object or the model folder it names,
// check_positions, and make_plan on a fixed H100 host or a small CPU host (UBSan reports an
// overflow in the plan's arithmetic).
//
// Seeds: the example jobs of resources/jobs, and jobs written here for each placement, an
// `init` config object, epochs and a GPU backend, with paths into ../shared/data.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz-util.h"
#include "model/model-config.h"
#include "planner-fixtures.h"
#include "train/planner.h"
#include "worker/job-file.h"

using namespace spillway;
using nlohmann::ordered_json;

namespace {
using spillway::testing::h100_host;

MachineProbe cpu_host() {
  MachineProbe m;
  m.compute_flops = 100e9;
  m.h2d_bytes_per_s = m.host_mem_bytes_per_s = 20e9;
  m.dram_total_bytes = m.dram_available_bytes = 16ull << 30;
  m.ssd_free_bytes = m.ssd_total_bytes = 100ull << 30;
  return m;
}

void add_seeds() {
  for (const char* name : {"default.json", "stories260k-shakespeare.json"}) {
    std::string job = fuzz::slurp(std::string(SPILLWAY_SOURCE_DIR) + "/resources/jobs/" + name);
    // Paths relative to resources/jobs do not resolve from the fuzzer's folder: make them absolute.
    const std::string rel = "../../../shared/data";
    for (size_t at; (at = job.find(rel)) != std::string::npos;)
      job.replace(at, rel.size(), fuzz::data_dir());
    fuzz::add_seed(std::string("resources-") + name, job);
  }
  const std::string model = fuzz::data_path("models/stories260K");
  const std::string text = fuzz::data_path("datasets/tinyshakespeare/input.txt");
  ordered_json full = {{"name", "every key"},
                       {"model", {{"path", model}}},
                       {"data",
                        {{"train", text},
                         {"eval", nullptr},
                         {"eval_fraction", 0.1},
                         {"format", "auto"},
                         {"template", "auto"},
                         {"seq_len", 256},
                         {"shuffle", true},
                         {"seed", 0}}},
                       {"train",
                        {{"steps", 200},
                         {"epochs", 0},
                         {"micro_batch_size", 8},
                         {"grad_accum", 1},
                         {"lr", 3e-3},
                         {"schedule", "cosine"},
                         {"warmup_steps", 10},
                         {"min_lr_ratio", 0.0},
                         {"weight_decay", 0.1},
                         {"beta1", 0.9},
                         {"beta2", 0.95},
                         {"eps", 1e-8},
                         {"clip_grad_norm", 1.0},
                         {"seed", 0},
                         {"eval_every", 50},
                         {"eval_batches", 0},
                         {"checkpoint_every", 100},
                         {"keep_checkpoints", 2},
                         {"log_every", 10}}},
                       {"placement",
                        {{"backend", "auto"},
                         {"device_memory_bytes", 0},
                         {"weight_slots", 2},
                         {"optimizer", "dram"},
                         {"master", "dram"},
                         {"ssd_dir", ""},
                         {"dram_cap_bytes", 0}}},
                       {"output", {{"run_dir", ""}, {"db", ""}}}};
  fuzz::add_seed("every-key", full.dump(2));
  ordered_json gpu = full;
  gpu["model"] = {{"init", "llama-7b"}, {"seed", 1}, {"tokenizer", "builtin:bytes"}};
  gpu["data"]["seq_len"] = 4096;
  gpu["train"]["micro_batch_size"] = 4;
  gpu["train"]["grad_accum"] = 16;
  gpu["placement"] = {{"backend", "cuda"}, {"weight_slots", 3}, {"optimizer", "auto"},
                      {"master", "auto"},  {"ssd_dir", "/tmp"}, {"dram_cap_bytes", 1ull << 36}};
  fuzz::add_seed("gpu-7b-auto", gpu.dump(2));
  ordered_json ssd = full;
  ssd["model"] = {{"init",
                   {{"architectures", {"Qwen2ForCausalLM"}},
                    {"vocab_size", 1000},
                    {"hidden_size", 64},
                    {"intermediate_size", 128},
                    {"num_hidden_layers", 3},
                    {"num_attention_heads", 4},
                    {"num_key_value_heads", 2},
                    {"max_position_embeddings", 512},
                    {"tie_word_embeddings", true}}},
                  {"tokenizer", fuzz::data_path("tokenizers/qwen2.5")}};
  ssd["train"]["steps"] = 0;
  ssd["train"]["epochs"] = 2.5;
  ssd["placement"] = {
      {"backend", "cpu"}, {"optimizer", "ssd"}, {"master", "ssd"}, {"ssd_dir", "/tmp"}};
  fuzz::add_seed("cpu-init-config-ssd", ssd.dump(2));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (fuzz::seeds_out()) add_seeds();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::fresh_dir("in");
  const std::string path = fuzz::write_input(dir, "job.json", data, size);
  auto file = worker::load_job_file(path);
  if (!file.ok()) return 0;
  (void)file->resolved.dump();  // what the run folder's job.json and the run store keep
  const TrainJob& job = file->job;
  Result<ModelConfig> config = !job.model_path.empty()    ? ModelConfig::load(job.model_path)
                               : !job.init_preset.empty() ? model_preset(job.init_preset)
                                                          : ModelConfig::from_json(job.init_config);
  if (!config.ok()) return 0;
  (void)check_positions(*config, job);
  const MachineProbe machine = job.backend == "cuda" ? h100_host() : cpu_host();
  // The suggestion plans up to 320 jobs: one input in four asks for it.
  (void)make_plan(*config, job, machine, job.steps > 0 ? job.steps : 0, size % 4 == 0);
  return 0;
}
