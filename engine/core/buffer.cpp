#include "core/buffer.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace spillway {

Result<AlignedBuffer> AlignedBuffer::allocate(size_t bytes, size_t alignment) {
  AlignedBuffer b;
  if (bytes == 0) return b;
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, rounded) != 0 || p == nullptr) {
    char size[32];
    std::snprintf(size, sizeof(size), "%.1f MiB", static_cast<double>(rounded) / (1 << 20));
    // The plan counted on the machine's available memory; a limit on this process (ulimit -v, a
    // container's) or other programs can still refuse it.
    return out_of_memory(
        std::string("the host refused ") + size +
        " of memory (other programs, or a limit on this process such as ulimit -v "
        "or a container's, left less than the plan counted on): free memory or raise "
        "the limit, or lower micro_batch_size or seq_len");
  }
  std::memset(p, 0, rounded);
  b.data_ = p;
  b.size_ = bytes;
  return b;
}

}  // namespace spillway
