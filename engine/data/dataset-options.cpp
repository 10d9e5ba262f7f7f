#include "data/dataset-options.h"

#include "core/thread-pool.h"

namespace spillway {

Result<DatasetOptions> make_dataset_options(const DataSettings& data, const ModelConfig& model) {
  if (data.seq_len < 2)
    return invalid_argument("data.seq_len must be at least 2, got " + std::to_string(data.seq_len));
  DatasetOptions opts;
  opts.seq_len = data.seq_len;
  opts.instruction_layout = data.packing ? InstructionLayout::kPacked : InstructionLayout::kPadded;
  auto format = parse_dataset_format(data.format);
  if (!format.ok()) return format.status().with_context("data.format");
  opts.read.format = *format;
  auto kind = parse_chat_template_kind(data.chat_template);
  if (!kind.ok()) return kind.status().with_context("data.template");
  opts.chat_template = *kind;
  opts.model_type = model.model_type;  // the family's template when the tokenizer names none
  opts.vocab_size = model.vocab_size;  // pre-tokenized ids index the model's embedding
  opts.pool = &ThreadPool::global();
  return opts;
}

}  // namespace spillway
