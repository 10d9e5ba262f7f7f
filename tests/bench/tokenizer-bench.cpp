// bench-tokenizer [TOKENIZER] [TEXT_FILE...]: single-threaded encode throughput.
//
// Defaults: the Llama-3 tokenizer.json and two real corpora from the data folder
// (tinyshakespeare, ~1.1 MB; wiki_demo, ~1 MB, one article per line). Each file is encoded
// line by line (the way dataset readers feed documents) and as one string, on a fresh tokenizer
// (cold word cache) and again (warm); prints MB/s of UTF-8 input and tokens/s, and checks that
// decode(encode(x)) == x for lossless tokenizers.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/file-util.h"
#include "data/tokenizer.h"

namespace {

std::string data_dir() {
  const char* env = std::getenv("SPILLWAY_DATA_DIR");
  return env && *env ? env : SPILLWAY_DEFAULT_DATA_DIR;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    e = e == std::string::npos ? text.size() : e + 1;  // keep the newline: it is text too
    lines.push_back(text.substr(pos, e - pos));
    pos = e;
  }
  return lines;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  using spillway::Tokenizer;
  const std::string tok_path =
      argc > 1 ? argv[1] : data_dir() + "/tokenizers/llama3/tokenizer.json";
  std::vector<std::string> files;
  for (int i = 2; i < argc; ++i) files.push_back(argv[i]);
  if (files.empty()) {
    files = {data_dir() + "/datasets/tinyshakespeare/input.txt",
             data_dir() + "/datasets/pretrain-text/wiki_demo.txt"};
  }

  auto t0 = std::chrono::steady_clock::now();
  auto loaded = Tokenizer::load(tok_path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "bench-tokenizer: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  std::printf("tokenizer %s: loaded in %.2f s, vocab %d, lossless %s\n", tok_path.c_str(),
              seconds_since(t0), (*loaded)->vocab_size(), (*loaded)->lossless() ? "yes" : "no");

  double total_bytes = 0, total_s = 0;
  int rc = 0;
  for (const auto& file : files) {
    auto text = spillway::read_file(file);
    if (!text.ok()) {
      std::fprintf(stderr, "bench-tokenizer: %s\n", text.status().to_string().c_str());
      return 1;
    }
    const auto lines = split_lines(*text);
    const double mb = static_cast<double>(text->size()) / 1e6;
    // A fresh tokenizer per file so the first pass starts with an empty word cache.
    auto tok = Tokenizer::load(tok_path);
    if (!tok.ok()) return 1;
    for (const char* pass : {"cold", "warm"}) {
      size_t tokens = 0;
      t0 = std::chrono::steady_clock::now();
      for (const auto& line : lines) tokens += (*tok)->encode(line)->size();
      const double s = seconds_since(t0);
      std::printf(
          "  %-48s lines  %-4s %7.2f MB in %6.3f s = %6.2f MB/s, %8.0f tokens/s (%zu tokens)\n",
          file.substr(file.find_last_of('/') + 1).c_str(), pass, mb, s, mb / s, tokens / s, tokens);
      total_bytes += mb;
      total_s += s;
    }
    t0 = std::chrono::steady_clock::now();
    const auto ids = *(*tok)->encode(*text);
    const double s = seconds_since(t0);
    std::printf(
        "  %-48s whole      %7.2f MB in %6.3f s = %6.2f MB/s, %8.0f tokens/s (%zu tokens)\n",
        file.substr(file.find_last_of('/') + 1).c_str(), mb, s, mb / s, ids.size() / s, ids.size());
    total_bytes += mb;
    total_s += s;
    if ((*tok)->lossless() && *(*tok)->decode(ids) != *text) {
      std::fprintf(stderr, "bench-tokenizer: decode(encode(%s)) differs from the input\n",
                   file.c_str());
      rc = 1;
    }
  }
  std::printf("overall: %.2f MB/s single-threaded (target >= 1 MB/s per core)\n",
              total_bytes / total_s);
  return rc;
}
