#include "train/inference.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "compute/backend-loader.h"
#include "data/batch-iterator.h"
#include "model/safetensors.h"
#include "train/checkpoint-manifest.h"
#include "train/export.h"

namespace spillway {

Result<std::unique_ptr<InferenceSession>> InferenceSession::open(
    const std::string& model_dir, int max_seq, int batch, uint64_t device_memory_bytes,
    const std::string& backend, const std::string& tokenizer_path) {
  auto s = std::make_unique<InferenceSession>();
  SPW_RETURN_IF_ERROR(verify_if_checkpoint(model_dir));  // a checkpoint folder as the model
  SPW_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(model_dir));
  SPW_ASSIGN_OR_RETURN(s->tokenizer_,
                       load_model_tokenizer(tokenizer_path.empty() ? model_dir : tokenizer_path));
  SPW_ASSIGN_OR_RETURN(s->state_, ModelState::create(ParameterLayout::build(config), false));
  SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(model_dir));
  SPW_RETURN_IF_ERROR(s->state_->load_weights(weights));
  SPW_ASSIGN_OR_RETURN(compute::BackendChoice choice,
                       compute::make_backend({backend, device_memory_bytes}));
  s->backend_ = std::move(choice.backend);
  s->backend_description_ = std::move(choice.reason);
  s->max_seq_ = max_seq;
  s->batch_ = batch;
  StreamingConfig sc;
  sc.micro_batch_size = batch;
  sc.seq_len = max_seq;
  sc.logits_tokens = max_seq;  // logits() runs one sequence
  SPW_ASSIGN_OR_RETURN(s->engine_, StreamingEngine::create(*s->backend_, *s->state_, sc));
  return s;
}

Result<EvalResult> evaluate_dataset(const ForwardPass& forward, const Dataset& ds,
                                    int micro_batches, int micro_batch_size, int64_t max_batches) {
  const int rows = micro_batches * micro_batch_size;
  EvalResult r;
  double loss_sum = 0;
  int64_t batches = 0;
  for (size_t begin = 0; begin < ds.size(); begin += rows) {
    if (max_batches > 0 && batches++ >= max_batches) break;
    Batch b = make_batch_range(ds, begin, rows);
    SPW_ASSIGN_OR_RETURN(StepResult s, forward(StepBatch{micro_batches, micro_batch_size, b.seq_len,
                                                         b.input_ids, b.labels, b.positions}));
    loss_sum += s.loss_sum;
    r.targets += s.targets;
  }
  r.sequences = static_cast<int64_t>(ds.size());
  r.loss = r.targets ? loss_sum / r.targets : 0.0;
  r.perplexity = std::exp(r.loss);
  return r;
}

Result<EvalResult> InferenceSession::eval(const Dataset& ds) {
  if (ds.seq_len() > max_seq_)
    return invalid_argument("eval: dataset sequences of " + std::to_string(ds.seq_len()) +
                            " tokens exceed the session's " + std::to_string(max_seq_));
  StreamingEngine& engine = *engine_;
  return evaluate_dataset([&](const StepBatch& b) { return engine.forward(b); }, ds, 1, batch_);
}

Result<std::vector<float>> InferenceSession::logits(const std::vector<int32_t>& ids) {
  const int n = static_cast<int>(ids.size());
  if (n < 1 || n > max_seq_)
    return invalid_argument("logits: sequence of " + std::to_string(n) + " tokens (1.." +
                            std::to_string(max_seq_) + ")");
  std::vector<int32_t> labels(n, -100);
  std::vector<float> out(static_cast<size_t>(n) * config().vocab_size);
  StepBatch sb{1, 1, n, ids, labels};
  SPW_ASSIGN_OR_RETURN(StepResult unused, engine_->forward(sb, out.data()));
  (void)unused;
  return out;
}

Result<std::vector<int32_t>> InferenceSession::generate(std::vector<int32_t> ids,
                                                        const GenerateOptions& o) {
  std::mt19937_64 rng(o.seed);
  const int vocab = config().vocab_size;
  const auto eos = tokenizer_->eos_id();
  for (int i = 0; i < o.max_new_tokens && static_cast<int>(ids.size()) < max_seq_; ++i) {
    SPW_ASSIGN_OR_RETURN(std::vector<float> all, logits(ids));
    const float* last = all.data() + (ids.size() - 1) * static_cast<size_t>(vocab);
    int32_t next = 0;
    if (o.temperature <= 0.0f) {
      next = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    } else {
      // softmax(logits / T), then keep the smallest set of tokens whose mass reaches top_p.
      std::vector<double> p(vocab);
      const float mx = *std::max_element(last, last + vocab);
      double sum = 0;
      for (int v = 0; v < vocab; ++v) sum += p[v] = std::exp((last[v] - mx) / o.temperature);
      std::vector<int> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
      double kept = 0;
      size_t n = 0;
      while (n < order.size() && (n == 0 || kept < o.top_p * sum)) kept += p[order[n++]];
      double r = std::uniform_real_distribution<double>(0.0, kept)(rng);
      next = order[n - 1];
      for (size_t k = 0; k < n; ++k) {
        r -= p[order[k]];
        if (r <= 0) {
          next = order[k];
          break;
        }
      }
    }
    ids.push_back(next);
    if (o.stop_at_eos && eos && next == *eos) break;
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end()) break;
  }
  return ids;
}

}  // namespace spillway
