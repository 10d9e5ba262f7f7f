#include "worker/job-keys-command.h"

#include <nlohmann/json.hpp>
#include <ostream>

#include "job/job-schema.h"
#include "worker/args.h"

namespace spillway::worker {

int run_job_keys(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {}, {"--markdown", "--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  if (!args->positional.empty() || (args->has("--markdown") && args->has("--json")))
    return report_failure(io, false, invalid_argument("usage: job-keys [--markdown | --json]"));
  if (args->has("--markdown")) {
    io.out << job::job_keys_markdown() << std::flush;
  } else if (args->has("--json")) {
    nlohmann::json keys = nlohmann::json::array();
    for (const job::JobKey& k : job::job_keys()) {
      nlohmann::json j = {{"path", k.path},
                          {"type", job::key_type_name(k.type)},
                          {"default", k.default_value},
                          {"required", k.required},
                          {"unit", k.unit},
                          {"allowed", k.allowed()},
                          {"description", k.description}};
      if (k.type == job::KeyType::kChoice) j["choices"] = k.choices;
      keys.push_back(std::move(j));
    }
    io.out << keys.dump() << std::endl;
  } else {
    io.out << job::job_keys_text() << std::flush;
  }
  return 0;
}

}  // namespace spillway::worker
