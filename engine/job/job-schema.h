// The job file's schema: one table of every key of job.json — its path, type, default, unit,
// allowed range or values and a one-line description. It is the single source of
//   - the worker's strict parser (resolve_job here, then app/worker/job-file into a TrainJob),
//   - the defaults, and the resolved job (every key present) that the worker keeps with a run,
//   - the README's job table (job_keys_markdown, printed by `spillway-worker job-keys --markdown`;
//     a test fails when the README differs),
//   - the GUI's New run form: its defaults, ranges and tooltips (ui/JobForm).
// Cross-key rules (model.path or model.init, train.steps or train.epochs, placement.ssd_dir for the
// SSD tier) are checked by resolve_job too and named in the descriptions.
//
// Thread-safety: the table is built once on first use and never changed; every function here is
// safe to call from any thread. Results are plain values owned by the caller.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spillway::job {

enum class KeyType {
  kString,   // free text
  kPath,     // a file or folder; relative to the job file's folder (load_job makes it absolute)
  kInteger,  // a JSON integer within `range`
  kNumber,   // a finite JSON number within `range`
  kBool,
  kChoice,   // one of `choices` (data.format and data.template also take the engine's aliases)
  kModel,    // model.init: a preset name or a config.json object
  kDevices,  // placement.devices: "all", a count or a list of GPU indices (device-selection.h)
};

// "a string", "an integer", ...: what an error says was expected.
const char* key_type_name(KeyType type);

// A closed or half-open interval. Integer bounds are exact in a double (powers of two, small).
struct Range {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;

  bool contains(double v) const;
  // "[1, 65536]", "(0, 10]", "[0, 1)": integer bounds written out in full.
  std::string to_string() const;
};

struct JobKey {
  std::string path;  // "train.lr"; "name" for the one top-level key
  KeyType type = KeyType::kString;
  nlohmann::json default_value;  // null: none (required keys, and optional keys left unset)
  bool required = false;
  std::string unit;                  // "steps", "bytes", "tokens", ... ("" when it has none)
  Range range;                       // kInteger, kNumber
  std::vector<std::string> choices;  // kChoice: the canonical names, the first one the default
  std::string description;           // one line

  std::string section() const;  // "train" ("" for "name")
  std::string name() const;     // "lr"
  // What the value may be, for people: "[1, 65536]", "constant, cosine, linear", "true, false".
  std::string allowed() const;
};

// The sections, in the order of the file: model, data, train, placement, output.
const std::vector<std::string>& job_sections();
// Every key, in the order of the file and the README.
const std::vector<JobKey>& job_keys();
// The key at `path`, or null.
const JobKey* find_job_key(std::string_view path);

// Checks one value of `key` (not null): its type, range or choices. kInvalidArgument naming the
// key: "job.json: train.lr must be in (0, 10], got 11", "train.lr: expected a number, got \"x\"".
Status check_value(const JobKey& key, const nlohmann::json& value);

// The job as it will run: `job` checked against the table — every key known and of its type, in
// its range or among its choices, the required keys and the cross-key rules — with every default
// filled in (a key without a default is null). kInvalidArgument naming the key and what to change.
Result<nlohmann::json> resolve_job(const nlohmann::json& job);

// The job table in Markdown (| key | type | default | allowed | description |), as in the README
// between the `job-keys` markers.
std::string job_keys_markdown();
// The job table as plain text, one key a paragraph, for `spillway-worker job-keys` and man pages.
std::string job_keys_text();

}  // namespace spillway::job
