// The tiny Llama and the pre-tokenized dataset that the checkpoint fuzz targets train on paper: a
// model small enough to load thousands of times a second, and data whose cursor a checkpoint
// records. Header only; not thread-safe (libFuzzer runs one input at a time).
#pragma once

#include "data/dataset.h"
#include "model/model-config.h"

namespace spillway::fuzz {

// 2 layers of hidden 8, 2 query heads over 1 key-value head of 4, vocabulary 16.
inline ModelConfig tiny_config() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_layers = 2;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  return c;
}

// A 20-sequence pre-tokenized dataset of 8 positions each, as the job would load.
inline const Dataset& tiny_dataset() {
  static const Dataset ds = [] {
    DatasetRecords records;
    records.format = DatasetFormat::kPreTokenized;
    for (int i = 0; i < 20; ++i) {
      DatasetRecord r;
      r.line = i + 1;
      for (int t = 0; t < 9; ++t) r.input_ids.push_back((i + t) % 16);
      records.records.push_back(std::move(r));
    }
    DatasetOptions o;
    o.seq_len = 8;
    o.vocab_size = 16;
    return *Dataset::from_records(std::move(records), "fuzz.jsonl", o);
  }();
  return ds;
}

}  // namespace spillway::fuzz
