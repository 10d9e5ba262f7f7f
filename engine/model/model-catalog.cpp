#include "model/model-catalog.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace spillway {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : "";
}

// The first line of a refs file, trimmed; "" when there is none.
std::string read_ref(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// "models--Qwen--Qwen3-0.6B" -> "Qwen/Qwen3-0.6B" (huggingface_hub joins the parts of a repo id
// with "--"; a name of its own holds none).
std::string repo_of(const std::string& folder) {
  std::string id = folder.substr(std::string("models--").size());
  for (size_t at = id.find("--"); at != std::string::npos; at = id.find("--", at + 1))
    id.replace(at, 2, "/");
  return id;
}

bool has_config(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec);
}

}  // namespace

std::string hugging_face_hub_dir() {
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HF_HOME"); !v.empty()) return v + "/hub";
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return v + "/huggingface/hub";
  if (std::string v = env("HOME"); !v.empty()) return v + "/.cache/huggingface/hub";
  return "";
}

std::vector<CachedModel> find_cached_models(const std::string& hub) {
  std::vector<CachedModel> out;
  if (hub.empty()) return out;
  std::error_code ec;
  for (fs::directory_iterator it(hub, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("models--", 0) != 0 || !it->is_directory(ec)) continue;
    const fs::path snapshots = it->path() / "snapshots";
    const std::string main = read_ref(it->path() / "refs" / "main");
    if (!main.empty() && has_config(snapshots / main)) {
      out.push_back({repo_of(name), main, (snapshots / main).string()});
      continue;
    }
    std::error_code ec2;
    for (fs::directory_iterator s(snapshots, ec2), send; !ec2 && s != send; s.increment(ec2)) {
      if (has_config(s->path()))
        out.push_back({repo_of(name), s->path().filename().string(), s->path().string()});
    }
  }
  std::sort(out.begin(), out.end(), [](const CachedModel& a, const CachedModel& b) {
    return a.repo != b.repo ? a.repo < b.repo : a.revision < b.revision;
  });
  return out;
}

}  // namespace spillway
