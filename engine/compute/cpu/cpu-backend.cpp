// CpuBackend: memory accounting, argument checks, workspace carving and dispatch of each op to
// its stream (cpu/cpu-streams.h) and its op file.
#include "compute/cpu/cpu-backend.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "compute/cpu/adamw.h"
#include "compute/cpu/attention-key-bias.h"
#include "compute/cpu/attention.h"
#include "compute/cpu/cpu-communicator.h"
#include "compute/cpu/cross-entropy.h"
#include "compute/cpu/elementwise.h"
#include "compute/cpu/embedding.h"
#include "compute/cpu/geglu.h"
#include "compute/cpu/linear.h"
#include "compute/cpu/reduce.h"
#include "compute/cpu/rmsnorm.h"
#include "compute/cpu/swiglu.h"
#include "core/fail-point.h"
#include "core/log.h"
#include "core/thread-pool.h"

namespace spillway::compute {

namespace {

size_t round_up(size_t bytes) {
  return align_to_device(bytes);
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

float* F(void* p) {
  return static_cast<float*>(p);
}
const float* F(const void* p) {
  return static_cast<const float*>(p);
}

// Bytes of `count` fp32 or int32 elements.
size_t f32(size_t count) {
  return count * sizeof(float);
}
size_t i32(size_t count) {
  return count * sizeof(int32_t);
}
size_t f32(int a, int b) {
  return f32(static_cast<size_t>(a) * static_cast<size_t>(b));
}

std::string dims(std::initializer_list<std::pair<const char*, long>> named) {
  std::string s;
  for (const auto& [name, value] : named) {
    if (!s.empty()) s += ", ";
    s += std::string(name) + " " + std::to_string(value);
  }
  return s;
}

Status check_rope_shape(const char* what, int batch, int seq, int heads) {
  if (batch < 0 || seq < 0 || heads < 0) {
    return invalid_argument(std::string(what) + ": negative shape " +
                            dims({{"batch", batch}, {"seq", seq}, {"heads", heads}}));
  }
  return Status::ok_status();
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : options_(options), streams_(options.strict_streams) {
  device_total_ =
      options_.device_capacity_bytes ? options_.device_capacity_bytes : physical_memory_bytes();
  const int threads = options_.blas_threads > 0 ? options_.blas_threads
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

DeviceInfo CpuBackend::device_info() const {
  DeviceInfo info;
  const size_t threads = ThreadPool::global().size();
  info.name = "CPU (" + std::to_string(threads) + " threads)";
  info.total_bytes = device_total_;
  info.multiprocessors = static_cast<int>(threads);
  return info;
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
    return out_of_memory("cpu device_alloc: host refused " + std::to_string(rounded) + " bytes (" +
                         mib(rounded) + ")");
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
  streams_.run_all();  // queued work may still use the memory
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
  void* p = fail_point("host.alloc") ? nullptr : std::aligned_alloc(kDeviceAlignment, rounded);
  if (p == nullptr) {
    return out_of_memory("could not allocate " + mib(rounded) +
                         " of host memory for the engine's buffers: free host memory, or lower "
                         "micro_batch_size or seq_len");
  }
  pinned_allocs_.insert(p);
  return p;
}

void CpuBackend::host_free_pinned(void* ptr) {
  if (ptr == nullptr) return;
  if (!pinned_allocs_.contains(ptr)) {
    log_error("cpu host_free_pinned: pointer was not returned by host_alloc_pinned (ignored)");
    return;
  }
  streams_.run_all();  // queued copies may still use the memory
  pinned_allocs_.erase(ptr);
  std::free(ptr);
}

Status CpuBackend::host_register(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return invalid_argument("host_register: needs a non-empty range, got " + std::to_string(bytes) +
                            " bytes at " + (ptr ? "a pointer" : "null"));
  }
  std::lock_guard lock(registered_mu_);
  if (!registered_.emplace(ptr, bytes).second) {
    return invalid_argument("host_register: this memory is already registered");
  }
  return Status::ok_status();
}

void CpuBackend::host_unregister(void* ptr) {
  std::lock_guard lock(registered_mu_);
  if (registered_.erase(ptr) == 0)
    log_error("cpu host_unregister: pointer was not registered (ignored)");
}

Status CpuBackend::device_memory_info(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes) *free_bytes = device_total_ > device_used_ ? device_total_ - device_used_ : 0;
  if (total_bytes) *total_bytes = device_total_;
  return Status::ok_status();
}

Status CpuBackend::check_tensors(const char* op, std::initializer_list<Tensor> tensors) const {
  for (const Tensor& t : tensors) {
    if (t.bytes == 0) continue;
    if (t.ptr == nullptr) {
      if (t.optional) continue;
      return invalid_argument(std::string(op) + ": " + t.name + " is null (needs " +
                              std::to_string(t.bytes) + " bytes)");
    }
    const size_t after = device_bytes_after(t.ptr);
    if (after != 0 && after < t.bytes) {
      return invalid_argument(std::string(op) + ": " + t.name + " needs " +
                              std::to_string(t.bytes) + " bytes but its device allocation ends " +
                              std::to_string(after) + " bytes after it");
    }
  }
  return Status::ok_status();
}

Status CpuBackend::check_glu(const char* op, StreamId stream, int n, int f,
                             std::initializer_list<std::pair<const char*, const void*>> tensors) {
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_swiglu_shape(op, n, f));
  for (const auto& [name, ptr] : tensors)
    SPW_RETURN_IF_ERROR(check_tensors(op, {{name, ptr, f32(n, f)}}));
  return Status::ok_status();
}

// --- groups of devices --------------------------------------------------------------------------

Result<std::vector<std::unique_ptr<Communicator>>> CpuBackend::create_communicators(
    std::span<Backend* const> group, ProcessExchange* processes) {
  std::vector<CpuBackend*> cpus;
  for (Backend* b : group) {
    auto* c = dynamic_cast<CpuBackend*>(b);
    if (!c) return unsupported("a group of CPU devices holds a " + b->name() + " backend");
    cpus.push_back(c);
  }
  return cpu::make_cpu_communicators(cpus, processes);
}

Status CpuBackend::submit_work(StreamId stream, std::function<Status()> work) {
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, "collective"));
  return streams_.submit(stream, std::move(work));
}

// --- streams, events ----------------------------------------------------------------------------

Result<Stream> CpuBackend::create_stream() {
  return Stream(this, streams_.create_stream());
}

Result<Event> CpuBackend::create_event(bool timing) {
  return Event(this, streams_.create_event(timing));
}

void CpuBackend::destroy_stream(StreamId stream) {
  if (Status st = streams_.destroy_stream(stream); !st.ok())
    log_error("cpu destroy_stream: " + st.to_string());
}

void CpuBackend::destroy_event(EventId event) {
  if (Status st = streams_.destroy_event(event); !st.ok())
    log_error("cpu destroy_event: " + st.to_string());
}

Status CpuBackend::record_event(EventId event, StreamId stream) {
  return streams_.record_event(event, stream);
}

Status CpuBackend::stream_wait_event(StreamId stream, EventId event) {
  return streams_.stream_wait_event(stream, event);
}

Status CpuBackend::synchronize_event(EventId event) {
  return streams_.synchronize_event(event);
}

Status CpuBackend::synchronize_stream(StreamId stream) {
  return streams_.synchronize_stream(stream);
}

Result<double> CpuBackend::elapsed_s(EventId start, EventId end) {
  return streams_.elapsed_s(start, end);
}

// --- copies and conversions ---------------------------------------------------------------------

Status CpuBackend::copy_h2d(void* dst_device, const void* src_host, size_t bytes, StreamId stream) {
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, "copy_h2d"));
  SPW_RETURN_IF_ERROR(
      check_tensors("copy_h2d", {{"dst", dst_device, bytes}, {"src", src_host, bytes}}));
  if (bytes == 0) return Status::ok_status();
  return streams_.submit(stream, [=] {
    std::memcpy(dst_device, src_host, bytes);
    return Status::ok_status();
  });
}

Status CpuBackend::copy_d2h(void* dst_host, const void* src_device, size_t bytes, StreamId stream) {
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, "copy_d2h"));
  SPW_RETURN_IF_ERROR(
      check_tensors("copy_d2h", {{"dst", dst_host, bytes}, {"src", src_device, bytes}}));
  if (bytes == 0) return Status::ok_status();
  return streams_.submit(stream, [=] {
    std::memcpy(dst_host, src_device, bytes);
    return Status::ok_status();
  });
}

Status CpuBackend::copy_d2d(void* dst, const void* src, size_t bytes, StreamId stream) {
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, "copy_d2d"));
  SPW_RETURN_IF_ERROR(check_tensors("copy_d2d", {{"dst", dst, bytes}, {"src", src, bytes}}));
  if (bytes == 0 || dst == src) return Status::ok_status();
  return streams_.submit(stream, [=] {
    std::memmove(dst, src, bytes);
    return Status::ok_status();
  });
}

Status CpuBackend::convert(void* dst, DType dst_type, const void* src, DType src_type, size_t count,
                           StreamId stream) {
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, "convert"));
  SPW_RETURN_IF_ERROR(cpu::check_convert(dst, dst_type, src, src_type, count));
  SPW_RETURN_IF_ERROR(check_tensors("convert", {{"dst", dst, count * dtype_size(dst_type)},
                                                {"src", src, count * dtype_size(src_type)}}));
  if (count == 0) return Status::ok_status();
  return streams_.submit(stream, [=] { return cpu::convert(dst, dst_type, src, src_type, count); });
}

Status CpuBackend::fill_zero(void* dst_device, size_t bytes, StreamId stream) {
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, "fill_zero"));
  SPW_RETURN_IF_ERROR(check_tensors("fill_zero", {{"dst", dst_device, bytes}}));
  if (bytes == 0) return Status::ok_status();
  return streams_.submit(stream, [=] {
    std::memset(dst_device, 0, bytes);
    return Status::ok_status();
  });
}

// --- workspace ----------------------------------------------------------------------------------

Status CpuBackend::set_workspace(void* ptr, size_t bytes, const OpShapes& shapes) {
  if (ptr == nullptr && bytes > 0) {
    return invalid_argument("set_workspace: null pointer for " + std::to_string(bytes) + " bytes");
  }
  if (reinterpret_cast<uintptr_t>(ptr) % kDeviceAlignment != 0) {
    return invalid_argument(
        "set_workspace: the workspace must be aligned to 256 bytes (as device_alloc returns)");
  }
  if (ptr != nullptr) {
    const size_t need = workspace_bytes(shapes);
    if (bytes < need) {
      return invalid_argument("set_workspace: " + std::to_string(bytes) +
                              " bytes given, workspace_bytes(shapes) is " + std::to_string(need));
    }
    SPW_RETURN_IF_ERROR(check_tensors("set_workspace", {{"workspace", ptr, bytes}}));
  }
  workspace_ = ptr;
  workspace_size_ = ptr ? bytes : 0;
  return Status::ok_status();
}

Result<void*> CpuBackend::workspace_for(const char* op, size_t bytes,
                                        const std::string& shape) const {
  if (bytes == 0) return static_cast<void*>(nullptr);
  if (workspace_ == nullptr) {
    return invalid_argument(
        std::string(op) + ": needs " + std::to_string(bytes) + " bytes of workspace for " + shape +
        ", and none is set (size it with workspace_bytes(OpShapes), hand it over with "
        "set_workspace)");
  }
  if (workspace_size_ < bytes) {
    return invalid_argument(std::string(op) + ": needs " + std::to_string(bytes) +
                            " bytes of workspace for " + shape + ", the one set has " +
                            std::to_string(workspace_size_) +
                            " (size it with workspace_bytes of OpShapes that cover this call)");
  }
  return workspace_;
}

// --- ops ----------------------------------------------------------------------------------------
// Each op checks its stream, shape, tensors and workspace now, then submits a closure that owns
// copies of its arguments (it may run later, in strict mode).

Status CpuBackend::do_embedding_forward(void* out, const int32_t* ids, const void* table, int n,
                                        int d, float scale, StreamId stream) {
  const char* op = "embedding_forward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_embedding_shape(op, n, d));
  SPW_RETURN_IF_ERROR(
      check_tensors(op, {{"out", out, f32(n, d)}, {"ids", ids, i32(n)}, {"table", table, f32(d)}}));
  // The table's device allocation bounds the ids (checked when the op runs: ids are device data).
  size_t rows = cpu::kUnknownRows;
  if (d > 0) {
    if (size_t after = device_bytes_after(table)) rows = after / f32(d);
  }
  return streams_.submit(
      stream, [=] { return cpu::embedding_forward(F(out), ids, F(table), n, d, rows, scale); });
}

Status CpuBackend::do_embedding_backward(float* dtable, const int32_t* ids, const void* dout, int n,
                                         int d, float scale, StreamId stream) {
  const char* op = "embedding_backward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_embedding_shape(op, n, d));
  SPW_RETURN_IF_ERROR(check_tensors(
      op, {{"dtable", dtable, f32(d)}, {"ids", ids, i32(n)}, {"dout", dout, f32(n, d)}}));
  size_t rows = cpu::kUnknownRows;
  if (d > 0) {
    if (size_t after = device_bytes_after(dtable)) rows = after / f32(d);
  }
  return streams_.submit(
      stream, [=] { return cpu::embedding_backward(dtable, ids, F(dout), n, d, rows, scale); });
}

Status CpuBackend::do_rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int n,
                                      int d, float eps, float weight_offset, StreamId stream) {
  const char* op = "rmsnorm_forward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_rmsnorm_shape(op, n, d, eps));
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"out", out, f32(n, d)},
                                         {"rstd", rstd, f32(n), true},
                                         {"x", x, f32(n, d)},
                                         {"w", w, f32(d)}}));
  return streams_.submit(stream, [=] {
    return cpu::rmsnorm_forward(F(out), rstd, F(x), F(w), n, d, eps, weight_offset);
  });
}

Status CpuBackend::do_residual_rmsnorm_forward(void* sum, void* out, float* rstd, const void* x,
                                               const void* r, const void* w, int n, int d,
                                               float eps, float weight_offset, StreamId stream) {
  const char* op = "residual_rmsnorm_forward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_rmsnorm_shape(op, n, d, eps));
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"sum", sum, f32(n, d)},
                                         {"out", out, f32(n, d)},
                                         {"rstd", rstd, f32(n), true},
                                         {"x", x, f32(n, d)},
                                         {"r", r, f32(n, d)},
                                         {"w", w, f32(d)}}));
  return streams_.submit(stream, [=] {
    return cpu::residual_rmsnorm_forward(F(sum), F(out), rstd, F(x), F(r), F(w), n, d, eps,
                                         weight_offset);
  });
}

Status CpuBackend::do_rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x,
                                       const void* w, const float* rstd, int n, int d,
                                       bool accumulate_dx, float weight_offset, StreamId stream) {
  const char* op = "rmsnorm_backward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_rmsnorm_shape(op, n, d, 0.0f));
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"dx", dx, f32(n, d), true},
                                         {"dw", dw, f32(d), true},
                                         {"dout", dout, f32(n, d)},
                                         {"x", x, f32(n, d)},
                                         {"w", w, f32(d)},
                                         {"rstd", rstd, f32(n)}}));
  return streams_.submit(stream, [=] {
    return cpu::rmsnorm_backward(F(dx), dw, F(dout), F(x), F(w), rstd, n, d, accumulate_dx,
                                 weight_offset);
  });
}

Status CpuBackend::do_linear_forward(void* y, const void* x, const void* w, const void* b, int n,
                                     int in, int out, StreamId stream) {
  const char* op = "linear_forward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_linear_shape(op, n, in, out));
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"y", y, f32(n, out)},
                                         {"x", x, f32(n, in)},
                                         {"w", w, f32(out, in)},
                                         {"b", b, f32(out), true}}));
  return streams_.submit(stream,
                         [=] { return cpu::linear_forward(F(y), F(x), F(w), F(b), n, in, out); });
}

Status CpuBackend::do_linear_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                                      const void* w, int n, int in, int out, bool accumulate_dx,
                                      StreamId stream) {
  const char* op = "linear_backward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_linear_shape(op, n, in, out));
  SPW_RETURN_IF_ERROR(
      check_tensors(op, {{"dx", dx, f32(n, in), true},
                         {"dw", dw, f32(out, in), true},
                         {"db", db, f32(out), true},
                         {"dy", dy, f32(n, out)},
                         {"x", x, f32(n, in), dw == nullptr},       // read for dw only
                         {"w", w, f32(out, in), dx == nullptr}}));  // read for dx only
  return streams_.submit(stream, [=] {
    return cpu::linear_backward(F(dx), dw, db, F(dy), F(x), F(w), n, in, out, accumulate_dx);
  });
}

Result<std::shared_ptr<const cpu::RopeTable>> CpuBackend::rope_table(int seq, int head_dim,
                                                                     float theta,
                                                                     const RopeScaling& scaling) {
  for (const auto& t : rope_tables_) {
    if (t->matches(seq, head_dim, theta, scaling)) return t;
  }
  // A few shapes at most are live (one per model); keep the newest handful.
  constexpr size_t kMaxTables = 8;
  if (rope_tables_.size() >= kMaxTables) rope_tables_.erase(rope_tables_.begin());
  SPW_ASSIGN_OR_RETURN(cpu::RopeTable table, cpu::make_rope_table(seq, head_dim, theta, scaling));
  rope_tables_.push_back(std::make_shared<const cpu::RopeTable>(std::move(table)));
  return rope_tables_.back();
}

Status CpuBackend::do_rope_forward(void* x, int batch, int seq, int heads, int head_dim,
                                   float theta, const RopeScaling& scaling,
                                   const int32_t* positions, StreamId stream) {
  const char* op = "rope_forward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(check_rope_shape(op, batch, seq, heads));
  SPW_ASSIGN_OR_RETURN(auto table, rope_table(seq, head_dim, theta, scaling));
  SPW_RETURN_IF_ERROR(
      check_tensors(op, {{"x", x, f32(static_cast<size_t>(batch) * seq * heads * head_dim)},
                         {"positions", positions, i32(static_cast<size_t>(batch) * seq), true}}));
  return streams_.submit(stream, [=] {
    return cpu::rope_apply(F(x), batch, seq, heads, *table, /*inverse=*/false, positions);
  });
}

Status CpuBackend::do_rope_backward(void* dx, int batch, int seq, int heads, int head_dim,
                                    float theta, const RopeScaling& scaling,
                                    const int32_t* positions, StreamId stream) {
  const char* op = "rope_backward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(check_rope_shape(op, batch, seq, heads));
  SPW_ASSIGN_OR_RETURN(auto table, rope_table(seq, head_dim, theta, scaling));
  SPW_RETURN_IF_ERROR(
      check_tensors(op, {{"dx", dx, f32(static_cast<size_t>(batch) * seq * heads * head_dim)},
                         {"positions", positions, i32(static_cast<size_t>(batch) * seq), true}}));
  return streams_.submit(stream, [=] {
    return cpu::rope_apply(F(dx), batch, seq, heads, *table, /*inverse=*/true, positions);
  });
}

Status CpuBackend::do_attention_forward(void* out, float* lse, const void* q, const void* k,
                                        const void* v, int batch, int seq, int hq, int hkv,
                                        int head_dim, float scale, int window,
                                        const int32_t* positions, PackedBounds /*packed*/,
                                        StreamId stream) {
  const char* op = "attention_forward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_attention_shape(op, batch, seq, hq, hkv, head_dim));
  const size_t tokens = static_cast<size_t>(batch) * seq;
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"out", out, f32(tokens * hq * head_dim)},
                                         {"lse", lse, f32(tokens * hq), true},
                                         {"q", q, f32(tokens * hq * head_dim)},
                                         {"k", k, f32(tokens * hkv * head_dim)},
                                         {"v", v, f32(tokens * hkv * head_dim)},
                                         {"positions", positions, i32(tokens), true}}));
  SPW_ASSIGN_OR_RETURN(
      void* ws,
      workspace_for(
          op, cpu::attention_forward_scratch_bytes(batch, seq, hq, hkv, head_dim),
          dims(
              {{"batch", batch}, {"seq", seq}, {"hq", hq}, {"hkv", hkv}, {"head_dim", head_dim}})));
  return streams_.submit(stream, [=] {
    return cpu::attention_forward(F(out), lse, F(q), F(k), F(v), batch, seq, hq, hkv, head_dim, ws,
                                  scale, window, positions);
  });
}

Status CpuBackend::do_attention_backward(void* dq, void* dk, void* dv, const void* dout,
                                         const void* q, const void* k, const void* v,
                                         const void* out, const float* lse, int batch, int seq,
                                         int hq, int hkv, int head_dim, float scale, int window,
                                         const int32_t* positions, PackedBounds /*packed*/,
                                         StreamId stream) {
  const char* op = "attention_backward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_attention_shape(op, batch, seq, hq, hkv, head_dim));
  const size_t tokens = static_cast<size_t>(batch) * seq;
  const size_t q_bytes = f32(tokens * hq * head_dim), kv_bytes = f32(tokens * hkv * head_dim);
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"dq", dq, q_bytes},
                                         {"dk", dk, kv_bytes},
                                         {"dv", dv, kv_bytes},
                                         {"dout", dout, q_bytes},
                                         {"q", q, q_bytes},
                                         {"k", k, kv_bytes},
                                         {"v", v, kv_bytes},
                                         {"out", out, q_bytes},
                                         {"lse", lse, f32(tokens * hq)},
                                         {"positions", positions, i32(tokens), true}}));
  SPW_ASSIGN_OR_RETURN(
      void* ws,
      workspace_for(
          op, cpu::attention_backward_scratch_bytes(batch, seq, hq, hkv, head_dim),
          dims(
              {{"batch", batch}, {"seq", seq}, {"hq", hq}, {"hkv", hkv}, {"head_dim", head_dim}})));
  return streams_.submit(stream, [=] {
    return cpu::attention_backward(F(dq), F(dk), F(dv), F(dout), F(q), F(k), F(v), F(out), lse,
                                   batch, seq, hq, hkv, head_dim, ws, scale, window, positions);
  });
}

Status CpuBackend::do_attention_key_bias_backward(float* db, const void* dout, const void* q,
                                                  const void* k, const void* v, int batch, int seq,
                                                  int hq, int hkv, int head_dim, float theta,
                                                  const RopeScaling& scaling,
                                                  const int32_t* positions, StreamId stream) {
  const char* op = "attention_key_bias_backward";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_attention_key_bias_shape(op, batch, seq, hq, hkv, head_dim));
  SPW_ASSIGN_OR_RETURN(auto table, rope_table(seq, head_dim, theta, scaling));
  const size_t tokens = static_cast<size_t>(batch) * seq;
  const size_t q_bytes = f32(tokens * hq * head_dim), kv_bytes = f32(tokens * hkv * head_dim);
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"db", db, f32(hkv, head_dim)},
                                         {"dout", dout, q_bytes},
                                         {"q", q, q_bytes},
                                         {"k", k, kv_bytes},
                                         {"v", v, kv_bytes},
                                         {"positions", positions, i32(tokens), true}}));
  SPW_ASSIGN_OR_RETURN(
      void* ws,
      workspace_for(
          op, cpu::attention_key_bias_scratch_bytes(batch, seq, hq, hkv, head_dim),
          dims(
              {{"batch", batch}, {"seq", seq}, {"hq", hq}, {"hkv", hkv}, {"head_dim", head_dim}})));
  return streams_.submit(stream, [=] {
    return cpu::attention_key_bias_backward(db, F(dout), F(q), F(k), F(v), batch, seq, hq, hkv,
                                            head_dim, *table, ws, positions);
  });
}

Status CpuBackend::do_swiglu_forward(void* out, const void* gate, const void* up, int n, int f,
                                     StreamId stream) {
  SPW_RETURN_IF_ERROR(
      check_glu("swiglu_forward", stream, n, f, {{"out", out}, {"gate", gate}, {"up", up}}));
  return streams_.submit(stream, [=] { return cpu::swiglu_forward(F(out), F(gate), F(up), n, f); });
}

Status CpuBackend::do_swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                      const void* up, int n, int f, StreamId stream) {
  SPW_RETURN_IF_ERROR(
      check_glu("swiglu_backward", stream, n, f,
                {{"dgate", dgate}, {"dup", dup}, {"dout", dout}, {"gate", gate}, {"up", up}}));
  return streams_.submit(stream, [=] {
    return cpu::swiglu_backward(F(dgate), F(dup), F(dout), F(gate), F(up), n, f);
  });
}

Status CpuBackend::do_geglu_forward(void* out, const void* gate, const void* up, int n, int f,
                                    StreamId stream) {
  SPW_RETURN_IF_ERROR(
      check_glu("geglu_forward", stream, n, f, {{"out", out}, {"gate", gate}, {"up", up}}));
  return streams_.submit(stream, [=] { return cpu::geglu_forward(F(out), F(gate), F(up), n, f); });
}

Status CpuBackend::do_geglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                                     const void* up, int n, int f, StreamId stream) {
  SPW_RETURN_IF_ERROR(
      check_glu("geglu_backward", stream, n, f,
                {{"dgate", dgate}, {"dup", dup}, {"dout", dout}, {"gate", gate}, {"up", up}}));
  return streams_.submit(
      stream, [=] { return cpu::geglu_backward(F(dgate), F(dup), F(dout), F(gate), F(up), n, f); });
}

Status CpuBackend::do_add_inplace(void* y, const void* x, size_t count, StreamId stream) {
  const char* op = "add_inplace";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"y", y, f32(count)}, {"x", x, f32(count)}}));
  return streams_.submit(stream, [=] { return cpu::add_inplace(F(y), F(x), count); });
}

Status CpuBackend::do_sum_squares(double* out, const float* x, size_t count, StreamId stream) {
  const char* op = "sum_squares";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"out", out, sizeof(double)}, {"x", x, f32(count)}}));
  return streams_.submit(stream, [=] {
    *out = cpu::sum_squares(x, count);
    return Status::ok_status();
  });
}

Status CpuBackend::do_adamw(float* param, float* m, float* v, const float* grad, size_t count,
                            const AdamWCoeffs& k, float grad_scale, StreamId stream) {
  const char* op = "adamw";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"param", param, f32(count)},
                                         {"m", m, f32(count)},
                                         {"v", v, f32(count)},
                                         {"grad", grad, f32(count)}}));
  // Split over the pool at tile boundaries: the bits do not depend on the split.
  return streams_.submit(stream, [=] {
    const size_t tiles = count / cpu::kAdamWTile;
    ThreadPool::global().parallel_for(
        tiles,
        [&](size_t b, size_t e) {
          const size_t at = b * cpu::kAdamWTile;
          cpu::adamw_tiles(param + at, m + at, v + at, grad + at, e - b, grad_scale, k);
        },
        /*min_chunk=*/256);
    const size_t done = tiles * cpu::kAdamWTile;
    cpu::adamw(param + done, m + done, v + done, grad + done, count - done, grad_scale, k);
    return Status::ok_status();
  });
}

Status CpuBackend::do_lm_head_loss(float* losses, void* dx, float* dw, const void* x, const void* w,
                                   const int32_t* labels, int n, int d, int v, float loss_scale,
                                   float* logits_out, int chunk, StreamId stream) {
  const char* op = "lm_head_loss";
  SPW_RETURN_IF_ERROR(streams_.check_stream(stream, op));
  SPW_RETURN_IF_ERROR(cpu::check_lm_head_shape(n, d, v, chunk));
  SPW_RETURN_IF_ERROR(check_tensors(op, {{"losses", losses, f32(n)},
                                         {"dx", dx, f32(n, d), true},
                                         {"dw", dw, f32(v, d), true},
                                         {"x", x, f32(n, d)},
                                         {"w", w, f32(v, d)},
                                         {"labels", labels, i32(n)},
                                         {"logits_out", logits_out, f32(n, v), true}}));
  SPW_ASSIGN_OR_RETURN(void* ws, workspace_for(op, cpu::lm_head_scratch_bytes(n, v, chunk),
                                               dims({{"n", n}, {"vocab", v}, {"chunk", chunk}})));
  return streams_.submit(stream, [=] {
    return cpu::lm_head_loss(losses, F(dx), dw, F(x), F(w), labels, n, d, v, loss_scale, logits_out,
                             chunk, ws);
  });
}

}  // namespace spillway::compute
