#include "data/packing.h"

#include <gtest/gtest.h>

#include <numeric>

namespace spillway {
namespace {

using Ids = std::vector<int32_t>;

TEST(Packing, ShiftGivesNextTokenLabels) {
  Ids tokens = {10, 11, 12, 13};
  std::vector<uint8_t> trained = {0, 0, 1, 1};
  TokenSequence s = shift_tokens(tokens, trained);
  EXPECT_EQ(s.input_ids, (Ids{10, 11, 12}));
  // Position 0 predicts token 11 (a prompt token: ignored), 1 predicts 12, 2 predicts 13.
  EXPECT_EQ(s.labels, (Ids{-100, 12, 13}));
  EXPECT_EQ(s.trained_count(), 2);
  EXPECT_TRUE(shift_tokens(Ids{5}, std::vector<uint8_t>{1}).input_ids.empty());
}

TEST(Packing, WindowsOverlapByOneToken) {
  Ids tokens(11);
  std::iota(tokens.begin(), tokens.end(), 100);  // 100..110: 10 targets
  std::vector<uint8_t> trained(tokens.size(), 1);
  int64_t dropped = -1;
  auto seqs = pack_stream(tokens, trained, 4, /*keep_tail=*/true, &dropped);
  ASSERT_EQ(seqs.size(), 3u);
  EXPECT_EQ(seqs[0].input_ids, (Ids{100, 101, 102, 103}));
  EXPECT_EQ(seqs[0].labels, (Ids{101, 102, 103, 104}));
  EXPECT_EQ(seqs[1].input_ids, (Ids{104, 105, 106, 107}));
  EXPECT_EQ(seqs[1].labels, (Ids{105, 106, 107, 108}));
  EXPECT_EQ(seqs[2].input_ids, (Ids{108, 109}));
  EXPECT_EQ(seqs[2].labels, (Ids{109, 110}));
  EXPECT_EQ(dropped, 0);

  auto no_tail = pack_stream(tokens, trained, 4, /*keep_tail=*/false, &dropped);
  EXPECT_EQ(no_tail.size(), 2u);
  EXPECT_EQ(dropped, 2);

  // Exactly k*T + 1 tokens: no tail at all.
  auto exact = pack_stream(std::span<const int32_t>(tokens).first(9),
                           std::span<const uint8_t>(trained).first(9), 4, true, &dropped);
  EXPECT_EQ(exact.size(), 2u);
  EXPECT_EQ(dropped, 0);
}

TEST(Packing, PackedMasksFollowTheTargetToken) {
  // Two examples [p p r r] [p r]: prompts (p) untrained, replies (r) trained.
  Ids tokens = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> trained = {0, 0, 1, 1, 0, 1};
  auto seqs = pack_stream(tokens, trained, 8, true, nullptr);
  ASSERT_EQ(seqs.size(), 1u);
  EXPECT_EQ(seqs[0].labels, (Ids{-100, 3, 4, -100, 6}));
}

TEST(Packing, SingleSequenceTruncates) {
  Ids tokens = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> trained = {0, 1, 1, 1, 1, 1};
  bool truncated = false;
  auto s = single_sequence(tokens, trained, 3, &truncated);
  EXPECT_TRUE(truncated);
  EXPECT_EQ(s.input_ids, (Ids{1, 2, 3}));
  EXPECT_EQ(s.labels, (Ids{2, 3, 4}));
  auto whole = single_sequence(tokens, trained, 5, &truncated);
  EXPECT_FALSE(truncated);
  EXPECT_EQ(whole.size(), 5u);
}

TEST(Packing, HfLabelsAreShifted) {
  Ids ids = {7, 8, 9, 10};
  Ids hf = {-100, -100, 9, 10};
  bool truncated = true;
  auto s = sequence_from_hf_labels(ids, hf, 16, &truncated);
  EXPECT_FALSE(truncated);
  EXPECT_EQ(s.input_ids, (Ids{7, 8, 9}));
  EXPECT_EQ(s.labels, (Ids{-100, 9, 10}));
  auto no_labels = sequence_from_hf_labels(ids, {}, 2, &truncated);
  EXPECT_TRUE(truncated);
  EXPECT_EQ(no_labels.input_ids, (Ids{7, 8}));
  EXPECT_EQ(no_labels.labels, (Ids{8, 9}));
}

}  // namespace
}  // namespace spillway

namespace spillway {
namespace {

TokenSequence example(int n, int32_t first) {
  TokenSequence s;
  for (int i = 0; i < n; ++i) {
    s.input_ids.push_back(first + i);
    s.labels.push_back(i % 2 ? first + i + 1 : kIgnoreIndex);
  }
  return s;
}

TEST(PackExamples, BestFitKeepsEachExampleWholeWithItsOwnPositions) {
  // Lengths 6, 3, 5, 2, 4, 0 into sequences of 8: best fit decreasing gives {6, 2}, {5, 3} and
  // {4}; within each, and among them, the file order stays.
  std::vector<TokenSequence> in;
  for (int n : {6, 3, 5, 2, 4, 0}) in.push_back(example(n, 100 * static_cast<int32_t>(in.size())));
  const std::vector<TokenSequence> out = pack_examples(in, 8);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].input_ids, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 300, 301}));
  EXPECT_EQ(out[0].positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 1}));
  EXPECT_EQ(out[0].labels, (std::vector<int32_t>{-100, 2, -100, 4, -100, 6, -100, 302}));
  EXPECT_EQ(out[1].input_ids, (std::vector<int32_t>{100, 101, 102, 200, 201, 202, 203, 204}));
  EXPECT_EQ(out[1].positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 4}));
  EXPECT_EQ(out[2].input_ids, (std::vector<int32_t>{400, 401, 402, 403}));
  EXPECT_TRUE(out[2].positions.empty());  // one example: the default positions
  EXPECT_EQ(out[0].example_count(), 2);
  EXPECT_EQ(out[2].example_count(), 1);
}

TEST(PackExamples, ExamplesOfAWholeSequenceStayAlone) {
  std::vector<TokenSequence> in = {example(8, 0), example(8, 100), example(1, 200)};
  const std::vector<TokenSequence> out = pack_examples(in, 8);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].input_ids.front(), 0);
  EXPECT_EQ(out[1].input_ids.front(), 100);
  EXPECT_EQ(out[2].input_ids, std::vector<int32_t>{200});
  EXPECT_TRUE(pack_examples({}, 8).empty());
}

}  // namespace
}  // namespace spillway
