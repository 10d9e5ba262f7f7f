// Reductions on float32 host tensors: the sum of squares behind the global gradient norm. The one
// CPU implementation: CpuBackend::do_sum_squares (Backend::sum_squares) runs it on a stream, and
// the optimizer's host gradient norm (train/adamw.h, sum_of_squares) calls it directly.
// Pure function over caller-owned memory; parallel with ThreadPool::global().
#pragma once

#include <cstddef>

namespace spillway::compute::cpu {

// Σ x[i]² for i < count, in double; 0 for count == 0. Each square is exact in double (a float's
// 24-bit significand squared fits in 53 bits), so only the additions round, in an order fixed by
// `count` alone: the same bits whatever the thread count or the CPU's vector width.
//   - x is cut into S = clamp(ceil(count / 2^16), 1, 256) segments, segment s covering
//     [count·s/S, count·(s+1)/S);
//   - within a segment, 8 running sums: element i goes to sum (i − segment start) mod 8, in order
//     of i (8 independent chains, not one: a single chain is bound by the add latency, about 4
//     cycles an element, where 8 keep up with DRAM); the segment's sum is
//     ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
//   - the segments' sums are added in order of s.
// The relative error is bounded by about (count / (8·S) + 8 + S) · 2^-53 (typically far less).
double sum_squares(const float* x, size_t count);

}  // namespace spillway::compute::cpu
