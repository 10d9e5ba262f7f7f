// The wall between the GUI and the engine (DESIGN.md; issue 12 point 4): ui/ reaches the engine
// only through the run history (history/), the job schema (job/), the plan and event formats
// (events/), the model and data readers (model/, data/, core/) and the worker process; the training internals (train/, compute/, tiers/, telemetry/) are the
// worker's. spillway_ui links only those libraries; this test names the file and line that
// crosses the wall, before the linker gives a less readable answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace {
namespace fs = std::filesystem;

TEST(Walls, UiIncludesOnlyHistoryModelAndDataFromTheEngine) {
  const fs::path ui = fs::path(SPILLWAY_SOURCE_DIR) / "ui";
  ASSERT_TRUE(fs::is_directory(ui)) << ui;
  const std::regex engine_include(R"(^\s*#\s*include\s*"(\w+)/)");
  const std::string allowed[] = {"core", "model", "data", "history", "job", "events"};
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
      if (!std::regex_search(line, m, engine_include)) continue;
      const std::string folder = m[1];
      EXPECT_NE(std::find(std::begin(allowed), std::end(allowed), folder), std::end(allowed))
          << e.path().filename().string() << ":" << n << ": " << line
          << " — the GUI reaches the engine only through history/, job/, events/, model/ and data/, and the worker process";
    }
  }
  EXPECT_GT(files, 20);
}

// The house's floors (issue 22 point 6): app/ holds the executables and the worker's commands, on
// top; the GUI sits beside them and reaches nothing of theirs. An include that names a file of
// app/ (as "app/...", or as the worker's "worker/..." include root) runs upward.
TEST(Walls, UiIncludesNothingFromApp) {
  const fs::path source = fs::path(SPILLWAY_SOURCE_DIR);
  const fs::path ui = source / "ui";
  ASSERT_TRUE(fs::is_directory(ui)) << ui;
  const std::regex quoted_include(R"re(^\s*#\s*include\s*"([^"]+)")re");
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
      if (!std::regex_search(line, m, quoted_include)) continue;
      const std::string path = m[1];
      const bool upward = path.starts_with("app/") || fs::exists(source / "app" / path);
      EXPECT_FALSE(upward) << e.path().filename().string() << ":" << n << ": " << line
                           << " — ui/ includes nothing from app/; what both need lives in engine/ (job/, history/)";
    }
  }
  EXPECT_GT(files, 20);
}

}  // namespace
