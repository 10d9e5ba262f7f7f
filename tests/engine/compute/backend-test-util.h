// Helpers for tests that drive a compute::Backend: a workspace sized for the shapes under test,
// OpShapes for one op's calls, per-token losses summed on the host, and status assertions.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "compute/backend.h"
#include "compute/cpu/cpu-backend.h"
#include "core/status.h"

#ifndef ASSERT_OK
#define ASSERT_OK(expr)                                                \
  do {                                                                 \
    const ::spillway::Status spw_st_ = (expr);                         \
    ASSERT_TRUE(spw_st_.ok()) << #expr << ": " << spw_st_.to_string(); \
  } while (0)
#endif
#ifndef EXPECT_OK
#define EXPECT_OK(expr)                                                \
  do {                                                                 \
    const ::spillway::Status spw_st_ = (expr);                         \
    EXPECT_TRUE(spw_st_.ok()) << #expr << ": " << spw_st_.to_string(); \
  } while (0)
#endif

namespace spillway::compute::testing {

// A CPU backend whose device memory, the workspace included, starts as NaN: an op that reads
// scratch it did not write fails its test.
inline std::unique_ptr<Backend> make_poisoned_cpu_backend() {
  return make_cpu_backend(CpuBackendOptions{.poison_allocations = true});
}

// Allocates workspace_bytes(shapes) of device memory on `be` (freed with the backend) and hands it
// over with set_workspace, as the trainer does with a slice of its arena.
inline Status set_test_workspace(Backend& be, const OpShapes& shapes) {
  const size_t bytes = be.workspace_bytes(shapes);
  if (bytes == 0) return be.set_workspace(nullptr, 0, shapes);
  SPW_ASSIGN_OR_RETURN(void* ws, be.device().device_alloc(bytes));
  return be.set_workspace(ws, bytes, shapes);
}

// Shapes of attention calls over q[batch, seq, hq, head_dim], k/v[batch, seq, hkv, head_dim].
inline OpShapes attention_shapes(int batch, int seq, int hq, int hkv, int head_dim) {
  OpShapes s;
  s.tokens = batch * seq;
  s.batch = batch;
  s.seq = seq;
  s.heads = hq;
  s.kv_heads = hkv;
  s.head_dim = head_dim;
  return s;
}

// Shapes of lm_head_loss calls over n tokens of width d, a vocabulary of v and chunks of `chunk`.
inline OpShapes lm_head_shapes(int n, int d, int v, int chunk) {
  OpShapes s;
  s.tokens = n;
  s.hidden = d;
  s.vocab = v;
  s.lm_head_chunk = chunk;
  return s;
}

// Σ of per-token losses, in double as the trainer sums them.
inline double sum_losses(const std::vector<float>& losses) {
  double total = 0.0;
  for (float l : losses) total += l;
  return total;
}

}  // namespace spillway::compute::testing
