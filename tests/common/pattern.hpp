// The deterministic data pattern of every test suite, for host and device
// code: every 8-byte word of a dataset holds a hash of its byte offset (and
// a seed), so any misplaced, stale or torn block is detected. Byte k of the
// pattern is byte k % 8 (little-endian) of the word at k - k % 8, so a
// buffer that starts at any offset, aligned or not, holds the same bytes as
// the dataset there.
#pragma once
#include <cstdint>
#include <vector>

#include "deepwell/common/config.hpp"
#include "deepwell/common/detail/hash.hpp"

namespace deepwell::test {

DW_HD inline uint64_t pattern_word(uint64_t byte_offset, uint64_t seed = 0) {
  return ::deepwell::detail::fmix64(byte_offset ^ (seed * 0x9E3779B97F4A7C15ull));
}

// The pattern's byte at `byte_offset`.
DW_HD inline uint8_t pattern_byte(uint64_t byte_offset, uint64_t seed = 0) {
  return uint8_t(pattern_word(byte_offset & ~uint64_t(7), seed) >> (8 * (byte_offset & 7)));
}

// Fills `bytes` bytes at `dst` with the pattern's bytes [offset, offset + bytes).
inline void fill_pattern(void* dst, uint64_t bytes, uint64_t offset, uint64_t seed = 0) {
  auto* p = static_cast<uint8_t*>(dst);
  for (uint64_t i = 0; i < bytes;) {
    const uint64_t at = offset + i;
    const uint64_t word = pattern_word(at & ~uint64_t(7), seed);
    for (uint64_t k = at & 7; k < 8 && i < bytes; ++k, ++i) p[i] = uint8_t(word >> (8 * k));
  }
}

// Index of the first of `bytes` bytes at `src` that differs from the
// pattern's bytes [offset, offset + bytes), or -1.
inline int64_t check_pattern(const void* src, uint64_t bytes, uint64_t offset, uint64_t seed = 0) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (uint64_t i = 0; i < bytes;) {
    const uint64_t at = offset + i;
    const uint64_t word = pattern_word(at & ~uint64_t(7), seed);
    for (uint64_t k = at & 7; k < 8 && i < bytes; ++k, ++i)
      if (p[i] != uint8_t(word >> (8 * k))) return int64_t(i);
  }
  return -1;
}

// The pattern's bytes [offset, offset + bytes).
inline std::vector<uint8_t> pattern_bytes(uint64_t bytes, uint64_t offset, uint64_t seed = 0) {
  std::vector<uint8_t> v(bytes);
  fill_pattern(v.data(), bytes, offset, seed);
  return v;
}

}  // namespace deepwell::test
