// Learning-rate schedules: constant, and linear warmup followed by cosine or linear decay
// (transformers' get_cosine_schedule_with_warmup / get_linear_schedule_with_warmup).
// A plain value; lr_at is pure.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace spillway {

enum class LrSchedule { kConstant, kCosine, kLinear };

// The job's train.schedule, train.lr, train.warmup_steps and train.min_lr_ratio
// (TrainJob::schedule, whose defaults are the job schema's); no defaults of its own but the run's
// length.
struct LrScheduleConfig {
  LrSchedule kind = LrSchedule::kConstant;
  double lr = 0;  // peak learning rate
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.0;  // decay ends at lr · min_lr_ratio

  bool operator==(const LrScheduleConfig&) const = default;
};

Result<LrSchedule> parse_lr_schedule(const std::string& name);  // "constant", "cosine", "linear"
const char* lr_schedule_name(LrSchedule s);

// Learning rate of optimizer step `step` (counting from 1): warmup lr·step/warmup for
// step <= warmup, then cosine 0.5·(1 + cos(π·progress)) or linear (1 − progress) scaled between
// min_lr_ratio and 1, with progress = (step − warmup) / (total − warmup).
double lr_at(const LrScheduleConfig& c, int64_t step);

}  // namespace spillway
