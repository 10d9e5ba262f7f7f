// Shared helpers for the tokenizer tests: loading a tokenizer once per process (the large
// tokenizer.json files take a moment to parse) and reading the golden files.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file-util.h"
#include "data/tokenizer.h"
#include "test-data.h"

namespace spillway::testing {

// The tokenizer at data_path(rel), loaded on first use and kept; nullptr (with the error in
// `error`) when loading failed.
inline const Tokenizer* shared_tokenizer(const std::string& rel, std::string* error = nullptr) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  static std::map<std::string, std::string> errors;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(rel);
  if (it == cache.end()) {
    auto r = Tokenizer::load(data_path(rel));
    if (!r.ok()) errors[rel] = r.status().to_string();
    it = cache.emplace(rel, r.ok() ? std::move(r).value() : nullptr).first;
  }
  if (error && errors.count(rel)) *error = errors[rel];
  return it->second.get();
}

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;
};

struct GoldenFile {
  std::string tokenizer_file;  // relative to the data dir
  std::vector<GoldenCase> cases;
};

inline GoldenFile read_golden(const std::string& name) {
  GoldenFile g;
  auto text = read_file(data_path("golden/tokenizers/" + name + ".json"));
  if (!text.ok()) return g;
  const auto j = nlohmann::json::parse(*text);
  g.tokenizer_file = j.at("tokenizer_file").get<std::string>();
  for (const auto& c : j.at("cases"))
    g.cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>()});
  return g;
}

inline std::string ids_str(const std::vector<int32_t>& ids, size_t max = 40) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < max; ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  if (ids.size() > max) s += " ...";
  return s;
}

}  // namespace spillway::testing
