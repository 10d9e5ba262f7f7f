// Embedding forward (row gather) and backward (row scatter-add).
#include "compute/cpu/embedding.h"

#include <cstring>
#include <string>

#include "core/thread-pool.h"

namespace spillway::compute::cpu {

Status check_embedding_shape(const char* what, int n, int d) {
  if (n < 0 || d <= 0) {
    return invalid_argument(std::string(what) + ": bad shape n=" + std::to_string(n) +
                            " d=" + std::to_string(d));
  }
  return Status::ok_status();
}

static Status check_ids(const char* what, const int32_t* ids, int n, int d, size_t rows) {
  SPW_RETURN_IF_ERROR(check_embedding_shape(what, n, d));
  for (int i = 0; i < n; ++i) {
    if (ids[i] < 0 || static_cast<size_t>(ids[i]) >= rows) {
      return invalid_argument(
          std::string(what) + ": token id " + std::to_string(ids[i]) + " at position " +
          std::to_string(i) + " is outside the vocabulary" +
          (rows == kUnknownRows ? std::string() : " [0, " + std::to_string(rows) + ")"));
    }
  }
  return Status::ok_status();
}

Status embedding_forward(float* out, const int32_t* ids, const float* table, int n, int d,
                         size_t rows, float scale) {
  SPW_RETURN_IF_ERROR(check_ids("embedding_forward", ids, n, d, rows));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(n),
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) {
          const float* src = table + static_cast<size_t>(ids[i]) * d;
          float* dst = out + i * d;
          if (scale == 1.0f) {
            std::memcpy(dst, src, sizeof(float) * d);
          } else {
            for (int j = 0; j < d; ++j) dst[j] = src[j] * scale;
          }
        }
      },
      16);
  return Status::ok_status();
}

Status embedding_backward(float* dtable, const int32_t* ids, const float* dout, int n, int d,
                          size_t rows, float scale) {
  SPW_RETURN_IF_ERROR(check_ids("embedding_backward", ids, n, d, rows));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(d),
      [&](size_t j0, size_t j1) {
        for (int i = 0; i < n; ++i) {
          float* dst = dtable + static_cast<size_t>(ids[i]) * d;
          const float* src = dout + static_cast<size_t>(i) * d;
          if (scale == 1.0f) {
            for (size_t j = j0; j < j1; ++j) dst[j] += src[j];
          } else {
            for (size_t j = j0; j < j1; ++j) dst[j] += src[j] * scale;
          }
        }
      },
      64);
  return Status::ok_status();
}

}  // namespace spillway::compute::cpu
