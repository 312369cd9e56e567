// CRC-32C (Castagnoli), the checksum of iSCSI, ext4 metadata and RocksDB's
// blocks: the SSE4.2 instruction where the CPU has it, a table otherwise.
#pragma once
#include <cstddef>
#include <cstdint>

namespace deepwell {

// Continues `crc` (0 to start) over `bytes` bytes.
uint32_t crc32c(uint32_t crc, const void* data, size_t bytes);

}  // namespace deepwell
