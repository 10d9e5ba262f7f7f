// The job file (job.json) of `spillway-worker train` and `plan`: checked against the job schema
// (engine/job/job-schema: every key known, typed and in range, defaults filled in) and turned into
// the engine's plain TrainJob. The resolved job — every key present — is what the worker writes
// into the run folder and the run store keeps; `spillway-worker job-keys` prints the schema.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "train/train-job.h"

namespace spillway::worker {

// A job file as the worker reads it: the engine's job and the resolved JSON it came from.
struct JobFile {
  TrainJob job;
  nlohmann::json
      resolved;  // every key of the schema, defaults filled in, paths absolute (load_job)
};

// Checks `j` against the schema and converts it. kInvalidArgument naming the key.
Result<JobFile> parse_job_file(const nlohmann::json& j);
// Reads and parses a job file; relative paths in it (the schema's path keys) are resolved against
// the file's folder, in the job and in `resolved`.
Result<JobFile> load_job_file(const std::string& path);

// The same, for callers that need only the engine's job (plan, tests).
Result<TrainJob> parse_job(const nlohmann::json& j);
Result<TrainJob> load_job(const std::string& path);

}  // namespace spillway::worker
