#include "worker/args.h"

#include <cctype>
#include <charconv>
#include <cmath>

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

namespace {

// Whether `s` is a plain decimal number: an optional '-', digits with at most one '.', and an
// optional exponent. strtod also reads hexadecimal ("0x10" is 16), "inf", "nan" and leading
// spaces, none of which a user means by a count or a rate.
bool is_decimal(const std::string& s, bool integer) {
  size_t i = s.starts_with('-') ? 1 : 0;
  size_t digits = 0, dots = 0;
  for (; i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.'); ++i)
    (s[i] == '.' ? dots : digits) += 1;
  if (digits == 0 || dots > (integer ? 0u : 1u)) return false;
  if (i < s.size() && !integer && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    const size_t exp_start = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == exp_start) return false;
  }
  return i == s.size();
}

}  // namespace

Result<double> Args::number(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  double d = 0;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), d);
  if (!is_decimal(*v, false) || ec != std::errc() || end != v->data() + v->size() ||
      !std::isfinite(d))
    return invalid_argument("option " + name +
                            " expects a decimal number (such as 0.7 or 1e-3), got " +
                            quote_name(*v));
  return d;
}

Result<int64_t> parse_integer(const std::string& name, const std::string& text, int64_t lo,
                              int64_t hi) {
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (!is_decimal(text, true) || ec != std::errc() || end != text.data() + text.size() || n < lo ||
      n > hi)
    return invalid_argument("option " + name + " expects a whole decimal number from " +
                            std::to_string(lo) + " to " + std::to_string(hi) + ", got " +
                            quote_name(text));
  return n;
}

Result<int64_t> Args::integer(const std::string& name, int64_t fallback, int64_t lo,
                              int64_t hi) const {
  auto v = get(name);
  if (!v) return fallback;
  return parse_integer(name, *v, lo, hi);
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
