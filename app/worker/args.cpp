#include "worker/args.h"

#include <cmath>
#include <cstdlib>

#include "core/json-file.h"

namespace spillway::worker {

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

Result<std::string> Args::require(const std::string& name) const {
  auto v = get(name);
  if (!v) return invalid_argument("missing required option " + name);
  return *v;
}

Result<double> Args::number(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || !std::isfinite(d))
    return invalid_argument("option " + name + " expects a finite number, got " + quote_name(*v));
  return d;
}

Result<int64_t> Args::integer(const std::string& name, int64_t fallback, int64_t lo,
                              int64_t hi) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || !std::isfinite(d) || d != std::floor(d) ||
      d < static_cast<double>(lo) || d > static_cast<double>(hi))
    return invalid_argument("option " + name + " expects a whole number from " +
                            std::to_string(lo) + " to " + std::to_string(hi) + ", got " +
                            quote_name(*v));
  return static_cast<int64_t>(d);
}

Result<Args> parse_args(const std::vector<std::string>& argv,
                        const std::set<std::string>& value_options,
                        const std::set<std::string>& flag_options) {
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s.size() > 2 && s.starts_with("--")) {
      std::string name = s, value;
      bool inline_value = false;
      if (auto eq = s.find('='); eq != std::string::npos) {
        name = s.substr(0, eq);
        value = s.substr(eq + 1);
        inline_value = true;
      }
      if (flag_options.count(name)) {
        // "--json=x" was taken as --json, silently dropping the value the user meant something by.
        if (inline_value)
          return invalid_argument("option " + name + " takes no value, got " + quote_name(s) +
                                  "; write " + name + " alone");
        a.flags.insert(name);
      } else if (value_options.count(name)) {
        if (!inline_value) {
          if (i + 1 >= argv.size()) return invalid_argument("option " + name + " needs a value");
          value = argv[++i];
        }
        a.values[name] = value;
      } else {
        return invalid_argument("unknown option " + name);
      }
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

}  // namespace spillway::worker
