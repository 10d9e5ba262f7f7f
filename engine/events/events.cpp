#include "events/events.h"

#include <cmath>

#include "core/json-depth.h"
#include "events/json-fields.h"

namespace spillway {
namespace {

using nlohmann::json;
using namespace events_detail;

constexpr std::array<const char*, 11> kTypeNames = {"state",    "step", "eval",   "checkpoint",
                                                    "measured", "plan", "export", "log",
                                                    "error",    "span", "sample"};

template <typename T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

template <typename T>
json value_or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// A number that JSON cannot hold (NaN, ±inf) as null.
json number_or_null(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

// Field names of a sample's tier and link: "<category>_bytes", "<link>_gbps", "<link>_bytes".
constexpr std::string_view kBytesSuffix = "_bytes", kGbpsSuffix = "_gbps";
const char* const kTierFields[] = {"used_bytes",        "capacity_bytes", "device_total_bytes",
                                   "device_free_bytes", "total_bytes",    "available_bytes",
                                   "free_bytes"};

std::optional<uint64_t> SampleTier::*const kTierMembers[] = {
    &SampleTier::used_bytes,        &SampleTier::capacity_bytes, &SampleTier::device_total_bytes,
    &SampleTier::device_free_bytes, &SampleTier::total_bytes,    &SampleTier::available_bytes,
    &SampleTier::free_bytes};

bool is_tier_field(std::string_view key) {
  for (const char* f : kTierFields)
    if (key == f) return true;
  return false;
}

}  // namespace

const char* event_type_name(EventType type) {
  return kTypeNames[static_cast<size_t>(type)];
}

std::optional<EventType> parse_event_type(std::string_view name) {
  for (size_t i = 0; i < kTypeNames.size(); ++i)
    if (name == kTypeNames[i]) return static_cast<EventType>(i);
  return std::nullopt;
}

std::optional<EventLine> parse_event_line(std::string_view line) {
  if (json_nesting_depth(line) > kMaxJsonDepth) return std::nullopt;
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  std::optional<std::string> type = text(j, "type");
  if (!type || type->empty()) return std::nullopt;
  EventLine e;
  e.type_name = std::move(*type);
  e.type = parse_event_type(e.type_name);
  e.t = number(j, "t").value_or(0);
  e.fields = std::move(j);
  return e;
}

// ---- state

json to_json(const StateEvent& e) {
  json j = {{"state", e.state}};
  put(j, "run_id", e.run_id);
  put(j, "step", e.step);
  put(j, "total_steps", e.total_steps);
  put(j, "parameters", e.parameters);
  put(j, "device", e.device_bytes);
  put(j, "optimizer_tier", e.optimizer_tier);
  put(j, "master_tier", e.master_tier);
  put(j, "ssd_folder", e.ssd_folder);
  put(j, "eval_loss", e.eval_loss);
  return j;
}

StateEvent state_event_from_json(const json& j) {
  StateEvent e;
  e.state = text(j, "state").value_or("");
  e.run_id = text(j, "run_id");
  e.step = integer<int64_t>(j, "step");
  e.total_steps = integer<int64_t>(j, "total_steps");
  e.parameters = integer<uint64_t>(j, "parameters");
  e.device_bytes = integer<uint64_t>(j, "device");
  e.optimizer_tier = text(j, "optimizer_tier");
  e.master_tier = text(j, "master_tier");
  e.ssd_folder = text(j, "ssd_folder");
  e.eval_loss = number(j, "eval_loss");
  return e;
}

// ---- step

json to_json(const StepEvent& e) {
  json j = {{"step", e.step},
            {"loss", e.loss},
            {"lr", e.lr},
            {"grad_norm", e.grad_norm},
            {"tokens", e.tokens},
            {"tokens_per_s", e.tokens_per_s},
            {"model_tflops", e.model_tflops},
            {"step_s", e.step_s}};
  put(j, "total_steps", e.total_steps);
  put(j, "ssd_read_bytes", e.ssd_read_bytes);
  put(j, "ssd_write_bytes", e.ssd_write_bytes);
  return j;
}

StepEvent step_event_from_json(const json& j) {
  StepEvent e;
  e.step = integer<int64_t>(j, "step").value_or(0);
  e.loss = number(j, "loss").value_or(0);
  e.lr = number(j, "lr").value_or(0);
  e.grad_norm = number(j, "grad_norm").value_or(0);
  e.tokens = integer<int64_t>(j, "tokens").value_or(0);
  e.tokens_per_s = number(j, "tokens_per_s").value_or(0);
  e.model_tflops = number(j, "model_tflops").value_or(0);
  e.step_s = number(j, "step_s").value_or(0);
  e.total_steps = integer<int64_t>(j, "total_steps");
  e.ssd_read_bytes = integer<uint64_t>(j, "ssd_read_bytes");
  e.ssd_write_bytes = integer<uint64_t>(j, "ssd_write_bytes");
  return e;
}

// ---- eval, checkpoint, export, log, error

json to_json(const EvalEvent& e) {
  json j = {{"step", e.step}, {"loss", e.loss}, {"perplexity", e.perplexity}};
  put(j, "eval_s", e.eval_s);
  return j;
}

EvalEvent eval_event_from_json(const json& j) {
  return {integer<int64_t>(j, "step").value_or(0), number(j, "loss").value_or(0),
          number(j, "perplexity").value_or(0), number(j, "eval_s")};
}

json to_json(const CheckpointEvent& e) {
  return {{"step", e.step}, {"path", e.path}, {"bytes", e.bytes}, {"write_s", e.write_s}};
}

CheckpointEvent checkpoint_event_from_json(const json& j) {
  return {integer<int64_t>(j, "step").value_or(0), text(j, "path").value_or(""),
          integer<uint64_t>(j, "bytes").value_or(0), number(j, "write_s").value_or(0)};
}

json to_json(const ExportEvent& e) {
  return {{"path", e.path}, {"tokenizer", e.tokenizer}};
}

ExportEvent export_event_from_json(const json& j) {
  return {text(j, "path").value_or(""), boolean(j, "tokenizer").value_or(false)};
}

json to_json(const LogEvent& e) {
  return {{"level", e.level}, {"message", e.message}};
}

LogEvent log_event_from_json(const json& j) {
  return {text(j, "level").value_or(""), text(j, "message").value_or("")};
}

json to_json(const ErrorEvent& e) {
  return {{"code", e.code}, {"message", e.message}};
}

ErrorEvent error_event_from_json(const json& j) {
  return {text(j, "code").value_or(""), text(j, "message").value_or("")};
}

// ---- span

json to_json(const SpanEvent& e) {
  json j = json::object();
  j["block"] = e.block;
  j["layer"] = e.layer ? json(*e.layer) : json(nullptr);
  j["phase"] = e.phase;
  j["start_s"] = number_or_null(e.start_s);
  j["end_s"] = number_or_null(e.end_s);
  put(j, "device", e.device);
  return j;
}

SpanEvent span_event_from_json(const json& j) {
  SpanEvent e;
  e.block = text(j, "block").value_or("");
  e.layer = integer<int>(j, "layer");
  e.phase = text(j, "phase").value_or("");
  e.start_s = number(j, "start_s").value_or(0);
  e.end_s = number(j, "end_s").value_or(0);
  if (const std::optional<int> device = integer<int>(j, "device"); device && *device >= 0)
    e.device = device;
  return e;
}

// ---- sample

json to_json(const SampleGpu& g) {
  json j = {{"index", g.index}};
  put(j, "hbm_used_bytes", g.hbm_used_bytes);
  put(j, "hbm_total_bytes", g.hbm_total_bytes);
  put(j, "util_percent", g.util_percent);
  put(j, "pcie_rx_bytes_per_s", g.pcie_rx_bytes_per_s);
  put(j, "pcie_tx_bytes_per_s", g.pcie_tx_bytes_per_s);
  return j;
}

std::optional<SampleGpu> sample_gpu_from_json(const json& j) {
  if (!j.is_object()) return std::nullopt;
  const std::optional<int> index = integer<int>(j, "index");
  if (!index || *index < 0) return std::nullopt;
  SampleGpu g;
  g.index = *index;
  g.hbm_used_bytes = integer<uint64_t>(j, "hbm_used_bytes");
  g.hbm_total_bytes = integer<uint64_t>(j, "hbm_total_bytes");
  g.util_percent = number(j, "util_percent");
  g.pcie_rx_bytes_per_s = number(j, "pcie_rx_bytes_per_s");
  g.pcie_tx_bytes_per_s = number(j, "pcie_tx_bytes_per_s");
  return g;
}

json to_json(const SampleEvent& e) {
  json j = json::object();
  json tiers = json::object();
  for (const auto& [name, t] : e.tiers) {
    json o = json::object();
    for (const auto& [category, bytes] : t.category_bytes)
      o[category + std::string(kBytesSuffix)] = bytes;
    for (size_t i = 0; i < std::size(kTierFields); ++i) put(o, kTierFields[i], t.*kTierMembers[i]);
    tiers[name] = std::move(o);
  }
  j["tiers"] = std::move(tiers);
  json links = json::object();
  for (const auto& [name, l] : e.links) {
    put(links, (name + std::string(kGbpsSuffix)).c_str(), l.gbps);
    put(links, (name + std::string(kBytesSuffix)).c_str(), l.bytes);
  }
  j["links"] = std::move(links);
  if (e.disk)
    j["disk"] = {{"device", e.disk->device},
                 {"read_gbps", e.disk->read_gbps},
                 {"write_gbps", e.disk->write_gbps}};
  put(j, "rss_bytes", e.rss_bytes);
  put(j, "interval_s", e.interval_s);
  put(j, "gpu_util_pct", e.gpu_util_pct);
  put(j, "gpu_mem_used_bytes", e.gpu_mem_used_bytes);
  put(j, "gpu_mem_total_bytes", e.gpu_mem_total_bytes);
  put(j, "pcie_tx_gbps", e.pcie_tx_gbps);
  put(j, "pcie_rx_gbps", e.pcie_rx_gbps);
  put(j, "gpu_power_w", e.gpu_power_w);
  put(j, "gpu_temp_c", e.gpu_temp_c);
  if (!e.gpus.empty()) {
    json gpus = json::array();
    for (const SampleGpu& g : e.gpus) gpus.push_back(to_json(g));
    j["gpus"] = std::move(gpus);
  }
  return j;
}

SampleEvent sample_event_from_json(const json& j) {
  SampleEvent e;
  for (const auto& [name, o] : object(j, "tiers").items()) {
    if (!o.is_object()) continue;
    SampleTier t;
    for (const auto& [key, v] : o.items()) {
      if (is_tier_field(key) || !key.ends_with(kBytesSuffix)) continue;
      if (auto bytes = integer<uint64_t>(o, key.c_str()))
        t.category_bytes[key.substr(0, key.size() - kBytesSuffix.size())] = *bytes;
    }
    for (size_t i = 0; i < std::size(kTierFields); ++i)
      t.*kTierMembers[i] = integer<uint64_t>(o, kTierFields[i]);
    e.tiers[name] = std::move(t);
  }
  for (const auto& [key, v] : object(j, "links").items()) {
    const json& links = object(j, "links");
    if (key.ends_with(kGbpsSuffix)) {
      if (auto g = number(links, key.c_str()))
        e.links[key.substr(0, key.size() - kGbpsSuffix.size())].gbps = g;
    } else if (key.ends_with(kBytesSuffix)) {
      if (auto b = integer<uint64_t>(links, key.c_str()))
        e.links[key.substr(0, key.size() - kBytesSuffix.size())].bytes = b;
    }
  }
  if (const json* d = field(j, "disk"); d && d->is_object())
    e.disk = SampleDisk{text(*d, "device").value_or(""), number(*d, "read_gbps").value_or(0),
                        number(*d, "write_gbps").value_or(0)};
  e.rss_bytes = integer<uint64_t>(j, "rss_bytes");
  e.interval_s = number(j, "interval_s");
  e.gpu_util_pct = number(j, "gpu_util_pct");
  e.gpu_mem_used_bytes = integer<uint64_t>(j, "gpu_mem_used_bytes");
  e.gpu_mem_total_bytes = integer<uint64_t>(j, "gpu_mem_total_bytes");
  e.pcie_tx_gbps = number(j, "pcie_tx_gbps");
  e.pcie_rx_gbps = number(j, "pcie_rx_gbps");
  e.gpu_power_w = number(j, "gpu_power_w");
  e.gpu_temp_c = number(j, "gpu_temp_c");
  if (const json* gpus = field(j, "gpus"); gpus && gpus->is_array()) {
    for (const json& g : *gpus)
      if (std::optional<SampleGpu> gpu = sample_gpu_from_json(g)) e.gpus.push_back(std::move(*gpu));
  }
  return e;
}

// ---- figures and the measured event

const char* step_figure_key(StepFigure f) {
  switch (f) {
    case StepFigure::kStepS:
      return "step_s";
    case StepFigure::kTokensPerS:
      return "tokens_per_s";
    case StepFigure::kPeakHbmBytes:
      return "peak_hbm_bytes";
    case StepFigure::kPeakDramBytes:
      return "peak_dram_bytes";
    case StepFigure::kH2dBytes:
      return "h2d_bytes";
    case StepFigure::kD2hBytes:
      return "d2h_bytes";
  }
  return "";
}

std::optional<double> figure_value(const StepFigures& f, StepFigure which) {
  auto as_double = [](const std::optional<uint64_t>& v) {
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
  };
  switch (which) {
    case StepFigure::kStepS:
      return f.step_s;
    case StepFigure::kTokensPerS:
      return f.tokens_per_s;
    case StepFigure::kPeakHbmBytes:
      return as_double(f.peak_hbm_bytes);
    case StepFigure::kPeakDramBytes:
      return as_double(f.peak_dram_bytes);
    case StepFigure::kH2dBytes:
      return f.h2d_bytes;
    case StepFigure::kD2hBytes:
      return f.d2h_bytes;
  }
  return std::nullopt;
}

json to_json(const StepFigures& f) {
  return {{step_figure_key(StepFigure::kStepS), value_or_null(f.step_s)},
          {step_figure_key(StepFigure::kTokensPerS), value_or_null(f.tokens_per_s)},
          {step_figure_key(StepFigure::kPeakHbmBytes), value_or_null(f.peak_hbm_bytes)},
          {step_figure_key(StepFigure::kPeakDramBytes), value_or_null(f.peak_dram_bytes)},
          {step_figure_key(StepFigure::kH2dBytes), value_or_null(f.h2d_bytes)},
          {step_figure_key(StepFigure::kD2hBytes), value_or_null(f.d2h_bytes)}};
}

StepFigures step_figures_from_json(const json& j) {
  StepFigures f;
  f.step_s = number(j, step_figure_key(StepFigure::kStepS));
  f.tokens_per_s = number(j, step_figure_key(StepFigure::kTokensPerS));
  f.peak_hbm_bytes = integer<uint64_t>(j, step_figure_key(StepFigure::kPeakHbmBytes));
  f.peak_dram_bytes = integer<uint64_t>(j, step_figure_key(StepFigure::kPeakDramBytes));
  f.h2d_bytes = number(j, step_figure_key(StepFigure::kH2dBytes));
  f.d2h_bytes = number(j, step_figure_key(StepFigure::kD2hBytes));
  return f;
}

json to_json(const FiguresVersusPlan& v) {
  json out = json::object();
  for (StepFigure f : kStepFigures) {
    const FigureComparison& c = v[f];
    out[step_figure_key(f)] = {{"predicted", value_or_null(c.predicted)},
                               {"measured", value_or_null(c.measured)},
                               {"ratio", value_or_null(c.ratio)}};
  }
  return out;
}

FiguresVersusPlan figures_versus_plan_from_json(const json& j) {
  FiguresVersusPlan v;
  for (StepFigure f : kStepFigures) {
    const json& o = object(j, step_figure_key(f));
    v[f] = {number(o, "predicted"), number(o, "measured"), number(o, "ratio")};
  }
  return v;
}

json to_json(const MeasuredEvent& e) {
  json j = {
      {"steps", e.steps}, {"figures", to_json(e.figures)}, {"versus_plan", to_json(e.versus_plan)}};
  if (e.plan) j["plan"] = to_json(*e.plan);
  return j;
}

MeasuredEvent measured_event_from_json(const json& j) {
  MeasuredEvent e;
  e.steps = integer<int64_t>(j, "steps").value_or(0);
  e.figures = step_figures_from_json(object(j, "figures"));
  e.versus_plan = figures_versus_plan_from_json(object(j, "versus_plan"));
  if (const json* p = field(j, "plan"))
    if (auto plan = plan_from_json(*p); plan.ok()) e.plan = std::move(*plan);
  return e;
}

}  // namespace spillway
