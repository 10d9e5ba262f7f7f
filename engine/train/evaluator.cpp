#include "train/evaluator.h"

#include <chrono>

#include "train/inference.h"

namespace spillway {

Status Evaluator::evaluate(int64_t step) {
  if (run_.eval_ds.empty()) return {};
  const auto t0 = std::chrono::steady_clock::now();
  // Past one machine every process evaluates alike: each block's broadcast needs every GPU.
  DataParallelEngine& engine = *run_.engine;
  SPW_ASSIGN_OR_RETURN(
      EvalResult r,
      evaluate_dataset([&](const StepBatch& b) { return engine.forward(b); }, run_.eval_ds,
                       job_.grad_accum, job_.micro_batch_size, job_.eval_batches));
  if (!r.targets || std::isnan(r.loss)) return {};
  last_loss_ = r.loss;
  report_.eval(step, r.loss,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return {};
}

}  // namespace spillway
