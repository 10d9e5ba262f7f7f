#include "history/run-folder.h"

#include <algorithm>
#include <filesystem>

namespace spillway {
namespace fs = std::filesystem;

std::string run_checkpoints_dir(const std::string& run_dir) {
  return (fs::path(run_dir) / kRunCheckpointsDir).string();
}

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory(ec) && n.starts_with("step-") && n.find(".tmp") == std::string::npos) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace spillway
