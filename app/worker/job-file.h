// The job file (job.json) of `spillway-worker train` and `plan`: strict parsing into a TrainJob.
// Every key is known and typed: an unknown key or a wrong type is kInvalidArgument naming the key
// path ("train.lr: expected a number"). Defaults are filled in and recorded in
// TrainJob::resolved, which is what the run store keeps. The schema is documented in the README.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "train/train-job.h"

namespace spillway::worker {

Result<TrainJob> parse_job(const nlohmann::json& j);
// Reads and parses a job file; relative paths in it are resolved against the file's folder.
Result<TrainJob> load_job(const std::string& path);

}  // namespace spillway::worker
