#include "worker/tokenize-command.h"

#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/json-file.h"
#include "data/tokenizer.h"
#include "worker/args.h"

namespace spillway::worker {

namespace {

constexpr const char* kUsage =
    "usage: spillway-worker tokenize --tokenizer PATH [--add-special-tokens]\n";

}  // namespace

int run_tokenize(const std::vector<std::string>& argv, CommandIo io) {
  // The parser of every other command, so that tokenize takes its options the same way (--name
  // VALUE or --name=VALUE) and names a missing value or an unknown option alike.
  auto args = parse_args(argv, {"--tokenizer"}, {"--add-special-tokens"});
  if (args.ok() && !args->positional.empty())
    args = invalid_argument("unexpected argument " + quote_name(args->positional.front()));
  if (args.ok() && args->get("--tokenizer").value_or("").empty())
    args = invalid_argument("--tokenizer PATH is required");
  if (!args.ok()) {
    io.err << "spillway-worker tokenize: " << args.status().message() << "\n" << kUsage;
    return 2;
  }
  const std::string path = *args->get("--tokenizer");
  const bool add_special = args->has("--add-special-tokens");
  auto loaded = Tokenizer::load(path);
  if (!loaded.ok()) {
    io.err << "spillway-worker tokenize: " << loaded.status().to_string() << "\n";
    return 1;
  }
  const Tokenizer& tok = **loaded;

  std::string line, out;
  size_t line_no = 0;
  while (std::getline(io.in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // parse_json never throws, and its message quotes the line escaped and cut short.
    const auto j = parse_json(line, "line " + std::to_string(line_no));
    if (!j.ok()) {
      io.err << "spillway-worker tokenize: " << j.status().message() << "\n";
      return 1;
    }
    const auto text = JsonField(*j, "line " + std::to_string(line_no))["text"].string();
    if (!text.ok()) {
      io.err << "spillway-worker tokenize: " << text.status().message()
             << " (each line is {\"text\": \"...\"})\n";
      return 1;
    }
    const auto ids = add_special ? tok.encode_with_special(*text) : tok.encode(*text);
    if (!ids.ok()) {
      io.err << "spillway-worker tokenize: line " << line_no << ": " << ids.status().to_string()
             << "\n";
      return 1;
    }
    out.assign("{\"ids\":[");
    for (size_t k = 0; k < ids->size(); ++k) {
      if (k) out.push_back(',');
      out += std::to_string((*ids)[k]);
    }
    out += "]}\n";
    io.out << out;
  }
  io.out.flush();
  return 0;
}

}  // namespace spillway::worker
