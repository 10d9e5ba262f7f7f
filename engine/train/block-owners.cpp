#include "train/block-owners.h"

#include <algorithm>

namespace spillway {

std::vector<BlockOwner> assign_block_owners(const ParameterLayout& layout, int processes,
                                            int gpus) {
  std::vector<uint64_t> held(std::max(processes, 1), 0);
  std::vector<int> given(held.size(), 0);  // blocks given to each process so far
  std::vector<BlockOwner> owners;
  for (const BlockLayout& block : layout.blocks()) {
    const int p = static_cast<int>(std::min_element(held.begin(), held.end()) - held.begin());
    held[p] += block.numel;
    owners.push_back({p, given[p]++ % std::max(gpus, 1)});
  }
  return owners;
}

std::vector<bool> held_blocks(const std::vector<BlockOwner>& owners, int process) {
  std::vector<bool> held;
  for (const BlockOwner& o : owners) held.push_back(o.process == process);
  return held;
}

}  // namespace spillway
