#include "worker/metered-backend.h"

#include <algorithm>

namespace spillway::worker {

void MeteredBackend::Meter::add(void* ptr, size_t bytes) {
  std::lock_guard lock(mu);
  held[ptr] = bytes;
  const uint64_t total = now.fetch_add(bytes) + bytes;
  peak.store(std::max(peak.load(), total));
}

void MeteredBackend::Meter::remove(void* ptr) {
  std::lock_guard lock(mu);
  auto it = held.find(ptr);
  if (it == held.end()) return;
  now.fetch_sub(it->second);
  held.erase(it);
}

void MeteredBackend::Meter::reset_peak() {
  std::lock_guard lock(mu);
  peak.store(now.load());
}

Result<void*> MeteredBackend::device_alloc(size_t bytes) {
  SPW_ASSIGN_OR_RETURN(void* p, in_.device_alloc(bytes));
  device_.add(p, bytes);
  return p;
}

void MeteredBackend::device_free(void* ptr) {
  device_.remove(ptr);
  in_.device_free(ptr);
}

Result<void*> MeteredBackend::host_alloc_pinned(size_t bytes) {
  SPW_ASSIGN_OR_RETURN(void* p, in_.host_alloc_pinned(bytes));
  pinned_.add(p, bytes);
  return p;
}

void MeteredBackend::host_free_pinned(void* ptr) {
  pinned_.remove(ptr);
  in_.host_free_pinned(ptr);
}

Status MeteredBackend::host_register(void* ptr, size_t bytes) {
  SPW_RETURN_IF_ERROR(in_.host_register(ptr, bytes));
  pinned_.add(ptr, bytes);
  return {};
}

void MeteredBackend::host_unregister(void* ptr) {
  pinned_.remove(ptr);
  in_.host_unregister(ptr);
}

}  // namespace spillway::worker
