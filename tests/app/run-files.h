// What a worker run leaves in its run folder, read back by the end-to-end tests (tests/app and the
// GPU tests): the events of events.jsonl, and the safetensors files of a checkpoint.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace spillway::testing {

// Every event of <run_dir>/events.jsonl in file order (a resumed run appends to the same file); a
// line that is not JSON is a test failure and left out.
inline std::vector<nlohmann::json> read_events(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream f(run_dir + "/events.jsonl");
  for (std::string line; std::getline(f, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << line;
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

// The events whose "type" is `type`, in order.
inline std::vector<nlohmann::json> of_type(const std::vector<nlohmann::json>& events,
                                           const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const auto& e : events) {
    if (e["type"] == type) out.push_back(e);
  }
  return out;
}

// The .safetensors files under checkpoint folder `dir`, relative to it and sorted: the weights and
// the AdamW state however its tier lays it out (one file in DRAM, one per block on the SSD).
inline std::vector<std::string> checkpoint_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".safetensors")
      out.push_back(fs::relative(e.path(), dir).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace spillway::testing
