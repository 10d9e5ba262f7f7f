// InferenceSession: a trained model loaded for evaluation and text generation, through the same
// streaming engine as training (forward only), so a model larger than the device works too.
//
// Generation recomputes the whole prefix for each new token (no KV cache yet): fine for the short
// prompts of `spillway-worker generate`, quadratic for long ones. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "train/model-state.h"
#include "train/streaming-engine.h"

namespace spillway {

struct EvalResult {
  double loss = 0;        // mean cross-entropy over non-ignored targets
  double perplexity = 0;  // exp(loss)
  int64_t targets = 0;
  int64_t sequences = 0;
};

struct GenerateOptions {
  int max_new_tokens = 64;
  float temperature = 0.0f;  // 0: greedy (argmax)
  float top_p = 1.0f;        // nucleus sampling (Holtzman et al. 2019) when < 1
  uint64_t seed = 0;
  bool stop_at_eos = true;
  // Further ids that end the reply when generated (a chat template's end of turn, <|im_end|>,
  // <|eot_id|>); kept in the output, as EOS is.
  std::vector<int32_t> stop_ids;
};

// Mean loss of `ds` in file order through `forward` (a StreamingEngine's or a
// DataParallelEngine's forward pass), `micro_batches` × `micro_batch_size` sequences per pass; at
// most `max_batches` passes (0: all). Used by eval and by the trainer's periodic evaluation. loss
// is 0 when no target is trained.
using ForwardPass = std::function<Result<StepResult>(const StepBatch&)>;
Result<EvalResult> evaluate_dataset(const ForwardPass& forward, const Dataset& ds,
                                    int micro_batches, int micro_batch_size,
                                    int64_t max_batches = 0);

class InferenceSession {
 public:
  // Loads `model_dir` (config.json, safetensors, tokenizer: `tokenizer_path` when not empty, for a
  // checkpoint folder, which has none) for sequences up to `max_seq` tokens,
  // in micro-batches of `batch` sequences, on the backend `backend` names ("auto", "cpu", "cuda";
  // compute/backend-loader.h, whose errors pass through). The device holds one sequence's logits,
  // [max_seq, vocab] fp32, for logits() and generate().
  static Result<std::unique_ptr<InferenceSession>> open(const std::string& model_dir, int max_seq,
                                                        int batch = 1,
                                                        uint64_t device_memory_bytes = 0,
                                                        const std::string& backend = "auto",
                                                        const std::string& tokenizer_path = "");

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // Which backend runs the session, on what, and for "auto" why (BackendChoice::reason).
  const std::string& backend_description() const { return backend_description_; }
  const ModelConfig& config() const { return state_->config(); }

  // The longest sequence, prompt and new tokens together, that the session holds.
  int max_seq() const { return max_seq_; }
  // Mean loss of `ds` (sequences of at most max_seq tokens).
  Result<EvalResult> eval(const Dataset& ds);
  // The prompt's ids followed by up to max_new_tokens generated ids.
  Result<std::vector<int32_t>> generate(std::vector<int32_t> ids, const GenerateOptions& options);
  // Logits [tokens, vocab] of one sequence (tests).
  Result<std::vector<float>> logits(const std::vector<int32_t>& ids);

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<compute::Backend> backend_;
  std::string backend_description_;
  std::unique_ptr<ModelState> state_;
  std::unique_ptr<StreamingEngine> engine_;
  int max_seq_ = 0, batch_ = 1;
};

}  // namespace spillway
