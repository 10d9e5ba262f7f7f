// Where tests find ../shared/data: $SPILLWAY_DATA_DIR, else the CMake cache entry
// SPILLWAY_DATA_DIR (default <source>/../shared/data). Tests that need it call
// SPILLWAY_REQUIRE_DATA() first, which skips with a clear message when it is missing.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace spillway::testing {

inline std::string data_dir() {
  const char* env = std::getenv("SPILLWAY_DATA_DIR");
  return env && *env ? env : SPILLWAY_DEFAULT_DATA_DIR;
}

inline std::string data_path(const std::string& rel) {
  return data_dir() + "/" + rel;
}

inline bool have_data() {
  return std::filesystem::is_directory(data_dir() + "/models");
}

// What a test's time limit (a responsiveness or speed bound set for optimized code) is multiplied
// by: sanitizer builds (SPILLWAY_SANITIZE, cmake/sanitizers.cmake) run the code several times
// slower, and CI runs their suite two tests at a time.
#ifdef SPILLWAY_SANITIZED
inline constexpr double kTimeScale = 5;
#else
inline constexpr double kTimeScale = 1;
#endif

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "spillway-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace spillway::testing

#define SPILLWAY_REQUIRE_DATA()                                                            \
  do {                                                                                     \
    if (!::spillway::testing::have_data())                                                 \
      GTEST_SKIP() << "test data not found at " << ::spillway::testing::data_dir()         \
                   << " (set SPILLWAY_DATA_DIR or -DSPILLWAY_DATA_DIR to ../shared/data)"; \
  } while (0)
