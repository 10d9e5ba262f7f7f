#include "worker/job-file.h"

#include <filesystem>

#include "core/file-util.h"
#include "core/json-file.h"
#include "job/job-schema.h"

namespace spillway::worker {
namespace fs = std::filesystem;
using nlohmann::json;

Result<JobFile> parse_job_file(const json& input) {
  SPW_ASSIGN_OR_RETURN(json resolved, job::resolve_job(input));
  SPW_ASSIGN_OR_RETURN(TrainJob job, train_job_from_resolved(resolved));
  return JobFile{std::move(job), std::move(resolved)};
}

Result<JobFile> load_job_file(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return text.status().with_context("job file");
  SPW_ASSIGN_OR_RETURN(json j, parse_json(*text, path));
  auto resolved = job::resolve_job(j);
  if (!resolved.ok()) return resolved.status().with_context(path);
  // Relative paths are relative to the job file, so a job folder can be moved as a whole; the
  // resolved job (what the run folder and the run store keep) holds them absolute, so that it
  // still names the same files when read from elsewhere (export, History).
  const fs::path base = fs::absolute(path).parent_path();
  for (const job::JobKey& k : job::job_keys()) {
    if (k.type != job::KeyType::kPath) continue;
    json& v = (*resolved)[k.section()][k.name()];
    if (!v.is_string()) continue;
    const std::string p = v.get<std::string>();
    if (p.empty() || p.find(':') != std::string::npos || !fs::path(p).is_relative()) continue;
    v = (base / p).lexically_normal().string();
  }
  auto job = train_job_from_resolved(*resolved);
  if (!job.ok()) return job.status().with_context(path);
  return JobFile{std::move(*job), std::move(*resolved)};
}

Result<TrainJob> parse_job(const json& j) {
  SPW_ASSIGN_OR_RETURN(JobFile file, parse_job_file(j));
  return std::move(file.job);
}

Result<TrainJob> load_job(const std::string& path) {
  SPW_ASSIGN_OR_RETURN(JobFile file, load_job_file(path));
  return std::move(file.job);
}

}  // namespace spillway::worker
