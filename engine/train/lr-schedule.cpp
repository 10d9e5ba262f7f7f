#include "train/lr-schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace spillway {

Result<LrSchedule> parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrSchedule::kConstant;
  if (name == "cosine") return LrSchedule::kCosine;
  if (name == "linear") return LrSchedule::kLinear;
  return invalid_argument("unknown learning-rate schedule '" + name +
                          "' (constant, cosine, linear)");
}

const char* lr_schedule_name(LrSchedule s) {
  switch (s) {
    case LrSchedule::kConstant:
      return "constant";
    case LrSchedule::kCosine:
      return "cosine";
    case LrSchedule::kLinear:
      return "linear";
  }
  return "?";
}

double lr_at(const LrScheduleConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) {
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  }
  if (c.kind == LrSchedule::kConstant) return c.lr;
  const double span = static_cast<double>(std::max<int64_t>(1, c.total_steps - c.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - c.warmup_steps) / span, 0.0, 1.0);
  const double f = c.kind == LrSchedule::kCosine
                       ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress))
                       : 1.0 - progress;
  return c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * f);
}

}  // namespace spillway
