// The bulk route (read_route.hpp): a file's extents read whole, in large
// buffered requests from several threads, so that they land in the OS page
// cache (where the direct tier and the controller's buffered reads then
// find them) and, on the way, pass through a visitor that may look at the
// bytes (a scan column's selection, say). Requests are handed out in file
// order across the extents, so the disk sees long runs with several in
// flight.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace deepwell {

struct file_extent {
  uint64_t offset = 0, bytes = 0;
};

struct bulk_read_options {
  uint64_t request_bytes = 8ull << 20;  // one read's size
  unsigned threads = 0;                 // 0: the cores, from 4 to 16 (a thread is a read in flight)
};

// Called from the reading threads, at most once for each request: extent
// `extent`'s bytes [at, at + bytes) (at counted from the extent's start),
// `at` a multiple of request_bytes. Must be thread-safe.
using extent_visitor = std::function<void(size_t extent, uint64_t at, const uint8_t* data, uint64_t bytes)>;

struct bulk_read_report {
  uint64_t bytes = 0, requests = 0;
  unsigned threads = 0;
  double seconds = 0;
};

// Throws deepwell::error naming the file: one that cannot be opened, an
// extent past its end, a failed or short read (the first; the other
// threads stop), and whatever the visitor throws.
bulk_read_report bulk_read(const std::string& path, const std::vector<file_extent>& extents,
                           const bulk_read_options& o = {}, const extent_visitor& visit = {});

// Bytes the OS page cache could take now without pushing out what
// programs use (MemAvailable in /proc/meminfo); 0 where unknown. A bulk
// read larger than this would evict its own first extents before the
// query reads them.
uint64_t page_cache_room();

// The share of [offset, offset + bytes) of the file in the OS page cache
// now (mincore over a mapping of it); 0 for a file that cannot be mapped.
// `samples` > 0: about that many pages, in runs of 16 spread evenly over
// the range, not every page (mincore costs a few tenths of a microsecond a
// page, and a system call several: a full look at six 128 MiB columns
// took 30-50 ms on a 2-core VM, more than a warm query).
double file_resident_share(const std::string& path, uint64_t offset, uint64_t bytes, uint64_t samples = 0);

}  // namespace deepwell
