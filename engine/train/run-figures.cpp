#include "train/run-figures.h"

#include <algorithm>

#include "telemetry/sampler.h"

namespace spillway {
namespace {

using nlohmann::json;

std::optional<double> number_at(const json& j, const char* pointer) {
  const json::json_pointer at(pointer);
  if (!j.contains(at) || !j.at(at).is_number()) return std::nullopt;
  return j.at(at).get<double>();
}

std::optional<uint64_t> bytes_at(const json& j, const char* pointer) {
  const auto v = number_at(j, pointer);
  if (!v || *v < 0) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

template <typename T>
json value_or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

StepFigures predicted_figures(const json& plan) {
  StepFigures f;
  f.step_s = number_at(plan, "/step/step_s");
  f.tokens_per_s = number_at(plan, "/step/tokens_per_s");
  // A CPU backend without a device cap has no HBM: its "device" needs are counted in DRAM.
  auto peak = [&](const char* tier) -> std::optional<uint64_t> {
    const std::string at = std::string("/tiers/") + tier;
    const auto needed = bytes_at(plan, (at + "/needed_bytes").c_str());
    if (!needed) return std::nullopt;
    return *needed + bytes_at(plan, (at + "/runtime_bytes").c_str()).value_or(0);
  };
  if (plan.value("backend", "") != "cpu" || bytes_at(plan, "/tiers/hbm/total_bytes").value_or(0) > 0)
    f.peak_hbm_bytes = peak("hbm");
  f.peak_dram_bytes = peak("dram");
  f.h2d_bytes = number_at(plan, "/step/h2d_bytes");
  f.d2h_bytes = number_at(plan, "/step/d2h_bytes");
  return f;
}

void StepFigureRecorder::add_step(double step_s, int64_t tokens, uint64_t device_used_bytes, uint64_t h2d_bytes,
                                  uint64_t d2h_bytes) {
  step_s_.push_back(step_s);
  tokens_.push_back(tokens);
  h2d_.push_back(h2d_bytes);
  d2h_.push_back(d2h_bytes);
  peak_device_ = std::max(peak_device_, device_used_bytes);
}

StepFigures StepFigureRecorder::figures() const {
  StepFigures f;
  if (step_s_.empty()) return f;
  // The steps after the first, or the first alone.
  const size_t from = step_s_.size() > 1 ? 1 : 0;
  double seconds = 0, h2d = 0, d2h = 0;
  int64_t tokens = 0;
  for (size_t i = from; i < step_s_.size(); ++i) {
    seconds += step_s_[i], tokens += tokens_[i];
    h2d += static_cast<double>(h2d_[i]), d2h += static_cast<double>(d2h_[i]);
  }
  const double n = static_cast<double>(step_s_.size() - from);
  f.step_s = median(std::vector<double>(step_s_.begin() + from, step_s_.end()));
  if (seconds > 0) f.tokens_per_s = static_cast<double>(tokens) / seconds;
  if (peak_device_ > 0) f.peak_hbm_bytes = peak_device_;
  f.peak_dram_bytes = read_process_peak_rss_bytes();
  f.h2d_bytes = h2d / n;
  f.d2h_bytes = d2h / n;
  return f;
}

json compare_figures(const StepFigures& predicted, const StepFigures& measured) {
  json out = json::object();
  auto row = [&](const char* key, std::optional<double> p, std::optional<double> m) {
    json r = {{"predicted", value_or_null(p)}, {"measured", value_or_null(m)}, {"ratio", nullptr}};
    if (p && m && *p > 0) r["ratio"] = *m / *p;
    out[key] = r;
  };
  auto as_double = [](const std::optional<uint64_t>& v) -> std::optional<double> {
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
  };
  row("step_s", predicted.step_s, measured.step_s);
  row("tokens_per_s", predicted.tokens_per_s, measured.tokens_per_s);
  row("peak_hbm_bytes", as_double(predicted.peak_hbm_bytes), as_double(measured.peak_hbm_bytes));
  row("peak_dram_bytes", as_double(predicted.peak_dram_bytes), as_double(measured.peak_dram_bytes));
  row("h2d_bytes", predicted.h2d_bytes, measured.h2d_bytes);
  row("d2h_bytes", predicted.d2h_bytes, measured.d2h_bytes);
  return out;
}

json figures_to_json(const StepFigures& f) {
  return {{"step_s", value_or_null(f.step_s)},
          {"tokens_per_s", value_or_null(f.tokens_per_s)},
          {"peak_hbm_bytes", value_or_null(f.peak_hbm_bytes)},
          {"peak_dram_bytes", value_or_null(f.peak_dram_bytes)},
          {"h2d_bytes", value_or_null(f.h2d_bytes)},
          {"d2h_bytes", value_or_null(f.d2h_bytes)}};
}

}  // namespace spillway
