// The server's shared host-memory tier: a page cache in host memory that
// every client of `deepwell serve` reads through, between their own caches
// (HBM, or host memory for CPU clients) and storage. Each dataset that
// host_tier::wrap() wraps gets its own part of the tier (an arena, in a
// memfd: tier_layout.hpp), so that a client granted that dataset may map
// its arena read-only and copy resident pages straight from it (the direct
// tier across processes) without seeing any other dataset's pages. Pages
// that several programs read come from host memory after the first, not
// from storage.
//
// Reads through the controller: a request whose pages are all resident is
// copied from the tier at once (no I/O); otherwise it is read from storage
// into the caller's buffer, and the whole pages it covers are installed
// afterwards unless a write to that dataset began meanwhile (so a read that
// overlapped a write never leaves the old bytes behind). Writes go through
// to storage and drop the pages they touch, before they are issued: a read
// that starts after a write completed sees the write, whether it comes
// through the controller or straight from the arena. Eviction is CLOCK,
// within each arena.
#pragma once
#include <cstdint>
#include <memory>

#include "deepwell/targets/target.hpp"

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
  // 64 KiB), shared out among the datasets it wraps. Throws deepwell::error
  // for a bad size. Each arena also takes 4 bytes per page of its dataset
  // for its index, beyond `bytes`.
  static std::shared_ptr<host_tier> make(uint64_t bytes, uint32_t page_bytes = 4096);
  virtual ~host_tier() = default;
  // A target that reads `inner` through this tier, with an arena of
  // `bytes` (rounded down to whole pages; 0: as much of what is left as the
  // dataset's whole pages fill). Throws deepwell::error when less than a
  // page is left, or memory runs out. The tier must outlive the target
  // (the target keeps it alive).
  virtual std::shared_ptr<target> wrap(std::shared_ptr<target> inner, uint64_t bytes = 0) = 0;
  virtual host_tier_stats stats() const = 0;
  virtual uint32_t page_bytes() const = 0;
  // Bytes of the tier not yet given to an arena.
  virtual uint64_t bytes_left() const = 0;
};

}  // namespace deepwell
