// The dataset options of a job for a model: the one place that turns what a job says about its data
// (the job file's data.format, data.template, data.seq_len and data.packing) and the model it
// trains (config.json: model_type picks the chat template when the tokenizer names none, vocab_size
// bounds pre-tokenized ids) into DatasetOptions. Training (engine/train, through
// dataset_options(TrainJob, ...)), the worker's `eval` and the GUI's dataset preview all call it,
// so the preview shows the chat template and the trained-token mask that training uses.
//
// Pure function of its arguments; thread-safe.
#pragma once

#include <string>

#include "core/status.h"
#include "data/dataset.h"
#include "model/model-config.h"

namespace spillway {

// What a job says about its data, under the job file's names. No defaults of its own: a job's
// settings come from its TrainJob (train/train-job.h, data_settings), whose defaults are the job
// schema's (engine/job/job-schema).
struct DataSettings {
  std::string format;  // data.format: auto, text, json, alpaca, sharegpt, openai, pretokenized
  std::string chat_template;  // data.template: auto, llama-2, llama-3, chatml, alpaca, plain
  int seq_len = 0;            // data.seq_len: positions per sequence
  bool packing = true;        // data.packing: instruction data packed (kPacked)
};

// kInvalidArgument naming data.format or data.template when one is not a known name, or
// data.seq_len below 2. The options tokenize on ThreadPool::global().
Result<DatasetOptions> make_dataset_options(const DataSettings& data, const ModelConfig& model);

}  // namespace spillway
