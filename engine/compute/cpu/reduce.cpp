// The sum of squares: fixed segments over the thread pool, 8 lanes in two 4-double vectors.
#include "compute/cpu/reduce.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "compute/cpu/vec-math.h"
#include "core/thread-pool.h"

namespace spillway::compute::cpu {

namespace {

constexpr size_t kLanes = 8;
constexpr size_t kMinSegment = size_t{1} << 16;  // elements: amortises a task's dispatch
constexpr size_t kMaxSegments = 256;  // enough to balance any pool; partials on the stack

typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));

// One segment, lane by lane as reduce.h says. The lanes live in two v4d (lanes 0-3 and 4-7): one
// AVX register each in the AVX2 clone, two SSE registers in the baseline, the same bits in both
// (each lane's arithmetic is the same IEEE operations; a fused multiply-add gives the same bits
// too, since the square is exact).
SPW_MULTIVERSION double segment_sum(const float* x, size_t count) {
  v4d lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    // Two 16-byte loads widened in place (vcvtps2pd from memory): no shuffles on the way.
    v4f fa, fb;
    std::memcpy(&fa, x + i, sizeof(fa));
    std::memcpy(&fb, x + i + 4, sizeof(fb));
    const v4d a = __builtin_convertvector(fa, v4d), b = __builtin_convertvector(fb, v4d);
    lo += a * a;
    hi += b * b;
  }
  for (size_t j = 0; i + j < count; ++j) {
    const double d = x[i + j];
    if (j < 4) {
      lo[j] += d * d;
    } else {
      hi[j - 4] += d * d;
    }
  }
  return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
}

}  // namespace

double sum_squares(const float* x, size_t count) {
  if (count == 0) return 0.0;
  const size_t segments =
      std::clamp<size_t>((count + kMinSegment - 1) / kMinSegment, 1, kMaxSegments);
  std::array<double, kMaxSegments> partial;
  ThreadPool::global().parallel_for(segments, [&](size_t s0, size_t s1) {
    for (size_t s = s0; s < s1; ++s) {
      const size_t lo = count * s / segments, hi = count * (s + 1) / segments;
      partial[s] = segment_sum(x + lo, hi - lo);
    }
  });
  double total = 0.0;
  for (size_t s = 0; s < segments; ++s) total += partial[s];
  return total;
}

}  // namespace spillway::compute::cpu
