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
  // The plan's are one GPU's link; the engine counts every GPU's (DataParallelEngine::h2d_bytes).
  // Rank 0 downloads the largest share, so N times its bytes is at most N floats a block over.
  const double gpus = std::max(plan.devices.count, 1);
  f.h2d_bytes = plan.step.h2d_bytes * gpus;
  f.d2h_bytes = plan.step.d2h_bytes * gpus;
  return f;
}

void StepFigureRecorder::add_step(double step_s, int64_t tokens, uint64_t device_used_bytes,
                                  uint64_t h2d_bytes, uint64_t d2h_bytes) {
  peak_device_ = std::max(peak_device_, device_used_bytes);
  if (steps_++ == 0) {
    first_step_s_ = step_s, first_tokens_ = tokens, first_h2d_ = h2d_bytes, first_d2h_ = d2h_bytes;
    return;
  }
  seconds_ += step_s, tokens_ += tokens;
  h2d_ += static_cast<double>(h2d_bytes), d2h_ += static_cast<double>(d2h_bytes);
  if (recent_s_.size() < kMedianSteps) {
    recent_s_.push_back(step_s);
  } else {
    recent_s_[next_] = step_s;
    next_ = (next_ + 1) % kMedianSteps;
  }
}

StepFigures StepFigureRecorder::figures() const {
  StepFigures f;
  if (steps_ == 0) return f;
  // The steps after the first, or the first alone.
  const bool alone = steps_ == 1;
  const double seconds = alone ? first_step_s_ : seconds_;
  const int64_t tokens = alone ? first_tokens_ : tokens_;
  const double n = alone ? 1.0 : static_cast<double>(steps_ - 1);
  f.step_s = alone ? first_step_s_ : median(recent_s_);
  if (seconds > 0) f.tokens_per_s = static_cast<double>(tokens) / seconds;
  if (peak_device_ > 0) f.peak_hbm_bytes = peak_device_;
  f.peak_dram_bytes = read_process_peak_rss_bytes();
  f.h2d_bytes = (alone ? static_cast<double>(first_h2d_) : h2d_) / n;
  f.d2h_bytes = (alone ? static_cast<double>(first_d2h_) : d2h_) / n;
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
