// A small command-line parser for the worker's commands: `--name VALUE`, `--flag`, positionals.
// Unknown options, missing values and a value given to a flag ("--json=x") are errors that name the
// option. `--help` and `-h` are not seen here: run_worker answers them for every command.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace spillway::worker {

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;
  std::set<std::string> flags;

  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
  std::optional<std::string> get(const std::string& name) const;
  Result<std::string> require(const std::string& name) const;
  // A finite number (nan and inf are errors); `fallback` when the option is absent.
  Result<double> number(const std::string& name, double fallback) const;
  // A whole number in [lo, hi]: 5.9, 1e12 past hi or "ten" are errors naming the option and the
  // range, never truncated or wrapped into an int.
  Result<int64_t> integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
};

// `value_options` take a value ("--model"); `flag_options` do not ("--json").
Result<Args> parse_args(const std::vector<std::string>& argv,
                        const std::set<std::string>& value_options,
                        const std::set<std::string>& flag_options);

}  // namespace spillway::worker
