// CpuBackend: memory accounting, stream/event validation and dispatch to the op files.
#include "compute/cpu/cpu-backend.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "compute/cpu/attention-key-bias.h"
#include "compute/cpu/attention.h"
#include "compute/cpu/cross-entropy.h"
#include "compute/cpu/elementwise.h"
#include "compute/cpu/embedding.h"
#include "compute/cpu/linear.h"
#include "compute/cpu/rmsnorm.h"
#include "compute/cpu/swiglu.h"
#include "core/log.h"
#include "core/thread-pool.h"

namespace spillway::compute {

namespace {

constexpr size_t kDeviceAlignment = 256;

size_t round_up(size_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

std::string mib(size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

float* F(void* p) { return static_cast<float*>(p); }
const float* F(const void* p) { return static_cast<const float*>(p); }

Status check_copy(const char* what, const void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && (dst == nullptr || src == nullptr)) {
    return invalid_argument(std::string(what) + ": null pointer for " + std::to_string(bytes) +
                            " bytes");
  }
  return Status::ok_status();
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options) : options_(options) {
  device_total_ = options_.device_capacity_bytes ? options_.device_capacity_bytes
                                                 : physical_memory_bytes();
  const int threads = options_.blas_threads > 0
                          ? options_.blas_threads
                          : static_cast<int>(ThreadPool::global().size());
  openblas_set_num_threads(threads);
}

CpuBackend::~CpuBackend() {
  for (auto& [ptr, alloc] : device_allocs_) std::free(const_cast<char*>(ptr));
  for (void* p : pinned_allocs_) std::free(p);
}

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

std::unique_ptr<Backend> make_cpu_backend(size_t device_capacity_bytes) {
  CpuBackendOptions options;
  options.device_capacity_bytes = device_capacity_bytes;
  return make_cpu_backend(options);
}

// --- memory -------------------------------------------------------------------------------------

Result<void*> CpuBackend::device_alloc(size_t bytes) {
  const size_t rounded = round_up(std::max<size_t>(bytes, 1));
  const size_t free_bytes = device_total_ > device_used_ ? device_total_ - device_used_ : 0;
  if (options_.device_capacity_bytes != 0 && rounded > free_bytes) {
    return out_of_memory("cpu device_alloc: requested " + std::to_string(rounded) + " bytes (" +
                         mib(rounded) + "), " + std::to_string(free_bytes) + " bytes (" +
                         mib(free_bytes) + ") free of " + std::to_string(device_total_) +
                         " bytes (" + mib(device_total_) + ") capacity");
  }
  void* p = std::aligned_alloc(kDeviceAlignment, rounded);
  if (p == nullptr) {
    return out_of_memory("cpu device_alloc: host refused " + std::to_string(rounded) +
                         " bytes (" + mib(rounded) + ")");
  }
  if (options_.poison_allocations) {
    float* f = static_cast<float*>(p);
    std::fill(f, f + rounded / sizeof(float), std::numeric_limits<float>::quiet_NaN());
  }
  device_allocs_.emplace(static_cast<const char*>(p), DeviceAlloc{bytes, rounded});
  device_used_ += rounded;
  device_peak_ = std::max(device_peak_, device_used_);
  return p;
}

void CpuBackend::device_free(void* ptr) {
  if (ptr == nullptr) return;
  auto it = device_allocs_.find(static_cast<const char*>(ptr));
  if (it == device_allocs_.end()) {
    log_error("cpu device_free: pointer was not returned by device_alloc (ignored)");
    return;
  }
  device_used_ -= it->second.rounded;
  device_allocs_.erase(it);
  std::free(ptr);
}

size_t CpuBackend::device_bytes_after(const void* ptr) const {
  const char* c = static_cast<const char*>(ptr);
  auto it = device_allocs_.upper_bound(c);
  if (it == device_allocs_.begin()) return 0;
  --it;
  const char* end = it->first + it->second.bytes;
  return c < end ? static_cast<size_t>(end - c) : 0;
}

Result<void*> CpuBackend::host_alloc_pinned(size_t bytes) {
  const size_t rounded = round_up(std::max<size_t>(bytes, 1));
  void* p = std::aligned_alloc(kDeviceAlignment, rounded);
  if (p == nullptr) {
    return out_of_memory("cpu host_alloc_pinned: host refused " + std::to_string(rounded) +
                         " bytes (" + mib(rounded) + ")");
  }
  pinned_allocs_.insert(p);
  return p;
}

void CpuBackend::host_free_pinned(void* ptr) {
  if (ptr == nullptr) return;
  if (pinned_allocs_.erase(ptr) == 0) {
    log_error("cpu host_free_pinned: pointer was not returned by host_alloc_pinned (ignored)");
    return;
  }
  std::free(ptr);
}

Status CpuBackend::device_memory_info(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes) *free_bytes = device_total_ > device_used_ ? device_total_ - device_used_ : 0;
  if (total_bytes) *total_bytes = device_total_;
  return Status::ok_status();
}

Result<float*> CpuBackend::scratch(size_t floats) {
  if (scratch_.size() < floats * sizeof(float)) {
    scratch_ = AlignedBuffer();  // release first: the old and new buffers need not coexist
    SPW_ASSIGN_OR_RETURN(scratch_, AlignedBuffer::allocate(floats * sizeof(float), 64));
  }
  return scratch_.as<float>();
}

// --- streams, events, copies ---------------------------------------------------------------------

Status CpuBackend::check_stream(StreamId stream, const char* what) const {
  if (stream < 0 || stream >= streams_) {
    return invalid_argument(std::string(what) + ": unknown stream " + std::to_string(stream));
  }
  return Status::ok_status();
}

Status CpuBackend::check_event(EventId event, const char* what) const {
  if (event < 0 || static_cast<size_t>(event) >= event_recorded_.size()) {
    return invalid_argument(std::string(what) + ": unknown event " + std::to_string(event));
  }
  return Status::ok_status();
}

Result<StreamId> CpuBackend::create_stream() { return streams_++; }

Result<EventId> CpuBackend::create_event() {
  event_recorded_.push_back(false);
  return static_cast<EventId>(event_recorded_.size() - 1);
}

Status CpuBackend::record_event(EventId event, StreamId stream) {
  SPW_RETURN_IF_ERROR(check_event(event, "record_event"));
  SPW_RETURN_IF_ERROR(check_stream(stream, "record_event"));
  event_recorded_[event] = true;  // all earlier work on every stream has already run
  return Status::ok_status();
}

Status CpuBackend::stream_wait_event(StreamId stream, EventId event) {
  SPW_RETURN_IF_ERROR(check_stream(stream, "stream_wait_event"));
  return check_event(event, "stream_wait_event");
}

Status CpuBackend::synchronize_event(EventId event) {
  return check_event(event, "synchronize_event");
}

Status CpuBackend::synchronize_stream(StreamId stream) {
  return check_stream(stream, "synchronize_stream");
}

Status CpuBackend::copy_h2d(void* dst_device, const void* src_host, size_t bytes,
                            StreamId stream) {
  SPW_RETURN_IF_ERROR(check_stream(stream, "copy_h2d"));
  SPW_RETURN_IF_ERROR(check_copy("copy_h2d", dst_device, src_host, bytes));
  if (bytes) std::memcpy(dst_device, src_host, bytes);
  return Status::ok_status();
}

Status CpuBackend::copy_d2h(void* dst_host, const void* src_device, size_t bytes,
                            StreamId stream) {
  SPW_RETURN_IF_ERROR(check_stream(stream, "copy_d2h"));
  SPW_RETURN_IF_ERROR(check_copy("copy_d2h", dst_host, src_device, bytes));
  if (bytes) std::memcpy(dst_host, src_device, bytes);
  return Status::ok_status();
}

Status CpuBackend::copy_d2d(void* dst, const void* src, size_t bytes, StreamId stream) {
  SPW_RETURN_IF_ERROR(check_stream(stream, "copy_d2d"));
  SPW_RETURN_IF_ERROR(check_copy("copy_d2d", dst, src, bytes));
  if (bytes && dst != src) std::memmove(dst, src, bytes);
  return Status::ok_status();
}

Status CpuBackend::upload_f32(void* dst_device, const float* src_host, size_t count,
                              StreamId stream) {
  return copy_h2d(dst_device, src_host, count * sizeof(float), stream);
}

Status CpuBackend::download_f32(float* dst_host, const void* src_device, size_t count,
                                StreamId stream) {
  return copy_d2h(dst_host, src_device, count * sizeof(float), stream);
}

Status CpuBackend::fill_zero(void* dst_device, size_t bytes, StreamId stream) {
  SPW_RETURN_IF_ERROR(check_stream(stream, "fill_zero"));
  if (bytes && dst_device == nullptr) return invalid_argument("fill_zero: null pointer");
  if (bytes) std::memset(dst_device, 0, bytes);
  return Status::ok_status();
}

// --- ops ----------------------------------------------------------------------------------------

Status CpuBackend::embedding_forward(void* out, const int32_t* ids, const void* table, int n,
                                     int d) {
  size_t rows = cpu::kUnknownRows;
  if (d > 0) {
    if (size_t after = device_bytes_after(table)) rows = after / (sizeof(float) * d);
  }
  return cpu::embedding_forward(F(out), ids, F(table), n, d, rows);
}

Status CpuBackend::embedding_backward(float* dtable, const int32_t* ids, const void* dout, int n,
                                      int d) {
  size_t rows = cpu::kUnknownRows;
  if (d > 0) {
    if (size_t after = device_bytes_after(dtable)) rows = after / (sizeof(float) * d);
  }
  return cpu::embedding_backward(dtable, ids, F(dout), n, d, rows);
}

Status CpuBackend::rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n,
                                   int d, float eps) {
  return cpu::rmsnorm_forward(F(out), rstd, F(x), F(w), n, d, eps);
}

Status CpuBackend::rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x,
                                    const void* w, const float* rstd, int n, int d,
                                    bool accumulate_dx) {
  return cpu::rmsnorm_backward(F(dx), dw, F(dout), F(x), F(w), rstd, n, d, accumulate_dx);
}

Status CpuBackend::linear_forward(void* y, const void* x, const void* w, const void* b, int n,
                                  int in, int out) {
  return cpu::linear_forward(F(y), F(x), F(w), F(b), n, in, out);
}

Status CpuBackend::linear_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                                   const void* w, int n, int in, int out, bool accumulate_dx) {
  return cpu::linear_backward(F(dx), dw, db, F(dy), F(x), F(w), n, in, out, accumulate_dx);
}

Result<const cpu::RopeTable*> CpuBackend::rope_table(int seq, int head_dim, float theta,
                                                      const RopeScaling& scaling) {
  for (const auto& t : rope_tables_) {
    if (t->matches(seq, head_dim, theta, scaling)) return t.get();
  }
  // A few shapes at most are live (one per model); keep the newest handful.
  constexpr size_t kMaxTables = 8;
  if (rope_tables_.size() >= kMaxTables) rope_tables_.erase(rope_tables_.begin());
  SPW_ASSIGN_OR_RETURN(cpu::RopeTable table, cpu::make_rope_table(seq, head_dim, theta, scaling));
  rope_tables_.push_back(std::make_unique<cpu::RopeTable>(std::move(table)));
  return rope_tables_.back().get();
}

Status CpuBackend::rope_forward(void* x, int batch, int seq, int heads, int head_dim, float theta,
                                const RopeScaling& scaling) {
  if (batch < 0 || seq < 0 || heads < 0) return invalid_argument("rope_forward: negative shape");
  SPW_ASSIGN_OR_RETURN(const cpu::RopeTable* table, rope_table(seq, head_dim, theta, scaling));
  return cpu::rope_apply(F(x), batch, seq, heads, *table, /*inverse=*/false);
}

Status CpuBackend::rope_backward(void* dx, int batch, int seq, int heads, int head_dim,
                                 float theta, const RopeScaling& scaling) {
  if (batch < 0 || seq < 0 || heads < 0) return invalid_argument("rope_backward: negative shape");
  SPW_ASSIGN_OR_RETURN(const cpu::RopeTable* table, rope_table(seq, head_dim, theta, scaling));
  return cpu::rope_apply(F(dx), batch, seq, heads, *table, /*inverse=*/true);
}

Status CpuBackend::attention_forward(void* out, float* lse, const void* q, const void* k,
                                     const void* v, int batch, int seq, int hq, int hkv,
                                     int head_dim) {
  return cpu::attention_forward(F(out), lse, F(q), F(k), F(v), batch, seq, hq, hkv, head_dim);
}

Status CpuBackend::attention_backward(void* dq, void* dk, void* dv, const void* dout,
                                      const void* q, const void* k, const void* v,
                                      const void* out, const float* lse, int batch, int seq,
                                      int hq, int hkv, int head_dim) {
  return cpu::attention_backward(F(dq), F(dk), F(dv), F(dout), F(q), F(k), F(v), F(out), lse,
                                 batch, seq, hq, hkv, head_dim);
}

Status CpuBackend::attention_key_bias_backward(float* db, const void* dout, const void* q, const void* k,
                                               const void* v, int batch, int seq, int hq, int hkv,
                                               int head_dim, float theta, const RopeScaling& scaling) {
  if (batch < 0 || seq < 0) return invalid_argument("attention_key_bias_backward: negative shape");
  SPW_ASSIGN_OR_RETURN(const cpu::RopeTable* table, rope_table(seq, head_dim, theta, scaling));
  return cpu::attention_key_bias_backward(db, F(dout), F(q), F(k), F(v), batch, seq, hq, hkv, head_dim, *table);
}

Status CpuBackend::swiglu_forward(void* out, const void* gate, const void* up, int n, int f) {
  return cpu::swiglu_forward(F(out), F(gate), F(up), n, f);
}

Status CpuBackend::swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                   const void* up, int n, int f) {
  return cpu::swiglu_backward(F(dgate), F(dup), F(dout), F(gate), F(up), n, f);
}

Status CpuBackend::add_inplace(void* y, const void* x, size_t count) {
  return cpu::add_inplace(F(y), F(x), count);
}

Status CpuBackend::lm_head_loss(double* loss_sum, void* dx, float* dw, const void* x,
                                const void* w, const int32_t* labels, int n, int d, int v,
                                float loss_scale, float* logits_out, int chunk) {
  SPW_ASSIGN_OR_RETURN(float* buf, scratch(cpu::lm_head_scratch_floats(n, v, chunk)));
  return cpu::lm_head_loss(loss_sum, F(dx), dw, F(x), F(w), labels, n, d, v, loss_scale,
                           logits_out, chunk, buf);
}

}  // namespace spillway::compute
