// Helpers shared by the libFuzzer targets of tests/fuzz (one .cpp per reader of untrusted input).
//
// A target defines LLVMFuzzerTestOneInput and usually LLVMFuzzerInitialize. The readers take file
// paths, so each input is written to a file in a private scratch folder of the process (removed at
// exit) and read from there, as a user's download would be. Seeds: a target writes the seeds it
// derives from ../shared/data (real tokenizers, models, datasets, cut to a size the fuzzer can
// mutate quickly) or builds itself into $SPILLWAY_FUZZ_SEEDS_OUT when that is set; run-fuzz.sh
// sets it to a folder it then passes to libFuzzer as a corpus (LLVMFuzzerInitialize runs before
// libFuzzer reads its corpus folders).
//
// Not thread-safe: libFuzzer runs one input at a time per process.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace spillway::fuzz {

// $SPILLWAY_DATA_DIR, else the CMake cache entry (default <source>/../shared/data).
inline std::string data_dir() {
  const char* env = std::getenv("SPILLWAY_DATA_DIR");
  return env && *env ? env : SPILLWAY_DEFAULT_DATA_DIR;
}

inline std::string data_path(const std::string& rel) {
  return data_dir() + "/" + rel;
}

// Reads a whole file ("" when it cannot be read): for seeds only.
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void spit(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The process's scratch folder under $TMPDIR, created on first use and removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "spillway-fuzz-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      std::perror("spillway fuzz: mkdtemp");
      std::abort();
    }
    static std::string remove_me;
    remove_me = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(remove_me, ec);
    });
    return tmpl;
  }();
  return dir;
}

// A fresh, empty folder `name` inside the scratch folder.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = scratch_dir() + "/" + name;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes `data` to `dir/name` (replacing it) and returns the path.
inline std::string write_input(const std::string& dir, const std::string& name, const uint8_t* data,
                               size_t size) {
  const std::string path = dir + "/" + name;
  spit(path, std::string_view(reinterpret_cast<const char*>(data), size));
  return path;
}

// Whether seeds are wanted ($SPILLWAY_FUZZ_SEEDS_OUT is set), and adding one.
inline const char* seeds_out() {
  const char* s = std::getenv("SPILLWAY_FUZZ_SEEDS_OUT");
  return s && *s ? s : nullptr;
}

inline void add_seed(const std::string& name, std::string_view bytes) {
  if (const char* out = seeds_out()) {
    std::filesystem::create_directories(out);
    spit(std::string(out) + "/" + name, bytes);
  }
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace spillway::fuzz
