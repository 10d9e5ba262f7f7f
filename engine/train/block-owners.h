// Past one machine, the host state sharded by block (docs/architecture.md, "Past one machine"):
// each block's fp32 master weights, gradient and AdamW moments live on one machine, its owner,
// and one of the owner's GPUs carries the block over its host link — uploads its weights, which
// the group then broadcasts to every GPU, and brings down its gradient, which the group sums
// into that GPU alone. Each machine then holds about 1/M of the state and updates 1/M of it.
#pragma once

#include <cstdint>
#include <vector>

#include "model/parameter-layout.h"

namespace spillway {

struct BlockOwner {
  int process = 0;  // the machine (worker process) that holds the block's state
  int gpu = 0;      // which of its GPUs (0 .. GPUs per machine − 1) carries the block
  // The group rank of that GPU (ranks are machine-major: process p's GPU i is p · gpus + i).
  int rank(int gpus) const { return process * gpus + gpu; }
  bool operator==(const BlockOwner&) const = default;
};

// Each block to the machine holding the fewest parameters so far (the lowest-numbered on a tie),
// in block order, so that machines hold within one block of 1/M of the parameters and
// neighbouring blocks fall on different machines (their optimizers then update the blocks the
// next forward needs first side by side); each machine's blocks go round its `gpus` GPUs in
// order. Deterministic: every process computes the same table. processes, gpus >= 1.
std::vector<BlockOwner> assign_block_owners(const ParameterLayout& layout, int processes, int gpus);

// Which blocks `process` holds, [block] (ModelState::create's `held`).
std::vector<bool> held_blocks(const std::vector<BlockOwner>& owners, int process);

}  // namespace spillway
