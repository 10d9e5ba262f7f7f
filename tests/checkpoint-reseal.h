// Rewrites a checkpoint's manifest.json so that it matches its files as they are now: the edit a
// careful forger (or a tool that "repairs" checkpoints) would make after changing a file, so that
// only the value checks of load_checkpoint stand between the edit and a resume. For the tests and
// fuzz targets of issue 28; never part of the product. No-op when the folder has no readable
// manifest.
#pragma once

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/file-util.h"

namespace spillway::testing {

inline void reseal_checkpoint(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  auto text = read_file(path);
  if (!text.ok()) return;
  nlohmann::ordered_json m = nlohmann::ordered_json::parse(*text, nullptr, false);
  if (!m.is_object() || !m.contains("files") || !m["files"].is_array()) return;
  for (auto& f : m["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string()) continue;
    const auto d = digest_file(dir + "/" + f["path"].get<std::string>());
    if (!d.ok()) continue;
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", d->crc32c);
    f["bytes"] = d->bytes;
    f["crc32c"] = hex;
  }
  std::ofstream(path, std::ios::trunc) << m.dump(2);
}

}  // namespace spillway::testing
