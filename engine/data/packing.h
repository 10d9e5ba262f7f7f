// Packing: token streams -> training sequences of at most seq_len positions, with labels already
// shifted (the golden convention of ../shared/data/README.md): for a sequence of T positions,
// `input_ids[t]` is the token at position t and `labels[t]` is the token the model must predict
// there, i.e. the next token, or kIgnoreIndex (-100) where nothing is trained.
//
// A piece of n tokens therefore gives n-1 positions: input_ids = tokens[0..n-2],
// labels[t] = tokens[t+1] when tokens[t+1] is trained, else -100. Text is packed by cutting
// windows of seq_len+1 tokens that overlap by one token (stride seq_len), so every token but the
// first is a target exactly once (nanoGPT, HF run_clm's group_texts with the shift made explicit).
//
// Instruction data packs whole examples instead (pack_examples): several conversations share a
// sequence, each with its own positions 0, 1, .. (`positions`), so that RoPE and attention treat
// each as if it were alone (compute/backend.h, Positions: a block-diagonal causal mask), and the
// last token of one is never trained to predict the first of the next.
//
// Sequences are stored unpadded; the batch builder pads them to seq_len. Pure functions,
// thread-safe; results owned by the caller.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace spillway {

inline constexpr int32_t kIgnoreIndex = -100;

struct TokenSequence {
  std::vector<int32_t> input_ids;  // [n], n <= seq_len
  std::vector<int32_t> labels;     // [n], target of position t or kIgnoreIndex
  // [n] when the sequence packs several examples: each token's position within its example, 0 at
  // an example's first token; empty: one example, positions 0..n-1.
  std::vector<int32_t> positions;
  size_t size() const { return input_ids.size(); }
  // Examples in the sequence (1 unless packed).
  int64_t example_count() const;
  // Positions whose label is not kIgnoreIndex.
  int64_t trained_count() const;
};

// tokens [n] and trained [n] (nonzero: the token is a target to learn) -> n-1 positions.
// n < 2 gives an empty sequence.
TokenSequence shift_tokens(std::span<const int32_t> tokens, std::span<const uint8_t> trained);

// Cuts `tokens` [N] with its mask `trained` [N] into windows of seq_len+1 tokens, stride seq_len,
// giving floor((N-1)/seq_len) full sequences. The last r = (N-1) mod seq_len positions form a
// shorter sequence when `keep_tail` (padded later), else they are dropped and counted in
// *dropped_positions (may be null).
std::vector<TokenSequence> pack_stream(std::span<const int32_t> tokens,
                                       std::span<const uint8_t> trained, int seq_len,
                                       bool keep_tail, int64_t* dropped_positions);

// One example per sequence (instruction data): the first seq_len+1 tokens are shifted as in
// shift_tokens; *truncated (may be null) says whether tokens were cut off.
TokenSequence single_sequence(std::span<const int32_t> tokens, std::span<const uint8_t> trained,
                              int seq_len, bool* truncated);

// Packs examples (each at most seq_len positions, as single_sequence makes them) into sequences of
// at most seq_len positions, none split, with their positions (TokenSequence::positions): best fit
// decreasing (each example, longest first, into the sequence with the least room that holds it),
// so that the sequences are nearly full; within a sequence, and among the sequences, examples keep
// their order in `examples`. Deterministic. Empty examples are dropped.
std::vector<TokenSequence> pack_examples(std::vector<TokenSequence> examples, int seq_len);

// Pre-tokenized data in the Hugging Face convention (labels aligned with input_ids, the model
// shifts; empty hf_labels means labels = input_ids) -> our shifted convention:
// input_ids = ids[0..n-2], labels[t] = hf_labels[t+1], cut to seq_len positions.
TokenSequence sequence_from_hf_labels(std::span<const int32_t> ids,
                                      std::span<const int32_t> hf_labels, int seq_len,
                                      bool* truncated);

}  // namespace spillway
