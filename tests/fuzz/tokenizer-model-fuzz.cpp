// Fuzz target: a SentencePiece tokenizer.model (a serialized ModelProto), loaded as every command
// loads one (Tokenizer::load on the file, through libsentencepiece), then used on the texts of
// tokenizer-texts.h.
//
// Seeds: stories260K's tokenizer.model from ../shared/data (Llama 2's, 500 KB, is past the
// 64 KB inputs the fuzzer mutates).
#include <cstdint>

#include "fuzz-util.h"
#include "tokenizer-texts.h"

using namespace spillway;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!fuzz::seeds_out()) return 0;
  const std::string m = fuzz::slurp(fuzz::data_path("models/stories260K/tokenizer.model"));
  if (!m.empty()) fuzz::add_seed("data-stories260K", m);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::fresh_dir("in");
  const std::string path = fuzz::write_input(dir, "tokenizer.model", data, size);
  auto tok = Tokenizer::load(path);
  if (tok.ok()) fuzz::exercise_tokenizer(**tok);
  return 0;
}
