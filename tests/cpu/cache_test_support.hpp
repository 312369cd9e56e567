// Helpers the cache suites share: a dataset in host memory filled with the
// test pattern, and a small CPU cache configuration.
#pragma once
#include <cstdint>
#include <memory>

#include "deepwell/page_cache.hpp"
#include "test_util.hpp"

namespace deepwell::test {

inline std::shared_ptr<target> pattern_memory(uint64_t bytes, bool writable, uint64_t seed) {
  auto t = make_host_memory_target(bytes, writable);
  fill_pattern(t->host_pointer(), bytes, 0, seed);
  return t;
}

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
