#include "worker/metered-device.h"

#include <algorithm>
#include <string>

#include "compute/tensor.h"
#include "core/dtype.h"

namespace spillway::worker {

void MeteredDevice::Meter::add(void* ptr, size_t bytes) {
  std::lock_guard lock(mu);
  held[ptr] = bytes;
  const uint64_t total = now.fetch_add(bytes) + bytes;
  peak.store(std::max(peak.load(), total));
}

void MeteredDevice::Meter::remove(void* ptr) {
  std::lock_guard lock(mu);
  auto it = held.find(ptr);
  if (it == held.end()) return;
  now.fetch_sub(it->second);
  held.erase(it);
}

void MeteredDevice::Meter::reset_peak() {
  std::lock_guard lock(mu);
  peak.store(now.load());
}

Result<void*> MeteredDevice::device_alloc(size_t bytes) {
  SPW_ASSIGN_OR_RETURN(void* p, in_.device_alloc(bytes));
  device_.add(p, bytes);
  return p;
}

void MeteredDevice::device_free(void* ptr) {
  device_.remove(ptr);
  in_.device_free(ptr);
}

Result<void*> MeteredDevice::host_alloc_pinned(size_t bytes) {
  SPW_ASSIGN_OR_RETURN(void* p, in_.host_alloc_pinned(bytes));
  pinned_.add(p, bytes);
  return p;
}

void MeteredDevice::host_free_pinned(void* ptr) {
  pinned_.remove(ptr);
  in_.host_free_pinned(ptr);
}

Status MeteredDevice::host_register(void* ptr, size_t bytes) {
  SPW_RETURN_IF_ERROR(in_.host_register(ptr, bytes));
  pinned_.add(ptr, bytes);
  return {};
}

void MeteredDevice::host_unregister(void* ptr) {
  pinned_.remove(ptr);
  in_.host_unregister(ptr);
}

Status MeteredDevice::convert(void* dst, DType dt, const void* src, DType st, size_t count,
                              compute::StreamId s) {
  auto op = [&] { return in_.convert(dst, dt, src, st, count, s); };
  if (!times_ || !times_->enabled()) return op();
  // Reads count of `st`, writes count of `dt`.
  const double bytes = static_cast<double>(count) * (dtype_size(st) + dtype_size(dt));
  return times_->run(OpFamily::kConvert, {0, bytes}, compute::Shape{int64_t(count)}.to_string(), s,
                     op);
}

Status MeteredDevice::fill_zero(void* dst, size_t bytes, compute::StreamId s) {
  auto op = [&] { return in_.fill_zero(dst, bytes, s); };
  if (!times_ || !times_->enabled()) return op();
  return times_->run(OpFamily::kFillZero, {0, static_cast<double>(bytes)},
                     std::to_string(bytes) + " bytes", s, op);
}

}  // namespace spillway::worker
