// Shape's helpers (tensor.h).
#include "compute/tensor.h"

namespace spillway::compute {

Shape::Shape(std::initializer_list<int64_t> d) {
  for (int64_t v : d) {
    if (rank == kMaxTensorRank) break;
    dims[rank++] = v;
  }
}

int64_t Shape::numel() const {
  if (rank == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace spillway::compute
