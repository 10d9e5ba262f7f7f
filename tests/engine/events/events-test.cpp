// The plan and the events of events.jsonl (events/plan.h, events/events.h): each struct's to_json
// writes what the worker wrote before the structs existed, byte for byte (lines of a run made
// before, below), and from_json reads it back to the same struct; a damaged field reads as absent.
#include "events/events.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "events/plan.h"

namespace spillway {
namespace {
using nlohmann::json;

// The fields of a line as the writer wrote them: the line without "type" and "t".
json fields_of(const std::string& line) {
  json j = json::parse(line);
  j.erase("type");
  j.erase("t");
  return j;
}

// Lines of an events.jsonl written before the events were typed (a CPU run of llama-tiny).
const char* const kState =
    R"({"type":"state","t":0.5,"device":0,"master_tier":"dram","optimizer_tier":"dram","parameters":260000,"run_id":"20260101-120000-abcd","ssd_folder":"","state":"training","step":0,"total_steps":200})";
const char* const kStep =
    R"({"type":"step","t":0.4,"grad_norm":2.5,"loss":6.1,"lr":0.0003,"model_tflops":0.004,"ssd_read_bytes":0,"ssd_write_bytes":0,"step":1,"step_s":0.4,"tokens":1024,"tokens_per_s":2560.0,"total_steps":200})";
const char* const kEval =
    R"({"type":"eval","t":0.2,"eval_s":0.1,"loss":6.2,"perplexity":492.7,"step":0})";
const char* const kCheckpoint =
    R"({"type":"checkpoint","t":1.0,"bytes":3200000,"path":"/tmp/run/checkpoints/step-000100","step":100,"write_s":0.02})";
const char* const kExport =
    R"({"type":"export","t":1.2,"path":"/tmp/run/export","tokenizer":true})";
const char* const kLog = R"({"type":"log","t":0.5,"level":"info","message":"backend cpu: no GPU"})";
const char* const kError =
    R"({"type":"error","t":1.1,"code":"io","message":"cannot write: No space left on device"})";
const char* const kSpan =
    R"({"type":"span","t":0.35,"block":"layer","end_s":0.34,"layer":3,"phase":"forward","start_s":0.31})";
const char* const kHeadSpan =
    R"({"type":"span","t":0.35,"block":"head","end_s":0.35,"layer":null,"phase":"backward","start_s":0.34})";
const char* const kSample =
    R"({"type":"sample","t":0.3,"disk":{"device":"vda","read_gbps":0.01,"write_gbps":0.02},"gpu_mem_total_bytes":85000000000,"gpu_mem_used_bytes":81000000000,"gpu_util_pct":97.0,"interval_s":0.1,"links":{"d2h_bytes":500000,"d2h_gbps":0.7,"h2d_bytes":1000000,"h2d_gbps":1.5,"ssd_read_bytes":0,"ssd_write_bytes":0},"rss_bytes":52428800,"tiers":{"dram":{"available_bytes":20000000000,"checkpoints_bytes":0,"gradients_bytes":0,"master_bytes":1040000,"optimizer_bytes":2080000,"total_bytes":25000000000,"used_bytes":3120000,"weights_bytes":0,"workspace_bytes":0},"hbm":{"capacity_bytes":8000,"checkpoints_bytes":4096,"device_free_bytes":100,"device_total_bytes":8000,"gradients_bytes":1024,"master_bytes":0,"optimizer_bytes":0,"used_bytes":7680,"weights_bytes":2048,"workspace_bytes":512},"ssd":{"checkpoints_bytes":0,"free_bytes":80000000000,"gradients_bytes":0,"master_bytes":0,"optimizer_bytes":0,"total_bytes":250000000000,"used_bytes":0,"weights_bytes":0,"workspace_bytes":0}}})";
const char* const kMeasured =
    R"({"type":"measured","t":2.0,"figures":{"d2h_bytes":1.3e10,"h2d_bytes":3.9e10,"peak_dram_bytes":810000000000,"peak_hbm_bytes":null,"step_s":13.0,"tokens_per_s":1260.3},"steps":3,"versus_plan":{"d2h_bytes":{"measured":1.3e10,"predicted":1.3e10,"ratio":1.0},"h2d_bytes":{"measured":3.9e10,"predicted":2.6e10,"ratio":1.5},"peak_dram_bytes":{"measured":810000000000.0,"predicted":900000000000.0,"ratio":0.9},"peak_hbm_bytes":{"measured":null,"predicted":null,"ratio":null},"step_s":{"measured":13.0,"predicted":12.5,"ratio":1.04},"tokens_per_s":{"measured":1260.3,"predicted":1310.7,"ratio":0.9615}}})";
// A plan as make_plan writes it (CPU backend, two CPU ranks, suggestion included).
const char* const kPlan =
    R"({"type":"plan","t":0.01,"backend":"cpu","checkpoints":"device","devices":{"count":2,"indices":[],"nccl_bytes":0.0,"nccl_s":0.0},"fits":true,"grad_accum":1,"machine":{"adamw_params_per_s":0.0,"compute_flops":50000000000.0,"cpu_attention_s_per_score":2.5e-08,"cpu_gemm_flops":40000000000.0,"cpu_stream_bytes_per_s":0.0,"cpu_threads":0.0,"d2h_bytes_per_s":0.0,"device":"","duplex_bytes_per_s":0.0,"gpus":0.0,"h2d_bytes_per_s":8000000000.0,"host_mem_bytes_per_s":10000000000.0,"nccl_bus_bytes_per_s":0.0,"ssd_bytes_per_s":0.0},"micro_batch_size":4,"model":{"architecture":"LlamaForCausalLM","hidden_size":64,"layers":2,"parameters":260000.0,"vocab_size":256},"reason":"","seq_len":128,"state":{"blocks":4,"device_checkpoint_layers":3,"hbm_blocks":0,"hbm_bytes":0,"why":"none on the CPU backend: its device memory is DRAM already"},"step":{"accumulate_s":0.0,"adamw_s":0.000728,"attention_s":0.0,"bottleneck":"compute","calibrated":true,"compute_s":0.05,"d2h_bytes":1040000.0,"d2h_s":0.00013,"elementwise_s":0.0,"eta_s":10.0,"flops":2500000000.0,"gemm_s":0.0,"gpu_adamw_s":0.0,"grad_norm_s":0.000104,"h2d_bytes":2080000.0,"h2d_s":0.00026,"key_bias_s":0.0,"link_s":0.00039,"lm_head_s":0.0,"model_flops":1900000000.0,"model_tflops":0.038,"optimizer_s":0.000832,"optimizer_visible_s":0.000832,"ssd_s":0.0,"step_s":0.05,"tokens":512.0,"tokens_per_s":10240.0,"total_steps":200},"suggestion":{"checkpoints_on_device":true,"device_checkpoint_layers":3,"fits":true,"grad_accum":1,"hbm_free_bytes":0,"hbm_needed_bytes":123456,"hbm_state_blocks":0,"micro_batch_size":4,"model_tflops":0.038,"same_as_job":true,"step_s":0.05,"tokens_per_s":10240.0,"tokens_per_step":512,"why":"the CPU backend runs compute and AdamW on the same cores: a larger step hides nothing"},"tiers":{"dram":{"categories":{"checkpoints_bytes":0,"gradients_bytes":1040000,"master_bytes":1040000,"optimizer_bytes":2080000,"weights_bytes":0},"free_bytes":20000000000,"needed_bytes":4160000,"runtime_bytes":270000000,"total_bytes":25000000000},"hbm":{"categories":{"checkpoints_bytes":65536,"gradients_bytes":4096,"weights_bytes":8192,"workspace_bytes":1024},"free_bytes":0,"needed_bytes":123456,"runtime_bytes":0,"total_bytes":0},"ssd":{"categories":{"master_bytes":0,"optimizer_bytes":0},"free_bytes":80000000000,"needed_bytes":0,"total_bytes":250000000000}}})";

template <typename Event, typename FromJson>
void expect_round_trip(const char* line, FromJson from_json) {
  const json written = fields_of(line);
  const Event e = from_json(written);
  EXPECT_EQ(to_json(e).dump(), written.dump()) << line;
}

TEST(Events, EveryTypeWritesWhatTheWorkerWroteAndReadsItBack) {
  expect_round_trip<StateEvent>(kState, state_event_from_json);
  expect_round_trip<StepEvent>(kStep, step_event_from_json);
  expect_round_trip<EvalEvent>(kEval, eval_event_from_json);
  expect_round_trip<CheckpointEvent>(kCheckpoint, checkpoint_event_from_json);
  expect_round_trip<ExportEvent>(kExport, export_event_from_json);
  expect_round_trip<LogEvent>(kLog, log_event_from_json);
  expect_round_trip<ErrorEvent>(kError, error_event_from_json);
  expect_round_trip<SpanEvent>(kSpan, span_event_from_json);
  expect_round_trip<SpanEvent>(kHeadSpan, span_event_from_json);
  expect_round_trip<SampleEvent>(kSample, sample_event_from_json);
  expect_round_trip<MeasuredEvent>(kMeasured, measured_event_from_json);
}

TEST(Events, ThePlanWritesWhatMakePlanWroteAndReadsItBack) {
  const json written = fields_of(kPlan);
  const Result<Plan> plan = plan_from_json(written);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(to_json(*plan).dump(), written.dump());
  EXPECT_TRUE(plan->on_cpu());
  EXPECT_TRUE(plan->checkpoints_on_device);
  EXPECT_EQ(plan->step.tokens_per_s, 10240.0);
  ASSERT_TRUE(plan->suggestion.has_value());
  EXPECT_EQ(plan->suggestion->tokens_per_step, 512);
  EXPECT_FALSE(plan->hbm.master_bytes.has_value());  // HBM holds no master category
  EXPECT_EQ(plan->state.blocks, 4);
  EXPECT_EQ(plan->state.hbm_blocks, 0);
  EXPECT_EQ(plan->suggestion->hbm_state_blocks, 0);
  EXPECT_EQ(plan->state.device_checkpoint_layers, 3);  // every layer's, and the head's input
  EXPECT_EQ(plan->suggestion->device_checkpoint_layers, 3);
  EXPECT_FALSE(plan->ssd.runtime_bytes.has_value());
  EXPECT_EQ(plan->devices.count, 2);
  EXPECT_TRUE(plan->devices.indices.empty());  // CPU ranks name no GPU
  // A plan written before data parallel and the trade: one GPU, the machine's GPUs not counted.
  json before = written;
  before.erase("devices");
  before["state"].erase("device_checkpoint_layers");
  before["suggestion"].erase("device_checkpoint_layers");
  before["machine"].erase("gpus");
  before["machine"].erase("nccl_bus_bytes_per_s");
  const Result<Plan> old = plan_from_json(before);
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ(old->devices.count, 1);
  EXPECT_TRUE(old->devices.indices.empty());
  EXPECT_EQ(old->devices.nccl_s, 0.0);
  EXPECT_EQ(old->machine.gpus, 0.0);
  EXPECT_EQ(old->machine.nccl_bus_bytes_per_s, 0.0);
  // Nor the checkpoints' split: not recorded, and not written back.
  EXPECT_EQ(old->state.device_checkpoint_layers, -1);
  EXPECT_EQ(old->suggestion->device_checkpoint_layers, -1);
  EXPECT_FALSE(to_json(*old)["state"].contains("device_checkpoint_layers"));
  // A GPU plan's devices and the machine's GPUs come back as they were written.
  json gpus = written;
  gpus["backend"] = "cuda";
  gpus["devices"] = {{"count", 2}, {"indices", {1, 0}}, {"nccl_bytes", 6.7e9}, {"nccl_s", 0.0045}};
  gpus["machine"]["gpus"] = 2.0;
  gpus["machine"]["nccl_bus_bytes_per_s"] = 150e9;
  const Result<Plan> two = plan_from_json(gpus);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(two->devices.indices, (std::vector<int>{1, 0}));
  EXPECT_EQ(two->devices.nccl_s, 0.0045);
  EXPECT_EQ(two->devices.nccl_bytes, 6.7e9);
  EXPECT_EQ(two->machine.gpus, 2.0);
  EXPECT_EQ(two->machine.nccl_bus_bytes_per_s, 150e9);
  EXPECT_EQ(to_json(*two).dump(), gpus.dump());
  // A plan without fits or tiers is not a plan.
  EXPECT_FALSE(plan_from_json(json{{"fits", true}}).ok());
  EXPECT_FALSE(plan_from_json(json::array()).ok());
}

TEST(Events, LinesParseByTypeAndDamagedFieldsReadAsAbsent) {
  const auto line = parse_event_line(kStep);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->type, EventType::kStep);
  EXPECT_DOUBLE_EQ(line->t, 0.4);
  EXPECT_EQ(step_event_from_json(line->fields).tokens, 1024);
  EXPECT_FALSE(parse_event_line("not json").has_value());
  EXPECT_FALSE(parse_event_line(R"({"t":1})").has_value());
  EXPECT_FALSE(parse_event_line(R"({"type":""})").has_value());
  EXPECT_FALSE(parse_event_line(std::string(200, '[') + std::string(200, ']')).has_value());
  const auto unknown = parse_event_line(R"({"type":"future","t":3})");
  ASSERT_TRUE(unknown.has_value());
  EXPECT_FALSE(unknown->type.has_value());
  EXPECT_EQ(unknown->type_name, "future");
  // Out of range, of another type, or missing: clamped or absent, never thrown.
  const StepEvent s = step_event_from_json(
      json::parse(R"({"step":7.8e95,"tokens":-3,"loss":"x","total_steps":null})"));
  EXPECT_EQ(s.step, INT64_MAX);
  EXPECT_EQ(s.tokens, -3);
  EXPECT_EQ(s.loss, 0);
  EXPECT_FALSE(s.total_steps.has_value());
  EXPECT_EQ(step_event_from_json(json::parse(R"({"ssd_read_bytes":-1})")).ssd_read_bytes,
            std::optional<uint64_t>(0));
  for (EventType t :
       {EventType::kState, EventType::kSample, EventType::kPlan, EventType::kMeasured})
    EXPECT_EQ(parse_event_type(event_type_name(t)), t);
}

// A data-parallel run's span names the GPU that did the work; the optimizer's, the step's and a
// one-GPU run's name none and are written without the key, as before data parallel (kSpan).
TEST(Events, SpanNamesItsDeviceOnlyWhenItHasOne) {
  const char* const gpu3 =
      R"({"type":"span","t":0.35,"block":"layer","device":3,"end_s":0.34,"layer":3,"phase":"reduce","start_s":0.31})";
  expect_round_trip<SpanEvent>(gpu3, span_event_from_json);
  const SpanEvent tagged = span_event_from_json(fields_of(gpu3));
  EXPECT_EQ(tagged.device, std::optional<int>(3));
  EXPECT_EQ(tagged.phase, "reduce");
  const SpanEvent untagged = span_event_from_json(fields_of(kSpan));
  EXPECT_FALSE(untagged.device.has_value());
  EXPECT_FALSE(to_json(untagged).contains("device"));
  SpanEvent zero = untagged;
  zero.device = 0;  // GPU 0 of a data-parallel run is named, not left out
  EXPECT_EQ(to_json(zero)["device"], 0);
  EXPECT_EQ(span_event_from_json(to_json(zero)).device, std::optional<int>(0));
  // Damaged: of another type, negative or null reads as none, never thrown.
  for (const char* bad :
       {R"({"device":"1"})", R"({"device":-1})", R"({"device":null})", R"({"device":[0]})"})
    EXPECT_FALSE(span_event_from_json(json::parse(bad)).device.has_value()) << bad;
  EXPECT_FALSE(span_event_from_json(json::array()).device.has_value());
}

TEST(Events, SampleListsEachGpuAndOlderSamplesReadWithNone) {
  // A two-GPU sample: each GPU by its CUDA index, GPU 1 without NVML's utilisation.
  const char* const line =
      R"({"type":"sample","t":0.3,"gpu_mem_used_bytes":30,"gpus":[{"hbm_total_bytes":80,"hbm_used_bytes":10,"index":0,"pcie_rx_bytes_per_s":5.0e9,"pcie_tx_bytes_per_s":1.0e9,"util_percent":97.0},{"hbm_total_bytes":80,"hbm_used_bytes":20,"index":1}],"links":{},"tiers":{}})";
  expect_round_trip<SampleEvent>(line, sample_event_from_json);
  const SampleEvent e = sample_event_from_json(fields_of(line));
  ASSERT_EQ(e.gpus.size(), 2u);
  EXPECT_EQ(e.gpus[0].index, 0);
  EXPECT_EQ(e.gpus[0].util_percent, 97.0);
  EXPECT_EQ(e.gpus[0].pcie_rx_bytes_per_s, 5.0e9);
  EXPECT_EQ(e.gpus[1].index, 1);
  EXPECT_EQ(e.gpus[1].hbm_used_bytes, std::optional<uint64_t>(20));
  EXPECT_FALSE(e.gpus[1].util_percent.has_value());
  EXPECT_FALSE(e.gpus[1].pcie_tx_bytes_per_s.has_value());
  // Written before "gpus" existed: none, and the line writes back without the key.
  EXPECT_TRUE(sample_event_from_json(fields_of(kSample)).gpus.empty());
  EXPECT_FALSE(to_json(sample_event_from_json(fields_of(kSample))).contains("gpus"));
  // Damaged: not an array, or entries without an index or of another type, are left out.
  EXPECT_TRUE(sample_event_from_json(json::parse(R"({"gpus":{"index":0}})")).gpus.empty());
  const SampleEvent damaged = sample_event_from_json(json::parse(
      R"({"gpus":[7,{"util_percent":3},{"index":-1},{"index":"0"},{"index":2,"util_percent":"x","hbm_used_bytes":-5}]})"));
  ASSERT_EQ(damaged.gpus.size(), 1u);
  EXPECT_EQ(damaged.gpus[0].index, 2);
  EXPECT_FALSE(damaged.gpus[0].util_percent.has_value());
  EXPECT_EQ(damaged.gpus[0].hbm_used_bytes, std::optional<uint64_t>(0));
}

}  // namespace
}  // namespace spillway
