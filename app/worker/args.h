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
  // A finite decimal number (0.7, -2, 1e-3); hexadecimal, nan, inf and spaces are errors;
  // `fallback` when the option is absent.
  Result<double> number(const std::string& name, double fallback) const;
  // A whole decimal number in [lo, hi] (digits, with a leading '-' for a negative one): 5.9, 1e3,
  // 0x10, " 5", past hi or "ten" are errors naming the option and the range; `fallback` when the
  // option is absent.
  Result<int64_t> integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
};

// `value_options` take a value ("--model"); `flag_options` do not ("--json").
// `text` as Args::integer reads an option's value; `name` is the option, for the message.
Result<int64_t> parse_integer(const std::string& name, const std::string& text, int64_t lo,
                              int64_t hi);

Result<Args> parse_args(const std::vector<std::string>& argv,
                        const std::set<std::string>& value_options,
                        const std::set<std::string>& flag_options);

}  // namespace spillway::worker
