// ActivationStore: the activations a step keeps between layers (docs/architecture.md, "The step",
// 1): the input of every layer for every micro-batch (the checkpoints the backward recomputes from)
// and, per micro-batch, the gradient flowing down through the layers. Each buffer is [tokens,
// hidden] of the backend's act_dtype for one micro-batch.
//
// Placement, fixed at creation: everything on the device when it all fits in the arena (and no
// split is asked for); otherwise a few device staging buffers first, then the gradients (touched by
// every layer of the backward) and the checkpoints of the first layers on the device while they
// fit (at most `device_layers` layers' when asked: the planner's trade of checkpoints for the HBM
// state tier, planner.h), and the rest in pinned host memory. A host
// buffer is used through a staging buffer: open() for reading copies it host→device on the store's
// H2D stream, and close() after a write copies it device→host on its D2H stream. These are streams
// of their own, so that a checkpoint's copy never queues behind a whole block of weights on the
// weights' stream, and they are ordered only by events: compute waits for a load; a load waits for
// the staging buffer's previous user and for the buffer's last store to the host; a staging buffer
// is written again only after its store to the host finished. Staging buffers are used round robin,
// so the copy for the next micro-batch overlaps the compute of this one.
//
// Not thread-safe: the engine's thread drives it. Ownership: borrows the backend, the arena and
// the host pool (which hold its memory) and the traffic counters; all must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "compute/backend.h"
#include "tiers/device-arena.h"
#include "tiers/host-pool.h"
#include "train/step-timeline.h"

namespace spillway {

class ActivationStore {
 public:
  struct Streams {
    compute::StreamId compute = 0;  // where every op that reads or writes an activation runs
    compute::StreamId h2d = 0;      // loads of host buffers
    compute::StreamId d2h = 0;      // stores to host buffers
  };
  enum class Access { kRead, kWrite, kUpdate };  // kUpdate: read, then overwritten in place
  // A buffer opened for the compute stream.
  struct View {
    void* ptr = nullptr;  // [tokens, hidden] act_dtype on the device
    size_t buffer = 0;
    int stage = -1;  // the staging buffer, or -1 when the buffer lives on the device
    Access access = Access::kRead;
    size_t bytes = 0;
  };

  // Device bytes of the staging buffers for buffers of `buffer_bytes`: part of what the engine
  // needs at least (with every buffer on the host).
  static uint64_t staging_bytes(size_t buffer_bytes);

  // Places (layers + 1) · micro_batches checkpoints and micro_batches gradients of `buffer_bytes`
  // each, on the device only when `keep_on_device`, and then the checkpoints of at most the first
  // `device_layers` of the layers + 1 (-1: all of them). kOutOfMemory from the arena (no room for
  // the staging buffers) or the pool (pinned host memory).
  static Result<std::unique_ptr<ActivationStore>> create(compute::Device& backend,
                                                         DeviceArena& arena, HostPool& pool,
                                                         int layers, int micro_batches,
                                                         size_t buffer_bytes, bool keep_on_device,
                                                         int device_layers, Streams streams,
                                                         LinkTraffic& traffic);

  // The input of `layer` (layer == layers: of the head) for micro-batch m, and the gradient of m.
  size_t checkpoint(int layer, int m) const {
    return static_cast<size_t>(layer) * micro_batches_ + m;
  }
  size_t gradient(int m) const { return gradients_ + m; }

  // Buffer `buffer` for ops on the compute stream, of which the first `bytes` are used; for
  // kRead and kUpdate the compute stream is ordered after its load. Close it after enqueuing the
  // ops that use it. At most two views may be open at a time (the staging buffers go round robin).
  Result<View> open(size_t buffer, Access access, size_t bytes);
  // The compute stream's work enqueued so far is the last to use `view`; what it wrote goes to
  // the host.
  Status close(const View& view);

  uint64_t device_bytes() const { return device_bytes_; }  // buffers on the device (no staging)
  uint64_t host_bytes() const { return host_bytes_; }
  uint64_t staging_bytes() const { return stages_.size() * buffer_bytes_; }

 private:
  struct Buffer {
    void* device = nullptr;  // [tokens, hidden] act_dtype, or null
    void* host = nullptr;    // pinned, when not on the device
    compute::Event stored;   // its last store to the host has finished (host buffers)
  };
  struct Stage {
    void* ptr = nullptr;     // [tokens, hidden] act_dtype
    compute::Event ready;    // a load into it has finished
    compute::Event written;  // compute has written it
    compute::Event free;     // its last user has finished with it
  };
  ActivationStore(compute::Device& backend, Streams streams, LinkTraffic& traffic)
      : be_(backend), streams_(streams), traffic_(traffic) {}

  compute::Device& be_;
  const Streams streams_;
  LinkTraffic& traffic_;
  int micro_batches_ = 0;
  size_t gradients_ = 0;  // index of the first gradient buffer
  size_t buffer_bytes_ = 0;
  std::vector<Buffer> buffers_;
  std::vector<Stage> stages_;
  size_t next_stage_ = 0;
  std::vector<HostRegion> host_regions_;
  uint64_t device_bytes_ = 0, host_bytes_ = 0;
};

}  // namespace spillway
