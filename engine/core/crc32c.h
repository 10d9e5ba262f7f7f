// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78): the per-block checksum of the
// SSD store, the same function as iSCSI, ext4 metadata and leveldb's crc32c.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time) and a
// slicing-by-8 table otherwise; both give identical results. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spillway {

// CRC-32C of `data[0, n)`, continuing from `crc` (the value returned for the preceding bytes; 0 to
// start). crc32c_extend(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) {
  return crc32c_extend(0, data, n);
}

// The portable table version, exposed so tests can check it against the hardware path.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);
// True when crc32c_extend uses the SSE4.2 instruction.
bool crc32c_is_hardware();

}  // namespace spillway
