// Post-processors of a Hugging Face tokenizer.json ("post_processor"): the special tokens put
// around a single sequence when encoding with add_special_tokens=True. Supported:
// TemplateProcessing ("single" template with SpecialToken / Sequence items), RobertaProcessing
// and BertProcessing (cls A sep), ByteLevel (ids unchanged: it only trims offsets), Sequence.
//
// Immutable; process() is const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "core/status.h"

namespace spillway {

class TokenizerPostProcessor {
 public:
  // One item of a template: the sequence itself (ids empty) or fixed special-token ids.
  struct Item {
    bool sequence = false;
    std::vector<int32_t> ids;
  };

  explicit TokenizerPostProcessor(std::vector<Item> items) : items_(std::move(items)) {}
  // No special tokens: ids unchanged.
  TokenizerPostProcessor() : items_{Item{true, {}}} {}

  // [n] -> [n + specials]: the template applied to `ids`.
  std::vector<int32_t> process(const std::vector<int32_t>& ids) const;
  const std::vector<Item>& items() const { return items_; }

 private:
  std::vector<Item> items_;
};

// Parses a "post_processor" object (JSON null: no special tokens). A Sequence of processors is
// flattened into one template (HF applies them in turn; only one of them adds tokens in
// practice). kCorrupt names a missing special token; kUnsupported an unknown type.
Result<TokenizerPostProcessor> parse_post_processor(const nlohmann::json& j);

}  // namespace spillway
