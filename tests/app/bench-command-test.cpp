// `spillway-worker bench` and `probe`, run in-process through run_worker on the CPU backend: the
// built-in shapes are the real models', the benchmark's JSON line has every figure, bad arguments
// say what is wrong, and the probe keeps its original keys.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compute/backend-loader.h"
#include "model/parameter-layout.h"
#include "test-data.h"
#include "train/block-math.h"
#include "train/streaming-engine.h"
#include "worker/bench-models.h"
#include "worker/commands.h"

namespace spillway::testing {
namespace {
using nlohmann::json;

struct RunResult {
  int code;
  std::string out, err;
};

RunResult run(const std::vector<std::string>& argv) {
  std::istringstream in;
  std::ostringstream out, err;
  const int code = worker::run_worker(argv, {in, out, err});
  return {code, out.str(), err.str()};
}

// The JSON lines of a bench's output, one per configuration.
std::vector<json> json_lines(const std::string& out) {
  std::istringstream lines(out);
  std::vector<json> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(json::parse(line));
  return rows;
}

TEST(BenchModels, RealShapesHaveTheirParameterCounts) {
  // transformers' num_parameters() of each model.
  const std::pair<const char*, uint64_t> expected[] = {{"tinyllama-1.1b", 1'100'048'384},
                                                       {"llama3.2-3b", 3'212'749'824},
                                                       {"llama2-7b", 6'738'415'616},
                                                       {"qwen2.5-7b", 7'615'616'512}};
  for (const auto& [name, params] : expected) {
    auto c = worker::bench_model_config(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().to_string();
    EXPECT_EQ(ParameterLayout::build(*c).parameter_count(), params) << name;
  }
  const ModelConfig llama3 = *worker::bench_model_config("llama3.2-3b");
  EXPECT_TRUE(llama3.tie_word_embeddings);
  EXPECT_EQ(llama3.rope_scaling_factor, 32.0f);
  EXPECT_EQ(llama3.rope_theta, 500000.0f);
  const ModelConfig qwen = *worker::bench_model_config("qwen2.5-7b");
  EXPECT_TRUE(qwen.attention_bias);
  EXPECT_EQ(qwen.rms_norm_eps, 1e-6f);

  auto unknown = worker::bench_model_config("llama-9000");
  EXPECT_EQ(unknown.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("llama2-7b"), std::string::npos);
}

TEST(BenchModels, ModelFolderGivesItsConfig) {
  SPILLWAY_REQUIRE_DATA();
  auto c = worker::bench_model_config(data_path("models/stories260K"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->hidden_size, 64);
}

TEST(BenchCommand, TinyShapeOnTheCpuBackend) {
  RunResult r =
      run({"bench", "--model", "llama-tiny", "--backend", "cpu", "--micro-batch", "2", "--seq-len",
           "32", "--micro-batches", "2", "--steps", "2", "--warmup", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["model"], "llama-tiny");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["tokens_per_step"], 128);
  EXPECT_EQ(j["micro_batches"], 2);
  for (const char* key : {"params", "step_s", "tokens_per_s", "model_tflops", "hardware_tflops",
                          "peak_hbm_bytes", "peak_pinned_bytes", "h2d_bytes", "d2h_bytes",
                          "h2d_gbps", "d2h_gbps", "adamw_s", "grad_norm_s"}) {
    ASSERT_TRUE(j.contains(key) && j[key].is_number()) << key << " in " << r.out;
    EXPECT_GT(j[key].get<double>(), 0) << key;
  }
  for (const char* key : {"gpu_idle_fraction", "adamw_hidden_fraction"}) {
    ASSERT_TRUE(j.contains(key) && j[key].is_number()) << key;
    EXPECT_GE(j[key].get<double>(), 0) << key;
    EXPECT_LE(j[key].get<double>(), 1) << key;
  }
  EXPECT_NEAR(j["hardware_tflops"].get<double>() / j["model_tflops"].get<double>(), 8.0 / 6.0,
              1e-9);
  EXPECT_TRUE(j["device_used_bytes"].is_null());               // no GPU: no device-wide figure
  EXPECT_NEAR(j["loss"].get<double>(), std::log(512.0), 0.5);  // random weights, random tokens

  // The same through --tokens-per-step, as a table.
  r = run({"bench", "--model", "llama-tiny", "--backend", "cpu", "--micro-batch", "2", "--seq-len",
           "32", "--tokens-per-step", "128", "--steps", "1", "--warmup", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("128 (2 x 2 x 32)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model TFLOPS"), std::string::npos) << r.out;
}

// --ops: one step's op families, each with its calls and work from the model's shapes (derived
// here per op, independently of the profiler), a positive device time, and its rate and fraction of
// the ceilings measured in the same process. llama-tiny: vocab 512, hidden 64, MLP 172, 5 layers,
// 8 query and 4 key/value heads of 8; 2 micro-batches of 2 x 32 tokens. The fractions are not
// bounded above here: that is a timing (at these sizes the CPU's small element-wise ops run from
// the cache, faster than the copy ceiling's 64 MiB through DRAM).
TEST(BenchCommand, OpsGiveEachFamilysWorkTimeAndFractionOfTheCeilings) {
  RunResult r =
      run({"bench", "--model", "llama-tiny", "--backend", "cpu", "--micro-batch", "2", "--seq-len",
           "32", "--micro-batches", "2", "--steps", "1", "--warmup", "1", "--ops", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_TRUE(j.contains("ops") && j["ops"].is_array()) << r.out;

  const ModelConfig c = *model_preset("llama-tiny");
  const ParameterLayout layout = ParameterLayout::build(c);
  const double M = 2, n = 2 * 32, T = M * n, L = c.num_layers;
  const double h = c.hidden_size, f = c.intermediate_size, qd = c.q_dim(), kvd = c.kv_dim();
  const double V = c.vocab_size, A = 4;  // the CPU's act dtype: fp32
  // One layer's projections: q, k, v, o; gate, up, down.
  const double attn_w = 2 * h * qd + 2 * h * kvd, mlp_w = 3 * h * f;
  double grad_floats = 0;
  for (const auto& b : layout.blocks()) grad_floats += static_cast<double>(b.numel);
  const double blocks = static_cast<double>(layout.num_blocks());
  // Per family: calls and FLOPs or bytes in the step. A layer's forward runs twice (the backward
  // recomputes it from its checkpoint, without the down projection and the residual add).
  struct Expected {
    double calls, work;
  };
  const std::map<std::string, Expected> expected = {
      {"gemm_forward", {13 * L * M, 2 * T * L * (2 * (attn_w + mlp_w) - h * f)}},
      {"gemm_backward", {7 * L * M, 4 * T * L * (attn_w + mlp_w)}},
      // The planner's count: 2·keys·q_dim a token forward, twice that backward.
      {"attention_forward", {2 * L * M, 2 * 2 * T * qd * c.attended_keys(32)}},
      {"attention_backward", {L * M, 4 * T * qd * c.attended_keys(32)}},
      {"lm_head_loss", {M, 6 * T * h * V}},
      // A layer: rmsnorm and residual + rmsnorm forward (twice), two accumulating backwards; the
      // head: the final norm forward and backward.
      {"rmsnorm",
       {6 * L * M + 2 * M,
        L * M *
                (2 * ((2 * n * h + h) * A + 4 * n + (4 * n * h + h) * A + 4 * n) +
                 2 * ((4 * n * h + h) * A + 4 * n + 8 * h)) +
            M * ((2 * n * h + h) * A + 4 * n + (3 * n * h + h) * A + 4 * n + 8 * h)}},
      // q and k forward (twice) and backward, in place.
      {"rope", {6 * L * M, 3 * 2 * T * (qd + kvd) * A * L}},
      {"mlp_activation", {3 * L * M, (2 * 3 + 5) * T * f * A * L}},
      {"add", {L * M, 3 * T * h * A * L}},
      {"embedding", {2 * M, M * (4 * n + 2 * n * h * A) + M * (4 * n + n * h * A + 8 * n * h)}},
      {"fill_zero", {blocks, 4 * grad_floats}},
      {"sum_squares", {blocks, 4 * grad_floats + 8 * blocks}},
  };
  std::map<std::string, json> rows;
  for (const json& row : j["ops"]) rows[row["op"].get<std::string>()] = row;
  for (const auto& [op, e] : expected) {
    ASSERT_TRUE(rows.count(op)) << op << " missing from " << j["ops"].dump();
    const json& row = rows[op];
    const bool flops = row.contains("flops");
    EXPECT_EQ(flops,
              op.rfind("gemm", 0) == 0 || op.rfind("attention", 0) == 0 || op == "lm_head_loss")
        << op;
    EXPECT_EQ(row["calls"].get<double>(), e.calls) << op;
    const double work = row[flops ? "flops" : "bytes"].get<double>();
    EXPECT_NEAR(work, e.work, 1e-9 * e.work) << op;
    const double s = row["s"].get<double>();
    EXPECT_GT(s, 0) << op;
    const double rate = row["rate"].get<double>();
    EXPECT_NEAR(rate, work / s / (flops ? 1e12 : 1e9), 1e-9 * rate) << op;
    EXPECT_EQ(row["unit"], flops ? "TFLOPS" : "GB/s") << op;
    const double ceiling = row["ceiling"].get<double>();
    EXPECT_GT(ceiling, 0) << op;
    const double fraction = row["fraction"].get<double>();
    EXPECT_GT(fraction, 0) << op;
    EXPECT_TRUE(std::isfinite(fraction)) << op;
    EXPECT_NEAR(fraction, rate / ceiling, 1e-9 * fraction) << op;
    EXPECT_FALSE(row["overlapped"].get<bool>()) << op;  // the CPU converts nothing: all on compute
  }
  EXPECT_EQ(rows.size(), expected.size()) << j["ops"].dump();  // no AdamW on the device, no bias

  // The ceilings, and the sum row against the step.
  const json& ceilings = j["op_ceilings"];
  EXPECT_EQ(ceilings["copy_bytes"], 64 << 20);
  EXPECT_EQ(ceilings["gemm_n"], 512);
  EXPECT_NEAR(rows["add"]["ceiling"].get<double>(), ceilings["copy_gb_s"].get<double>(), 1e-9);
  EXPECT_NEAR(rows["gemm_forward"]["ceiling"].get<double>(), ceilings["gemm_tflops"].get<double>(),
              1e-12);
  const json& sum = j["ops_sum"];
  double total = 0;
  for (const auto& [op, row] : rows) total += row["s"].get<double>();
  EXPECT_NEAR(sum["s"].get<double>(), total, 1e-9);
  EXPECT_EQ(sum["step_s"], j["step_s"]);
  EXPECT_NEAR(sum["other_s"].get<double>(),
              sum["profiled_step_s"].get<double>() - sum["s"].get<double>(), 1e-9);

  // The profiled step is not one of the timed ones: the link bytes are still one step's.
  StreamingConfig sc;
  sc.micro_batch_size = 2;
  sc.max_micro_batches = 2;
  sc.seq_len = 32;
  const StreamingEngine::LinkBytes link = StreamingEngine::plan_link_bytes(layout, sc);
  EXPECT_EQ(j["h2d_bytes"].get<double>(), static_cast<double>(link.h2d));
  EXPECT_EQ(j["d2h_bytes"].get<double>(), static_cast<double>(link.d2h));

  // The same as a table under the step's figures.
  r = run({"bench", "--model", "llama-tiny", "--backend", "cpu", "--micro-batch", "2", "--seq-len",
           "32", "--micro-batches", "2", "--steps", "1", "--warmup", "1", "--ops"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* text : {"op (one step)", "gemm_backward", "attention_forward", "sum",
                           "ceilings, this process: copy_d2d of 64 MiB"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << " in " << r.out;
}

TEST(BenchCommand, SweepsEveryCombinationInOneProcess) {
  RunResult r = run({"bench", "--model", "llama-tiny", "--backend", "cpu", "--seq-len", "32",
                     "--micro-batch", "1,2", "--tokens-per-step", "128", "--weight-slots", "2,3",
                     "--steps", "1", "--warmup", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  const int expected[4][3] = {
      {1, 4, 2}, {1, 4, 3}, {2, 2, 2}, {2, 2, 3}};  // micro-batch, micro-batches, slots
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rows[i]["micro_batch"], expected[i][0]);
    EXPECT_EQ(rows[i]["micro_batches"], expected[i][1]);
    EXPECT_EQ(rows[i]["weight_slots"], expected[i][2]);
    EXPECT_EQ(rows[i]["tokens_per_step"], 128);
    EXPECT_GT(rows[i]["tokens_per_s"].get<double>(), 0);
  }
}

// --checkpoints host keeps every activation checkpoint in pinned host memory: less HBM, and the
// checkpoints cross the link (down after the forward, up again for the backward).
TEST(BenchCommand, CheckpointsOnTheHostTradeHbmForLinkBytes) {
  std::map<std::string, json> by_place;
  for (const char* place : {"device", "host"}) {
    RunResult r = run({"bench", "--model", "llama-tiny", "--backend", "cpu", "--micro-batch", "2",
                       "--seq-len", "32", "--micro-batches", "2", "--checkpoints", place, "--steps",
                       "1", "--warmup", "1", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    by_place[place] = json::parse(r.out);
    EXPECT_EQ(by_place[place]["checkpoints"], place);
  }
  const json &device = by_place["device"], &host = by_place["host"];
  EXPECT_LT(host["peak_hbm_bytes"].get<double>(), device["peak_hbm_bytes"].get<double>());
  EXPECT_GT(host["h2d_bytes"].get<double>(), device["h2d_bytes"].get<double>());
  EXPECT_GT(host["d2h_bytes"].get<double>(), device["d2h_bytes"].get<double>());

  RunResult bad = run({"bench", "--model", "llama-tiny", "--checkpoints", "ssd"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--checkpoints is device or host, got 'ssd'"), std::string::npos)
      << bad.err;
}

// --device-checkpoint-layers L keeps only the first L layers' checkpoints on the device (the
// planner's trade): the others' bytes move to pinned host memory and cross the link, down once and
// up twice a step (the head's input up once), and the step's losses are the same.
TEST(BenchCommand, CheckpointsOfTheFirstLayersOnTheDevice) {
  RunResult r = run({"bench", "--model", "llama-tiny", "--backend", "cpu", "--micro-batch", "2",
                     "--seq-len", "32", "--micro-batches", "2", "--device-checkpoint-layers",
                     "-1,1", "--steps", "1", "--warmup", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  const json &every = rows[0], &split = rows[1];
  EXPECT_EQ(every["device_checkpoint_layers"], -1);
  EXPECT_EQ(split["device_checkpoint_layers"], 1);
  EXPECT_EQ(every["checkpoint_bytes_host"], 0);
  const uint64_t buffer = 2 * 32 * sizeof(float) * 64;  // [2 x 32 tokens, hidden 64] fp32
  const int layers = 5 + 1;                             // llama-tiny's 5 and the head's input
  const int micro_batches = 2;
  const uint64_t host = (layers - 1) * micro_batches * buffer;
  EXPECT_EQ(split["checkpoint_bytes_host"].get<uint64_t>(), host);
  EXPECT_EQ(split["checkpoint_bytes_device"].get<uint64_t>(),
            every["checkpoint_bytes_device"].get<uint64_t>() - host);
  EXPECT_EQ(split["h2d_bytes"].get<uint64_t>() - every["h2d_bytes"].get<uint64_t>(),
            2 * host - micro_batches * buffer);
  EXPECT_EQ(split["d2h_bytes"].get<uint64_t>() - every["d2h_bytes"].get<uint64_t>(), host);
}

// --saved-activation-layers S keeps the last S layers' activations on the device, whose backward
// skips the recompute, and --mlp-recompute-layers R all but the MLP's of the R before them: S and R
// micro-batch areas of BlockMath::saved_bytes more, whole and without the MLP's (the same bits:
// SavedActivations.* in train-test; bench's configurations train one state on, so their losses
// differ). Both sweep.
TEST(BenchCommand, SavedActivationLayersTakeTheirBytes) {
  RunResult r = run({"bench",      "--model",
                     "llama-tiny", "--backend",
                     "cpu",        "--micro-batch",
                     "2",          "--seq-len",
                     "32",         "--micro-batches",
                     "2",          "--saved-activation-layers",
                     "0,2",        "--mlp-recompute-layers",
                     "0,3",        "--steps",
                     "1",          "--warmup",
                     "1",          "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  const ModelConfig c = *model_preset("llama-tiny");
  const uint64_t whole = BlockMath::saved_bytes(c, 2 * 32, DType::kF32);
  const uint64_t part = BlockMath::saved_bytes(c, 2 * 32, DType::kF32, /*mlp=*/false);
  const int counts[4][2] = {{0, 0}, {0, 3}, {2, 0}, {2, 3}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rows[i]["saved_activation_layers"], counts[i][0]) << i;
    EXPECT_EQ(rows[i]["mlp_recompute_layers"], counts[i][1]) << i;
    EXPECT_EQ(rows[i]["saved_activation_bytes"].get<uint64_t>(),
              2 * (counts[i][0] * whole + counts[i][1] * part))
        << i;
  }
  EXPECT_LT(part, whole);
  r = run({"bench", "--model", "llama-tiny", "--backend", "cpu", "--micro-batch", "2", "--seq-len",
           "32", "--saved-activation-layers", "6", "--steps", "1", "--json"});
  EXPECT_NE(r.out.find("saved_activation_layers 6 and mlp_recompute_layers 0 are not counts of "
                       "the model's 5 layers"),
            std::string::npos)
      << r.out << r.err;
}

TEST(BenchCommand, BadArgumentsSayWhatIsWrong) {
  RunResult r = run({"bench", "--model", "llama-tiny", "--micro-batch", "2", "--seq-len", "32",
                     "--tokens-per-step", "100"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not a multiple of micro-batch x seq-len = 64"), std::string::npos) << r.err;
  r = run({"bench", "--model", "llama-tiny", "--tokens-per-step", "128", "--micro-batches", "2"});
  EXPECT_EQ(r.code, 2);
  r = run({"bench", "--model", "llama-tiny", "--steps", "0"});
  EXPECT_EQ(r.code, 2);
  r = run({"bench", "--model", "llama-tiny", "--micro-batch", "2,x"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("got 'x'"), std::string::npos) << r.err;
  r = run({"bench", "--json"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(json::parse(r.out)["error"], "invalid argument");
  r = run({"bench", "--model", "no-such-shape", "--backend", "cpu"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("tinyllama-1.1b"), std::string::npos) << r.err;
}

TEST(ProbeCommand, CpuBackendKeepsItsKeys) {
  TempDir tmp;
  RunResult r = run({"probe", "--backend", "cpu", "--ssd-dir", tmp.path(), "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["backend"], "cpu");
  for (const char* key : {"compute_gflops", "h2d_gbps", "host_mem_gbps", "dram_total_bytes",
                          "dram_available_bytes", "ssd_free_bytes"}) {
    ASSERT_TRUE(j.contains(key) && j[key].is_number()) << key << " in " << r.out;
  }
  EXPECT_GT(j["compute_gflops"].get<double>(), 0);
  // Measured only on a GPU: unavailable, not 0.
  for (const char* key : {"d2h_gbps", "duplex_gbps", "adamw_mparams_per_s", "device", "attention"})
    EXPECT_TRUE(j[key].is_null()) << key;
}

// Every GPU by CUDA index, in `probe` and in `probe --gpu` (what New run lists): on a machine
// without a GPU, driver or CUDA module the list is there and empty, and the text says so.
TEST(ProbeCommand, ListsEveryGpuOfTheMachine) {
  const Result<int> count = compute::cuda_device_count();
  const size_t gpus = count.ok() ? static_cast<size_t>(*count) : 0;
  TempDir tmp;
  RunResult full = run({"probe", "--backend", "cpu", "--ssd-dir", tmp.path(), "--json"});
  ASSERT_EQ(full.code, 0) << full.err;
  RunResult quick = run({"probe", "--gpu", "--json"});
  ASSERT_EQ(quick.code, 0) << quick.err;
  for (const std::string& out : {full.out, quick.out}) {
    const json j = json::parse(out);
    ASSERT_TRUE(j.contains("gpus") && j["gpus"].is_array()) << out;
    ASSERT_EQ(j["gpus"].size(), gpus) << out;
    for (size_t i = 0; i < gpus; ++i) {
      const json& g = j["gpus"][i];
      EXPECT_EQ(g["index"], i);
      if (!g["usable"].get<bool>()) continue;
      for (const char* key : {"name", "pci_bus_id"}) EXPECT_TRUE(g[key].is_string()) << key;
      EXPECT_GT(g["total_bytes"].get<uint64_t>(), 0u);
      EXPECT_GE(g["compute_capability"].get<int>(), 80);
    }
  }
  RunResult text = run({"probe", "--gpu"});
  ASSERT_EQ(text.code, 0) << text.err;
  if (gpus == 0)
    EXPECT_NE(text.out.find("\nGPUs: none\n"), std::string::npos) << text.out;
  else
    EXPECT_NE(text.out.find("\nGPU 0: "), std::string::npos) << text.out;
}

}  // namespace
}  // namespace spillway::testing
