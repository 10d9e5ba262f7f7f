#include "worker/tokenize-command.h"

#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "data/tokenizer.h"

namespace spillway::worker {

namespace {

constexpr const char* kUsage =
    "usage: spillway-worker tokenize --tokenizer PATH [--add-special-tokens]\n";

}  // namespace

int run_tokenize(const std::vector<std::string>& args, CommandIo io) {
  std::string path;
  bool add_special = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--tokenizer" && i + 1 < args.size()) {
      path = args[++i];
    } else if (args[i].rfind("--tokenizer=", 0) == 0) {
      path = args[i].substr(12);
    } else if (args[i] == "--add-special-tokens") {
      add_special = true;
    } else if (args[i] == "--help" || args[i] == "-h") {
      io.out << kUsage
             << "Reads JSON lines {\"text\": ...} from stdin and writes {\"ids\": [...]} lines.\n";
      return 0;
    } else {
      io.err << "spillway-worker tokenize: unknown argument '" << args[i] << "'\n" << kUsage;
      return 2;
    }
  }
  if (path.empty()) {
    io.err << "spillway-worker tokenize: --tokenizer PATH is required\n" << kUsage;
    return 2;
  }
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
    std::string text;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
        io.err << "spillway-worker tokenize: line " << line_no
               << ": expected an object with a string \"text\"\n";
        return 1;
      }
      text = j["text"].get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      io.err << "spillway-worker tokenize: line " << line_no << ": not valid JSON (" << e.what()
             << ")\n";
      return 1;
    }
    const auto ids = add_special ? tok.encode_with_special(text) : tok.encode(text);
    if (!ids.ok()) {
      io.err << "spillway-worker tokenize: line " << line_no << ": " << ids.status().to_string() << "\n";
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
