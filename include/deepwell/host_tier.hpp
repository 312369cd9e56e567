// The server's shared host-memory tier: a page cache in host memory that
// every client of `deepwell serve` reads through, between their own caches
// (HBM, or host memory for CPU clients) and storage. One tier is shared by
// all the server's datasets; each dataset's target is wrapped by
// host_tier::wrap(). Pages that several programs read come from host
// memory after the first, not from storage.
//
// Reads: a request whose pages are all resident is copied from the tier at
// once (no I/O); otherwise it is read from storage into the caller's
// buffer, and the whole pages it covers are installed afterwards unless a
// write to that dataset began meanwhile (so a read that overlapped a write
// never leaves the old bytes behind). Writes go through to storage and drop
// the pages they touch, before they are issued: a read that starts after a
// write completed sees the write. Eviction is CLOCK.
#pragma once
#include <cstdint>
#include <memory>

#include "deepwell/target.hpp"

namespace deepwell {

struct host_tier_stats {
  uint64_t hits = 0;           // requests served from the tier
  uint64_t misses = 0;         // requests that went to storage
  uint64_t pages_installed = 0;
  uint64_t evictions = 0;
  uint64_t invalidations = 0;  // pages dropped by writes
  uint64_t resident_pages = 0;
  uint64_t capacity_pages = 0;
};

class host_tier {
 public:
  // `bytes` of host memory in pages of `page_bytes` (a power of two, 512 to
  // 64 KiB). Throws deepwell::error for a bad size or when memory runs out.
  static std::shared_ptr<host_tier> make(uint64_t bytes, uint32_t page_bytes = 4096);
  virtual ~host_tier() = default;
  // A target that reads `inner` through this tier. The tier must outlive it
  // (the wrapper keeps it alive).
  virtual std::shared_ptr<target> wrap(std::shared_ptr<target> inner) = 0;
  virtual host_tier_stats stats() const = 0;
  virtual uint32_t page_bytes() const = 0;
};

}  // namespace deepwell
