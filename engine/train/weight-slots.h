// WeightSlots: the K device slots through which the blocks' weights stream (docs/architecture.md,
// "The step", 1).
//
// A slot holds one block's compute copy, [block numel] of the backend's act_dtype, uploaded on the
// H2D stream from the block's fp32 master weights in host memory. When act_dtype is not fp32 (bf16
// on CUDA) the master crosses the link as fp32 into a staging chunk on the device and convert()
// turns each chunk into act_dtype in the slot. The conversion runs on the H2D stream too: stream
// order then makes copy → convert → next copy into the same chunk safe without events, and the
// compute stream never waits for it; at HBM speed it takes about 1/40 of the chunk's PCIe copy,
// the price of one staging chunk instead of an fp32 twin of every slot. With act_dtype fp32 (the
// CPU backend) the master is copied straight into the slot.
//
// Ordering, only by events: compute waits for a slot's `ready` (recorded on the H2D stream after
// its upload) before reading it, and the H2D stream waits for its `free` (recorded on the compute
// stream at release) before overwriting it. A slot acquired for compute is pinned until released;
// otherwise slots are reused least recently used. Before uploading a block for a forward pass the
// weight gate runs on the host (the optimizer finishing that block's update): the only host wait.
//
// Not thread-safe: the engine's thread drives it. Ownership: borrows the backend, the arena (its
// slots), the state (the master weights, which must not change while an upload of them is in
// flight: the gate and the engine's end-of-step synchronisation see to it), the recorder and the
// traffic counters, which must all outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "compute/backend.h"
#include "compute/communicator.h"
#include "tiers/device-arena.h"
#include "train/block-owners.h"
#include "train/model-state.h"
#include "train/step-timeline.h"

namespace spillway {

class HbmState;

class WeightSlots {
 public:
  // Device bytes of `slots` slots for `layout` and the staging chunk when `act` is not fp32, as
  // create() reserves them (each 256-aligned): the first is the slots, the second the staging.
  static uint64_t slot_bytes(const ParameterLayout& layout, int slots, DType act);
  static uint64_t staging_bytes(const ParameterLayout& layout, DType act);

  // Reserves the slots (Category::kWeights) and the staging chunk in `arena`. `h2d` and `compute`
  // are the streams that upload and read the slots.
  static Result<std::unique_ptr<WeightSlots>> create(compute::Device& backend, DeviceArena& arena,
                                                     const ModelState& state, int slots,
                                                     compute::StreamId h2d,
                                                     compute::StreamId compute,
                                                     SpanRecorder& timeline, LinkTraffic& traffic);

  // Block b resident and pinned, the compute stream ordered after its upload: its weights,
  // [block numel] of act_dtype in the block's layout. `forward`: run the gate before uploading.
  Result<const char*> acquire(size_t b, bool forward);
  // The compute stream's work enqueued so far is the last to read block b's slot.
  Status release(size_t b);
  // Starts uploading block b into a free slot (nothing when it is resident, b is past the last
  // block, or every slot is pinned).
  Status prefetch(size_t b, bool forward);
  // Every slot stale and unpinned, between steps: the next acquire of each block uploads it again
  // (the host weights may have changed), and a step that failed half-way leaves no slot pinned.
  void invalidate();
  // Called with block b before it is uploaded for a forward pass; may block. Null: no wait.
  void set_gate(std::function<void(size_t block)> gate) { gate_ = std::move(gate); }
  // The HBM state tier (hbm-state.h): its blocks' slots are filled from their device master
  // (converted on the H2D stream after the tier's last update), nothing crossing the link, and
  // without the gate: their update is on the device, ordered by its event. Null: none.
  void set_device_state(const HbmState* state) { device_state_ = state; }
  // Past one machine with the host state sharded by block (block-owners.h): only the GPU that
  // carries block b (owners[b], ranks of `gpus` GPUs per machine) uploads it; the group then
  // broadcasts it from there to every GPU on the `collective` stream, the one stream of this
  // device's collectives (so that every process issues them in one order), and `ready` is recorded
  // there. The gate is skipped for a block this machine does not hold: its owner's broadcast
  // waits for its update. `comm` and `owners` must outlive the slots.
  void set_sharing(compute::Communicator* comm, const std::vector<BlockOwner>* owners, int gpus,
                   compute::StreamId collective);

 private:
  struct Slot {
    char* ptr = nullptr;  // [max block numel] act_dtype
    long block = -1;
    uint64_t version = 0;
    uint64_t last_use = 0;
    bool pinned = false;
    compute::Event ready, free;
  };
  WeightSlots(compute::Device& backend, const ModelState& state, compute::StreamId h2d,
              compute::StreamId compute, SpanRecorder& timeline, LinkTraffic& traffic);
  int find(size_t b) const;
  // Block b resident (uploading it when needed): its slot, or -1 when every slot is pinned and
  // `may_fail`.
  Result<int> ensure(size_t b, bool forward, bool may_fail);
  Status upload(Slot& slot, size_t b);
  Status upload_here(Slot& slot, size_t b);  // from this machine's master

  compute::Device& be_;
  const ModelState& state_;
  const DType act_;
  const compute::StreamId h2d_, compute_;
  SpanRecorder& timeline_;
  LinkTraffic& traffic_;
  std::function<void(size_t)> gate_;
  const HbmState* device_state_ = nullptr;
  compute::Communicator* comm_ = nullptr;  // set_sharing; null: every block uploads here
  const std::vector<BlockOwner>* owners_ = nullptr;
  int gpus_ = 1;
  compute::StreamId collective_{};
  std::vector<Slot> slots_;
  float* staging_ = nullptr;  // [staging_numel_] fp32; null when act_dtype is fp32
  size_t staging_numel_ = 0;
  uint64_t version_ = 1, tick_ = 0;
};

}  // namespace spillway
