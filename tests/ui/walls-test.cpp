// The wall between the GUI and the engine (docs/architecture.md, "Libraries and their walls"): ui/
// reaches the engine only through the run history (history/), the job schema (job/), the plan and
// event formats (events/), the model and data readers (model/, data/, core/) and the worker
// process; the training internals (train/, compute/, tiers/, telemetry/) are the worker's.
// spillway_ui links only those libraries; this test names the file and line that crosses the wall,
// before the linker gives a less readable answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace {
namespace fs = std::filesystem;

// Calls check(file name, line number, the line, the first capture of `include`) for every
// include line of ui/'s sources that `include` matches; returns how many files it read.
template <class Check>
int for_each_ui_include(const std::regex& include, Check check) {
  const fs::path ui = fs::path(SPILLWAY_SOURCE_DIR) / "ui";
  EXPECT_TRUE(fs::is_directory(ui)) << ui;
  int files = 0;
  for (const auto& e : fs::directory_iterator(ui)) {
    const std::string ext = e.path().extension().string();
    if (ext != ".h" && ext != ".cpp") continue;
    ++files;
    std::ifstream in(e.path());
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      std::smatch m;
      if (std::regex_search(line, m, include))
        check(e.path().filename().string(), n, line, m[1].str());
    }
  }
  return files;
}

TEST(Walls, UiIncludesOnlyHistoryModelAndDataFromTheEngine) {
  const std::string allowed[] = {"core", "model", "data", "history", "job", "events"};
  const int files = for_each_ui_include(
      std::regex(R"(^\s*#\s*include\s*"(\w+)/)"),
      [&](const std::string& file, int n, const std::string& line, const std::string& folder) {
        EXPECT_NE(std::find(std::begin(allowed), std::end(allowed), folder), std::end(allowed))
            << file << ":" << n << ": " << line
            << " — the GUI reaches the engine only through history/, job/, events/, model/ and "
               "data/, and the worker process";
      });
  EXPECT_GT(files, 20);
}

// The house's floors (issue 22 point 6): app/ holds the executables and the worker's commands, on
// top; the GUI sits beside them and reaches nothing of theirs. An include that names a file of
// app/ (as "app/...", or as the worker's "worker/..." include root) runs upward.
TEST(Walls, UiIncludesNothingFromApp) {
  const fs::path source = fs::path(SPILLWAY_SOURCE_DIR);
  const int files = for_each_ui_include(
      std::regex(R"re(^\s*#\s*include\s*"([^"]+)")re"),
      [&](const std::string& file, int n, const std::string& line, const std::string& path) {
        const bool upward = path.starts_with("app/") || fs::exists(source / "app" / path);
        EXPECT_FALSE(upward) << file << ":" << n << ": " << line
                             << " — ui/ includes nothing from app/; what both need lives in "
                                "engine/ (job/, history/)";
      });
  EXPECT_GT(files, 20);
}

}  // namespace
