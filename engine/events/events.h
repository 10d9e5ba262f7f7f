// The events of events.jsonl, the live protocol between the worker and the GUI (README,
// "events.jsonl"): one struct per event type, each with one to_json (the line's fields: the writer
// adds "type" and "t" in front, telemetry/event-writer.h) and one from_json (leveldb's VersionEdit
// EncodeTo/DecodeFrom). The trainer and the run recorder write them, the GUI (RunSeries, Live,
// History) and the tests read them; nobody else names a key. The plan event is the Plan of
// events/plan.h; the measured event carries the StepFigures below.
//
// Reading never throws: a field that is missing or of another type reads as absent (nullopt) or as
// its default, and numbers out of an integer's range are clamped, so a damaged or older file reads
// as far as it can (fuzz target events). What is written is byte for byte what the worker wrote
// before these types existed: the same keys, values and types (nlohmann::json sorts the keys).
//
// Plain copyable values; no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "events/plan.h"

namespace spillway {

enum class EventType {
  kState,
  kStep,
  kEval,
  kCheckpoint,
  kMeasured,
  kPlan,
  kExport,
  kLog,
  kError,
  kSpan,
  kSample
};
// "state", "step", ...: the line's "type".
const char* event_type_name(EventType type);
// The type of a line's "type", or nullopt for one this version does not know.
std::optional<EventType> parse_event_type(std::string_view name);

// One line of events.jsonl, parsed: its type name (as written, known or not), its t (seconds since
// the run started; 0 when absent) and the whole object, for the event's from_json.
struct EventLine {
  std::string type_name;
  std::optional<EventType> type;
  double t = 0;
  nlohmann::json fields;
};
// nullopt for a line that is not a JSON object with a non-empty string "type" (a torn or damaged
// line), or that nests deeper than kMaxJsonDepth.
std::optional<EventLine> parse_event_line(std::string_view line);

// {"state": name, ...}: the run's state ("starting", "loading", "training", "checkpointing",
// "stopping", "completed", "stopped", "failed"), with what the state change knows.
struct StateEvent {
  std::string state;
  std::optional<std::string> run_id;
  std::optional<int64_t> step, total_steps;
  std::optional<uint64_t> parameters;
  std::optional<uint64_t> device_bytes;  // "device": the engine's device arena, bytes
  std::optional<std::string> optimizer_tier, master_tier;  // "dram", "ssd", "dram+ssd"
  std::optional<std::string> ssd_folder;
  std::optional<double>
      eval_loss;  // the last evaluation's loss at the end (NaN: none, written null)

  // {"state": state, "step": step}: the usual state change.
  static StateEvent at_step(std::string state, int64_t step) {
    StateEvent e;
    e.state = std::move(state);
    e.step = step;
    return e;
  }
};

// One optimizer step.
struct StepEvent {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  int64_t tokens = 0;  // trained so far
  double tokens_per_s = 0, model_tflops = 0, step_s = 0;
  std::optional<int64_t> total_steps;
  // What the previous step's AdamW read from and wrote to the SSD tier.
  std::optional<uint64_t> ssd_read_bytes, ssd_write_bytes;
};

struct EvalEvent {
  int64_t step = 0;
  double loss = 0, perplexity = 0;
  std::optional<double> eval_s;
};

struct CheckpointEvent {
  int64_t step = 0;
  std::string path;
  uint64_t bytes = 0;
  double write_s = 0;
};

struct ExportEvent {
  std::string path;
  bool tokenizer = false;  // the export holds a tokenizer
};

struct LogEvent {
  std::string level;  // core/log.h, log_level_name: "debug", "info", "warn", "error"
  std::string message;
};

struct ErrorEvent {
  std::string code;  // error_code_key: "invalid_argument", "io", ...
  std::string message;
};

// The timeline (telemetry/span.h): block "embed" | "layer" | "head" | "step", the layer's index or
// none, the phase ("h2d", "forward", "backward", "d2h", "reduce", "optimizer", "ssd_read",
// "ssd_write", "compute"), start and end in the events' clock (written null where not finite),
// and in a data-parallel run the device whose engine did the work: its CUDA index, on the CPU
// backend its rank. The key is left out where there is none (one GPU; the optimizer's, the SSD's
// and the step's spans), so a one-GPU run writes what it wrote before data parallel; an index
// that is negative or not a number reads as none.
struct SpanEvent {
  std::string block;
  std::optional<int> layer;
  std::string phase;
  double start_s = 0, end_s = 0;
  std::optional<int> device;
};

// One tier of a sample: the bytes the engine holds there by category ("weights", "gradients",
// "master", "optimizer", "checkpoints", "workspace"), their sum, and what the system reports.
struct SampleTier {
  std::map<std::string, uint64_t>
      category_bytes;  // category name -> bytes ("<name>_bytes" in the line)
  std::optional<uint64_t> used_bytes, capacity_bytes;
  std::optional<uint64_t> device_total_bytes, device_free_bytes;  // hbm: the device's own reading
  std::optional<uint64_t> total_bytes, available_bytes,
      free_bytes;  // dram: meminfo; ssd: the folder's file system
};

// One link of a sample ("h2d", "d2h", "ssd_read", "ssd_write").
struct SampleLink {
  std::optional<double> gbps;     // over the last interval; absent on the first sample
  std::optional<uint64_t> bytes;  // moved since the run started
};

struct SampleDisk {
  std::string device;
  double read_gbps = 0, write_gbps = 0;
};

// One GPU of the run in a sample ("gpus"), by its CUDA index (placement.devices, RunAssembly's
// devices), as NVML reports it; each metric absent while the GPU does not report it. PCIe in bytes
// per second (NVML's KB/s x 1024, over its 20 ms window): rx host -> GPU, tx GPU -> host.
struct SampleGpu {
  int index = 0;
  std::optional<uint64_t> hbm_used_bytes, hbm_total_bytes;
  std::optional<double> util_percent;
  std::optional<double> pcie_rx_bytes_per_s, pcie_tx_bytes_per_s;
  bool operator==(const SampleGpu&) const = default;
};
nlohmann::json to_json(const SampleGpu& g);
// nullopt for a value that is not an object with an integer "index" >= 0.
std::optional<SampleGpu> sample_gpu_from_json(const nlohmann::json& j);

// Tier and link telemetry, about 10 Hz (telemetry/telemetry-sampler.h). A GPU field is present only
// while the worker reads it (a missing metric is unavailable, never 0). With several GPUs the
// gpu_* and pcie_* fields are the host's totals over them (memory, power and PCIe summed,
// utilisation averaged, temperature the hottest) and `gpus` has each; one GPU's run lists it in
// `gpus` too. Samples written before `gpus` existed read with it empty.
struct SampleEvent {
  std::map<std::string, SampleTier> tiers;  // "hbm", "dram", "ssd"
  std::map<std::string, SampleLink> links;
  std::optional<SampleDisk> disk;
  std::optional<uint64_t> rss_bytes;
  std::optional<double> interval_s;
  std::optional<double> gpu_util_pct, gpu_power_w, gpu_temp_c, pcie_tx_gbps, pcie_rx_gbps;
  std::optional<uint64_t> gpu_mem_used_bytes, gpu_mem_total_bytes;
  std::vector<SampleGpu> gpus;  // "gpus": the run's GPUs in rank order; written only when non-empty
};

// A run's step figures (engine/train/run-figures.h): predicted by the plan or measured. Absent: not
// measured (the CPU backend has no HBM) or not predicted.
struct StepFigures {
  std::optional<double> step_s;             // seconds per optimizer step (median)
  std::optional<double> tokens_per_s;       // trained tokens per second at that step time
  std::optional<uint64_t> peak_hbm_bytes;   // device memory at its highest
  std::optional<uint64_t> peak_dram_bytes;  // host memory at its highest
  std::optional<double> h2d_bytes;          // host → device bytes per step
  std::optional<double> d2h_bytes;          // device → host bytes per step
};

// The figures in the order the worker prints and the GUI lists them.
enum class StepFigure { kStepS, kTokensPerS, kPeakHbmBytes, kPeakDramBytes, kH2dBytes, kD2hBytes };
inline constexpr std::array<StepFigure, 6> kStepFigures = {
    StepFigure::kStepS,         StepFigure::kTokensPerS, StepFigure::kPeakHbmBytes,
    StepFigure::kPeakDramBytes, StepFigure::kH2dBytes,   StepFigure::kD2hBytes};
// "step_s", "tokens_per_s", ...: the figure's key in the JSON.
const char* step_figure_key(StepFigure f);
// The figure's value as a double, absent where absent.
std::optional<double> figure_value(const StepFigures& f, StepFigure which);

// One figure measured against the plan: ratio = measured / predicted, absent where either is
// absent or the prediction is 0.
struct FigureComparison {
  std::optional<double> predicted, measured, ratio;
};
// Every figure's comparison, indexed by StepFigure.
struct FiguresVersusPlan {
  std::array<FigureComparison, kStepFigures.size()> rows;
  const FigureComparison& operator[](StepFigure f) const { return rows[static_cast<size_t>(f)]; }
  FigureComparison& operator[](StepFigure f) { return rows[static_cast<size_t>(f)]; }
};

// {"steps", "figures", "versus_plan"}: the figures measured over a run's steps against its plan's.
// `spillway-worker plan --measure N --json` prints the same object with the plan it was held
// against; a run's measured event leaves the plan out (its plan event has it).
struct MeasuredEvent {
  int64_t steps = 0;
  StepFigures figures;
  FiguresVersusPlan versus_plan;
  std::optional<Plan> plan;
};

nlohmann::json to_json(const StateEvent& e);
nlohmann::json to_json(const StepEvent& e);
nlohmann::json to_json(const EvalEvent& e);
nlohmann::json to_json(const CheckpointEvent& e);
nlohmann::json to_json(const ExportEvent& e);
nlohmann::json to_json(const LogEvent& e);
nlohmann::json to_json(const ErrorEvent& e);
nlohmann::json to_json(const SpanEvent& e);
nlohmann::json to_json(const SampleEvent& e);
// The figures with absent ones null (RunInfo::predicted_json / measured_json).
nlohmann::json to_json(const StepFigures& f);
nlohmann::json to_json(const FiguresVersusPlan& v);
nlohmann::json to_json(const MeasuredEvent& e);

StateEvent state_event_from_json(const nlohmann::json& j);
StepEvent step_event_from_json(const nlohmann::json& j);
EvalEvent eval_event_from_json(const nlohmann::json& j);
CheckpointEvent checkpoint_event_from_json(const nlohmann::json& j);
ExportEvent export_event_from_json(const nlohmann::json& j);
LogEvent log_event_from_json(const nlohmann::json& j);
ErrorEvent error_event_from_json(const nlohmann::json& j);
SpanEvent span_event_from_json(const nlohmann::json& j);
SampleEvent sample_event_from_json(const nlohmann::json& j);
StepFigures step_figures_from_json(const nlohmann::json& j);
FiguresVersusPlan figures_versus_plan_from_json(const nlohmann::json& j);
MeasuredEvent measured_event_from_json(const nlohmann::json& j);

}  // namespace spillway
