#include "core/buffer.h"

#include <cstring>
#include <string>

namespace spillway {

Result<AlignedBuffer> AlignedBuffer::allocate(size_t bytes, size_t alignment) {
  AlignedBuffer b;
  if (bytes == 0) return b;
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, rounded) != 0 || p == nullptr) {
    return out_of_memory("cannot allocate " + std::to_string(rounded) +
                         " bytes of host memory; lower the batch size or free memory");
  }
  std::memset(p, 0, rounded);
  b.data_ = p;
  b.size_ = bytes;
  return b;
}

}  // namespace spillway
