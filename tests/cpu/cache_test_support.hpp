// Helpers the cache suites share: a small CPU cache configuration (and,
// through test_util.hpp, the pattern and pattern_memory).
#pragma once
#include <cstdint>

#include "deepwell/cache/page_cache.hpp"
#include "test_util.hpp"

namespace deepwell::test {

// `pages` pages, two queue pairs of 64 entries, a 20 s deadline.
inline cache_config small_cache(uint64_t pages, uint32_t page_size = 4096) {
  cache_config c;
  c.page_size = page_size;
  c.capacity_bytes = pages * page_size;
  c.queue_pairs = 2;
  c.queue_entries = 64;
  c.timeout_ns = 20ull * 1000000000ull;
  return c;
}

}  // namespace deepwell::test
