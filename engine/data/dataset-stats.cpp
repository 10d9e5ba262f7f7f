#include "data/dataset-stats.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace spillway {

int32_t DatasetStats::max_example_tokens() const {
  return example_tokens.empty() ? 0
                                : *std::max_element(example_tokens.begin(), example_tokens.end());
}

double DatasetStats::mean_example_tokens() const {
  return example_tokens.empty()
             ? 0.0
             : static_cast<double>(total_tokens) / static_cast<double>(example_tokens.size());
}

std::vector<int64_t> DatasetStats::histogram(int bins, int32_t upper) const {
  if (bins < 1) return {};
  std::vector<int64_t> h(static_cast<size_t>(bins), 0);
  if (upper <= 0) upper = std::max(max_example_tokens(), 1);
  // Bin b holds lengths in [b*width, (b+1)*width); width rounds up so that `upper` is in range.
  const int64_t width = (static_cast<int64_t>(upper) + bins) / bins;
  for (int32_t n : example_tokens) {
    int64_t b = std::min<int64_t>(n / width, bins - 1);
    ++h[static_cast<size_t>(b)];
  }
  return h;
}

nlohmann::json DatasetStats::summary_json() const {
  nlohmann::json issue_lines = nlohmann::json::array();
  for (const RecordIssue& i : issues) issue_lines.push_back(i.to_string());
  return {{"records", records},
          {"skipped", skipped},
          {"sequences", sequences},
          {"total_tokens", total_tokens},
          {"truncated", truncated},
          {"positions", positions},
          {"trained_tokens", trained_tokens},
          {"dropped_positions", dropped_positions},
          {"max_example_tokens", max_example_tokens()},
          {"mean_example_tokens", mean_example_tokens()},
          {"issues", issue_lines}};
}

}  // namespace spillway
