#include "train/run-figures.h"

#include <algorithm>

#include "telemetry/sampler.h"

namespace spillway {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

StepFigures predicted_figures(const Plan& plan) {
  StepFigures f;
  f.step_s = plan.step.step_s;
  f.tokens_per_s = plan.step.tokens_per_s;
  auto peak = [](const PlanTier& t) -> std::optional<uint64_t> {
    return t.needed_bytes + t.runtime_bytes.value_or(0);
  };
  // A CPU backend without a device cap has no HBM: its "device" needs are counted in DRAM.
  if (!plan.on_cpu() || plan.hbm.total_bytes > 0) f.peak_hbm_bytes = peak(plan.hbm);
  f.peak_dram_bytes = peak(plan.dram);
  f.h2d_bytes = plan.step.h2d_bytes;
  f.d2h_bytes = plan.step.d2h_bytes;
  return f;
}

void StepFigureRecorder::add_step(double step_s, int64_t tokens, uint64_t device_used_bytes,
                                  uint64_t h2d_bytes, uint64_t d2h_bytes) {
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

FiguresVersusPlan compare_figures(const StepFigures& predicted, const StepFigures& measured) {
  FiguresVersusPlan out;
  for (StepFigure f : kStepFigures) {
    FigureComparison& c = out[f];
    c.predicted = figure_value(predicted, f);
    c.measured = figure_value(measured, f);
    if (c.predicted && c.measured && *c.predicted > 0) c.ratio = *c.measured / *c.predicted;
  }
  return out;
}

}  // namespace spillway
