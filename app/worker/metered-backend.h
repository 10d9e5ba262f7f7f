// MeteredBackend: a compute Backend that forwards every call to another and counts the memory
// that goes through it: device bytes allocated and host bytes page-locked (host_alloc_pinned and
// host_register), now and at their peak. The benchmark wraps the backend it measures in one, so
// that peak HBM and pinned DRAM are exact whatever the engine allocates, without the engine
// keeping those figures itself.
//
// Streams and events it creates belong to the wrapped backend (their handles call it back).
// Thread-safety: as Backend; the counters may be read from any thread. Ownership: wraps, does not
// own; the wrapped backend must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "compute/backend.h"

namespace spillway::worker {

class MeteredBackend final : public compute::Backend {
 public:
  explicit MeteredBackend(compute::Backend& inner) : in_(inner) {}

  uint64_t device_bytes() const { return device_.now; }
  uint64_t peak_device_bytes() const { return device_.peak; }
  uint64_t pinned_bytes() const { return pinned_.now; }
  uint64_t peak_pinned_bytes() const { return pinned_.peak; }
  // Starts new peaks from what is held now (between measurements).
  void reset_peaks() {
    device_.reset_peak();
    pinned_.reset_peak();
  }

  compute::BackendKind kind() const override { return in_.kind(); }
  compute::DeviceInfo device_info() const override { return in_.device_info(); }

  Result<void*> device_alloc(size_t bytes) override;
  void device_free(void* ptr) override;
  Result<void*> host_alloc_pinned(size_t bytes) override;
  void host_free_pinned(void* ptr) override;
  Status host_register(void* ptr, size_t bytes) override;
  void host_unregister(void* ptr) override;
  Status device_memory_info(size_t* free_bytes, size_t* total_bytes) override {
    return in_.device_memory_info(free_bytes, total_bytes);
  }

  Result<compute::Stream> create_stream() override { return in_.create_stream(); }
  Result<compute::Event> create_event(bool timing = false) override { return in_.create_event(timing); }
  Status record_event(compute::EventId e, compute::StreamId s) override { return in_.record_event(e, s); }
  Status stream_wait_event(compute::StreamId s, compute::EventId e) override { return in_.stream_wait_event(s, e); }
  Status synchronize_event(compute::EventId e) override { return in_.synchronize_event(e); }
  Status synchronize_stream(compute::StreamId s) override { return in_.synchronize_stream(s); }
  Result<double> elapsed_s(compute::EventId start, compute::EventId end) override { return in_.elapsed_s(start, end); }

  Status copy_h2d(void* dst, const void* src, size_t bytes, compute::StreamId s) override {
    return in_.copy_h2d(dst, src, bytes, s);
  }
  Status copy_d2h(void* dst, const void* src, size_t bytes, compute::StreamId s) override {
    return in_.copy_d2h(dst, src, bytes, s);
  }
  Status copy_d2d(void* dst, const void* src, size_t bytes, compute::StreamId s) override {
    return in_.copy_d2d(dst, src, bytes, s);
  }
  Status convert(void* dst, DType dt, const void* src, DType st, size_t count, compute::StreamId s) override {
    return in_.convert(dst, dt, src, st, count, s);
  }
  Status fill_zero(void* dst, size_t bytes, compute::StreamId s) override { return in_.fill_zero(dst, bytes, s); }

  Status set_workspace(void* ptr, size_t bytes, const compute::OpShapes& shapes) override {
    return in_.set_workspace(ptr, bytes, shapes);
  }

  Status embedding_forward(void* out, const int32_t* ids, const void* table, int n, int d, compute::StreamId s) override {
    return in_.embedding_forward(out, ids, table, n, d, s);
  }
  Status embedding_backward(float* dtable, const int32_t* ids, const void* dout, int n, int d,
                            compute::StreamId s) override {
    return in_.embedding_backward(dtable, ids, dout, n, d, s);
  }
  Status rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n, int d, float eps,
                         compute::StreamId s) override {
    return in_.rmsnorm_forward(out, rstd, x, w, n, d, eps, s);
  }
  Status residual_rmsnorm_forward(void* sum, void* out, float* rstd, const void* x, const void* r, const void* w, int n,
                                  int d, float eps, compute::StreamId s) override {
    return in_.residual_rmsnorm_forward(sum, out, rstd, x, r, w, n, d, eps, s);
  }
  Status rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x, const void* w, const float* rstd, int n,
                          int d, bool accumulate_dx, compute::StreamId s) override {
    return in_.rmsnorm_backward(dx, dw, dout, x, w, rstd, n, d, accumulate_dx, s);
  }
  Status linear_forward(void* y, const void* x, const void* w, const void* b, int n, int in, int out,
                        compute::StreamId s) override {
    return in_.linear_forward(y, x, w, b, n, in, out, s);
  }
  Status linear_backward(void* dx, float* dw, float* db, const void* dy, const void* x, const void* w, int n, int in,
                         int out, bool accumulate_dx, compute::StreamId s) override {
    return in_.linear_backward(dx, dw, db, dy, x, w, n, in, out, accumulate_dx, s);
  }
  Status rope_forward(void* x, int batch, int seq, int heads, int head_dim, float theta,
                      const compute::RopeScaling& scaling, compute::StreamId s) override {
    return in_.rope_forward(x, batch, seq, heads, head_dim, theta, scaling, s);
  }
  Status rope_backward(void* dx, int batch, int seq, int heads, int head_dim, float theta,
                       const compute::RopeScaling& scaling, compute::StreamId s) override {
    return in_.rope_backward(dx, batch, seq, heads, head_dim, theta, scaling, s);
  }
  Status attention_forward(void* out, float* lse, const void* q, const void* k, const void* v, int batch, int seq,
                           int hq, int hkv, int head_dim, compute::StreamId s) override {
    return in_.attention_forward(out, lse, q, k, v, batch, seq, hq, hkv, head_dim, s);
  }
  Status attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k, const void* v,
                            const void* out, const float* lse, int batch, int seq, int hq, int hkv, int head_dim,
                            compute::StreamId s) override {
    return in_.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, batch, seq, hq, hkv, head_dim, s);
  }
  Status attention_key_bias_backward(float* db, const void* dout, const void* q, const void* k, const void* v, int batch,
                                     int seq, int hq, int hkv, int head_dim, float theta,
                                     const compute::RopeScaling& scaling, compute::StreamId s) override {
    return in_.attention_key_bias_backward(db, dout, q, k, v, batch, seq, hq, hkv, head_dim, theta, scaling, s);
  }
  Status swiglu_forward(void* out, const void* gate, const void* up, int n, int f, compute::StreamId s) override {
    return in_.swiglu_forward(out, gate, up, n, f, s);
  }
  Status swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate, const void* up, int n, int f,
                         compute::StreamId s) override {
    return in_.swiglu_backward(dgate, dup, dout, gate, up, n, f, s);
  }
  Status add_inplace(void* y, const void* x, size_t count, compute::StreamId s) override {
    return in_.add_inplace(y, x, count, s);
  }
  Status sum_squares(double* out, const float* x, size_t count, compute::StreamId s) override {
    return in_.sum_squares(out, x, count, s);
  }
  Status lm_head_loss(float* losses, void* dx, float* dw, const void* x, const void* w, const int32_t* labels, int n,
                      int d, int v, float loss_scale, float* logits_out, int chunk, compute::StreamId s) override {
    return in_.lm_head_loss(losses, dx, dw, x, w, labels, n, d, v, loss_scale, logits_out, chunk, s);
  }

 protected:
  // Never called: the handles of create_stream/create_event are bound to the wrapped backend.
  void destroy_stream(compute::StreamId) override {}
  void destroy_event(compute::EventId) override {}

 private:
  // Bytes held through one kind of call, by pointer, with the running and peak totals.
  struct Meter {
    std::mutex mu;
    std::unordered_map<void*, size_t> held;
    std::atomic<uint64_t> now{0}, peak{0};
    void add(void* ptr, size_t bytes);
    void remove(void* ptr);
    void reset_peak();
  };
  compute::Backend& in_;
  Meter device_, pinned_;
};

}  // namespace spillway::worker
