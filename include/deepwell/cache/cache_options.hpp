// The page cache's settings as a user gives them: one vocabulary, the same
// fields and names in C++ (here), in C (dw_cache_options, deepwell/c/deepwell.h)
// and in Python (the keyword arguments of deepwell.open, deepwell.kv and
// deepwell.checkpoint). A field left at 0 (direct_files at -1) means the
// default: the entry point's own where it has one (a checkpoint store's
// 64 KiB pages), else defaults.hpp's (DEEPWELL_* in the environment, else
// built in). applied_to is the one place where "0: the default" is read.
#pragma once
#include <cstdint>
#include <string>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/error.hpp"

namespace deepwell {

struct cache_options {
  int32_t device = -1;         // CUDA ordinal: a page cache on that GPU; -1: a host cache and CPU threads
  uint32_t page_size = 0;      // cache page: 512 B to 64 KiB, a power of two
  uint64_t cache_bytes = 0;    // page data of the cache
  uint32_t queue_pairs = 0;    // the cache's queue pairs
  uint32_t queue_entries = 0;  // per queue pair, a power of two
  uint32_t pollers = 0;        // controller threads (in-process datasets)
  uint32_t cpu_threads = 0;    // a host cache's client threads; 0: the cores, at most 16
  bool odirect = false;        // O_DIRECT: bypass the page cache (and no mapping of the file)
  int32_t direct_files = -1;   // 0 never, 1 resident, 2 always (cache_config::file_tier); -1: the default
  double timeout_s = 0;        // deadline of every wait inside an access

  // Throws deepwell::error naming the field whose value no cache can take
  // (ranges a cache checks itself, such as a page size's, it checks).
  void check() const {
    if (device < -1) throw error("device must be a CUDA ordinal or -1 (CPU clients), not " + std::to_string(device));
    if (direct_files < -1 || direct_files > 2)
      throw error("direct_files must be 0 (never), 1 (resident) or 2 (always), not " + std::to_string(direct_files));
    if (!(timeout_s >= 0)) throw error("timeout must not be negative");
  }

  // `base` (an entry point's defaults) with every setting given here in
  // place of its own. O_DIRECT asks to bypass the page cache: no mapping
  // of the file either.
  cache_config applied_to(cache_config base) const {
    if (page_size) base.page_size = page_size;
    if (cache_bytes) base.capacity_bytes = cache_bytes;
    if (queue_pairs) base.queue_pairs = queue_pairs;
    if (queue_entries) base.queue_entries = queue_entries;
    if (timeout_s > 0) base.timeout_ns = uint64_t(timeout_s * 1e9);
    if (direct_files >= 0) base.direct_files = cache_config::file_tier(direct_files);
    if (odirect) base.direct_files = cache_config::file_tier::never;
    return base;
  }
};

}  // namespace deepwell
