// OpTimes: the device time of a step's ops by family, for `spillway-worker bench --ops` (README,
// "Per op"). Each op it runs is enqueued between two timing events on the op's own stream, so its
// time is the device's time for that op alone (not the host's enqueue time, nor the waits for
// weights before it); after the step, collect() sums them per family with the op's work (FLOPs or
// bytes) and its distinct shapes. TimedBackend (timed-backend.h) and MeteredDevice route their ops
// through it.
//
// Disabled (the default), run() only runs the op: the timed steps of the bench pay one branch per
// op. Thread-safety: one thread drives it, as the engine drives its backend. Ownership: borrows the
// device, which must outlive it; the events are its own.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "compute/device.h"
#include "core/status.h"

namespace spillway::worker {

// The op families of a training step, in the table's order.
enum class OpFamily : int {
  kGemmForward,        // linear_forward: the layers' projections, the recompute's included
  kGemmBackward,       // linear_backward: input gradient and weight gradient, one call
  kAttentionForward,   // attention_forward, the recompute's included
  kAttentionBackward,  // attention_backward
  kAttentionKeyBias,   // attention_key_bias_backward (q/k/v biases: Qwen2)
  kLmHead,             // lm_head_loss: logits, cross-entropy and their backward, chunked
  kRmsnorm,            // rmsnorm forward and backward, residual + rmsnorm
  kRope,               // rope forward and backward
  kMlpActivation,      // swiglu / geglu forward and backward
  kAdd,                // add_inplace: the residual adds
  kEmbedding,          // embedding forward and backward
  kFillZero,           // the gradient buffers zeroed before each block's backward
  kSumSquares,         // each block's Σ g² for the gradient norm, as its gradient comes down
  kAdamw,              // the HBM state tier's AdamW on the device
  kConvert,            // fp32 master → act weights as they reach a slot (on the H2D stream)
  kCount
};
// "gemm_forward", ...: the name in the table and the JSON.
const char* op_family_name(OpFamily f);
// Whether the family's work is counted in FLOPs (tensor-core work) or in bytes (memory-bound).
bool op_family_counts_flops(OpFamily f);

// What one call of an op does: FLOPs (a multiply-add counts 2) or the least bytes it must read
// plus write (intermediate traffic such as scratch and partial sums not counted).
struct OpWork {
  double flops = 0;
  double bytes = 0;
};

// One family's ops over the timed span.
struct OpFamilyTime {
  OpFamily family = OpFamily::kCount;
  int64_t count = 0;             // calls
  double seconds = 0;            // device time, summed over the calls
  double flops = 0;              // summed over the calls
  double bytes = 0;              // summed over the calls
  std::set<std::string> shapes;  // the distinct shapes of its calls
  std::set<compute::StreamId> streams;
};

class OpTimes {
 public:
  explicit OpTimes(compute::Device& device) : dev_(device) {}
  OpTimes(const OpTimes&) = delete;
  OpTimes& operator=(const OpTimes&) = delete;

  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }

  // Runs `op`; when enabled, between two timing events on `stream`, counted as one call of
  // `family` doing `work` at `shape` ("[8192, 4096] x [4096, 4096]").
  Status run(OpFamily family, const OpWork& work, const std::string& shape,
             compute::StreamId stream, const std::function<Status()>& op);

  // Waits until every timed op has finished on the device.
  Status wait();
  // After wait(): the families that ran (in OpFamily order); forgets them, keeping the events for
  // the next span.
  Result<std::vector<OpFamilyTime>> collect();

 private:
  struct Call {
    OpFamily family;
    OpWork work;
    std::string shape;
    compute::StreamId stream;
  };
  compute::Device& dev_;
  bool enabled_ = false;
  std::vector<Call> calls_;
  std::vector<compute::Event> starts_, ends_;  // [i]: call i's; grown as needed
};

}  // namespace spillway::worker
