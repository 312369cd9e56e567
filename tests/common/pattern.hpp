// The deterministic data pattern of the tests, for host and device code:
// every 8-byte word of a dataset holds a hash of its byte offset (and a
// seed), so any misplaced, stale or torn block is detected.
#pragma once
#include <cstdint>

#include "deepwell/config.hpp"

namespace deepwell::test {

DW_HD inline uint64_t pattern_word(uint64_t byte_offset, uint64_t seed = 0) {
  uint64_t x = byte_offset ^ (seed * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace deepwell::test
