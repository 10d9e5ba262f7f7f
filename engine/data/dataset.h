// Dataset: a file of text or instruction data turned into training sequences of at most
// seq_len positions, with shifted labels (see packing.h for the convention), ready for batching.
//
// What each format becomes:
// - Plain text and {"text"} records are documents: [BOS?] + tokens + EOS, concatenated in file
//   order and cut into windows of seq_len+1 tokens (packing.h). Every position is trained.
// - Alpaca, ShareGPT and OpenAI records are conversations rendered by a chat template
//   (chat-template.h): the model's own, by jinja2 in one renderer process for the whole file
//   (chat-template-jinja.h), else a hand-written one; prompt tokens get label -100, replies and
//   their closing token are trained. A conversation the model's template refuses is a bad record
//   "FILE:LINE: the chat template failed at its line N: MESSAGE".
//   Each conversation is cut at seq_len (counted in stats().truncated). Layout kPacked (a job's
//   default, data.packing) puts several whole conversations in a sequence (pack_examples, best
//   fit), each with its own positions, so that the trainer's block-diagonal mask keeps every
//   conversation alone (compute/backend.h, Positions): the same losses and gradients as one
//   conversation per row, without the compute spent on padding (LLaMA-Factory's neat_packing,
//   axolotl's sample packing). kPadded: one conversation per sequence, padded by the batcher.
// - Pre-tokenized records are one sequence each, never packed, cut at seq_len; labels follow the
//   HF convention in the file and are shifted on load. They need no tokenizer: a model folder
//   without tokenizer files trains on them, the ids checked against the model's vocab_size.
//
// A Dataset is immutable after load and cheap to copy: copies and the views made by
// split_tail() share the sequences (shared_ptr to const). All const methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "data/chat-template.h"
#include "data/dataset-reader.h"
#include "data/dataset-stats.h"
#include "data/packing.h"

namespace spillway {

class Tokenizer;
class ThreadPool;

enum class InstructionLayout { kPadded, kPacked };

const char* instruction_layout_name(InstructionLayout layout);
Result<InstructionLayout> parse_instruction_layout(std::string_view name);

struct DatasetOptions {
  ReadOptions read;  // format (auto), text split, skip_bad_records, how many issues to keep
  int seq_len = 0;  // positions per sequence (data.seq_len; the model sees seq_len tokens, predicts
                    // seq_len): required, load() refuses 0

  // Text formats.
  bool add_bos = false;   // BOS before each document (EOS always goes after each)
  bool keep_tail = true;  // keep the last, shorter window (padded) instead of dropping it

  // Chat formats.
  ChatTemplateKind chat_template = ChatTemplateKind::kAuto;
  ChatTemplateKind fallback_template = ChatTemplateKind::kPlain;  // when auto finds nothing
  std::string model_type;      // config.json model_type, for choose_chat_template
  std::string default_system;  // system message for conversations that have none
  // kPadded unless asked: a job asks for kPacked by default (data.packing, dataset-options.h).
  InstructionLayout instruction_layout = InstructionLayout::kPadded;

  // Pre-tokenized data: every id must be below this, the model's vocab_size (config.json), which
  // may exceed the tokenizer's size (padded embeddings). 0: below the tokenizer's size instead;
  // it must be set when there is no tokenizer.
  int32_t vocab_size = 0;

  ThreadPool* pool = nullptr;  // tokenizes records in parallel when set
};

class Dataset {
 public:
  Dataset() = default;

  // Reads, tokenizes and packs `path`. Errors: those of read_dataset_records; kInvalidArgument
  // "FILE:LINE: reason" for a record that cannot be tokenized (pre-tokenized id outside the
  // vocabulary) unless skipping; kInvalidArgument when no sequence results or seq_len < 1.
  static Result<Dataset> load(const std::string& path, const Tokenizer& tokenizer,
                              const DatasetOptions& options);
  // As load, for a model that has no tokenizer: pre-tokenized data only, its ids checked against
  // options.vocab_size. kInvalidArgument "FILE: <format> data needs a tokenizer ..." for any other
  // format, and when options.vocab_size is not set.
  static Result<Dataset> load(const std::string& path, const DatasetOptions& options);
  // As load, from records already read; `name` is used in messages.
  static Result<Dataset> from_records(DatasetRecords records, const std::string& name,
                                      const Tokenizer& tokenizer, const DatasetOptions& options);
  static Result<Dataset> from_records(DatasetRecords records, const std::string& name,
                                      const DatasetOptions& options);

  size_t size() const { return end_ - begin_; }
  bool empty() const { return size() == 0; }
  const TokenSequence& operator[](size_t i) const { return shared_->sequences[begin_ + i]; }

  int seq_len() const { return shared_ ? shared_->seq_len : 0; }
  // Id written into padding positions (tokenizer pad, else EOS, else 0); their labels are -100.
  int32_t pad_id() const { return shared_ ? shared_->pad_id : 0; }
  DatasetFormat format() const { return shared_ ? shared_->format : DatasetFormat::kAuto; }
  // The template used for chat formats (kind kAuto for text and pre-tokenized data).
  const ChatTemplateChoice& chat_template() const;
  // Statistics of the whole file as loaded (not of this view).
  const DatasetStats& stats() const { return shared_->stats; }

  // Positions and trained positions of the sequences in this view.
  int64_t position_count() const;
  int64_t trained_count() const;
  // Of the sequences in this view padded to seq_len: the share of their positions that are the
  // data's (the rest is padding), and the share of full rows' causal attention that attention
  // computes: a packed sequence attends within each example and within its padding, Σ length² /
  // seq_len², any other the whole row. 0 for an empty view.
  double fill() const;
  double attention_share() const;
  // Whether any sequence of this view packs examples (carries positions): attention then runs
  // with the block-diagonal mask, on the module's own CUDA kernels.
  bool packed() const;

  // Holds out the last `fraction` (0 <= fraction < 1) of the sequences, in file order, for
  // evaluation: returns {train, eval}. The count held out is round(size * fraction), at least
  // one when fraction > 0, and always leaves one for training. For packed text this is the end
  // of the file (the last 10% of tinyshakespeare). kInvalidArgument for a fraction outside
  // [0, 1) or a view of fewer than 2 sequences with fraction > 0.
  Result<std::pair<Dataset, Dataset>> split_tail(double fraction) const;

 private:
  struct Shared {
    std::vector<TokenSequence> sequences;
    int seq_len = 0;
    int32_t pad_id = 0;
    DatasetFormat format = DatasetFormat::kAuto;
    ChatTemplateChoice chat_template{ChatTemplateKind::kAuto, "", "", "", {}};
    DatasetStats stats;
  };
  // `tokenizer` may be null for pre-tokenized records.
  static Result<Dataset> build(DatasetRecords records, const std::string& name,
                               const Tokenizer* tokenizer, const DatasetOptions& options);
  Dataset(std::shared_ptr<const Shared> shared, size_t begin, size_t end)
      : shared_(std::move(shared)), begin_(begin), end_(end) {}

  std::shared_ptr<const Shared> shared_;
  size_t begin_ = 0, end_ = 0;
};

}  // namespace spillway
