// Where a dataset's missing pages come from: one source per dataset, set
// when the dataset is added to a page cache (page_cache::add_dataset) and
// never changed by the cache (its owner may declare it again). A miss is a lookup and a claim of a slot
// (the cache's core), then the source's fill:
//
//   link             a read command on the link's queues (the controller,
//                    in this process or a server's)
//   host_mapping     a copy from the dataset's bytes in host memory, which
//                    this client may read (a read-only mapping of a file,
//                    or a host-memory dataset): no command at all
//   window_mappings  a copy from a window's mapping where its owner set one
//                    (a table of 2^window_shift-page windows in client
//                    memory); pages of other windows through the link
//   shared_tier      a copy from a server's host-memory arena where the page
//                    is resident there, checked against the arena's sequence
//                    word after the copy; other pages (and torn copies)
//                    through the link
//
// The link is every source's fallback: a source only spares the
// controller work. Sources are data, not code, so that a kernel holds
// them in its dataset table (by value) and a fill picks its route from
// the kind, with no call through a pointer.
// Separately from the source, a dataset may carry a write-back tally: the
// owner of a namespace (the file API) learns from it when the write-backs
// of a range of pages have all been submitted.
#pragma once
#include <cstdint>

#include "deepwell/common/config.hpp"
#include "deepwell/protocol/shared_atomic.hpp"
#include "deepwell/protocol/tier_layout.hpp"

namespace deepwell {

// One window's mapping (window_mappings): the bytes as clients address
// them and their length, or nothing (data == 0). Set and cleared by the
// table's owner while no client reads that window's pages through it;
// read with relaxed atomics, so a miss sees an entry written before the
// owner's reply to the client.
struct window_source {
  unsigned long long data;   // the mapping as clients address it (a pointer), 0: none
  unsigned long long bytes;  // bytes mapped: pages past them go through the controller
};

enum class page_source_kind : uint32_t { link = 0, host_mapping = 1, window_mappings = 2, shared_tier = 3 };

struct page_source {
  page_source_kind kind = page_source_kind::link;
  uint32_t window_shift = 0;               // window_mappings: pages per window, log2
  const uint8_t* host = nullptr;           // host_mapping: the dataset's first byte
  const window_source* windows = nullptr;  // window_mappings: one entry per window
  tier_ref tier;                           // shared_tier

  static page_source from_link() { return {}; }
  static page_source from_host(const uint8_t* bytes) {
    page_source s;
    s.kind = page_source_kind::host_mapping;
    s.host = bytes;
    return s;
  }
  static page_source from_windows(const window_source* table, uint32_t shift) {
    page_source s;
    s.kind = page_source_kind::window_mappings;
    s.windows = table;
    s.window_shift = shift;
    return s;
  }
  static page_source from_tier(const tier_ref& t) {
    page_source s;
    s.kind = page_source_kind::shared_tier;
    s.tier = t;
    return s;
  }

  // The dataset's bytes in host memory where every page is there (a
  // host_mapping), else nullptr.
  DW_HD const uint8_t* mapped() const { return kind == page_source_kind::host_mapping ? host : nullptr; }

  // Page `page` in host memory, with no command: its first byte and the
  // dataset's bytes from there on (at least 1), or false where this source
  // has no mapping of it (the link's, or a shared tier's, which is
  // checked separately: tier_ref::begin and still).
  DW_HD bool host_bytes(uint64_t page, uint32_t page_shift, uint64_t dataset_bytes, const uint8_t*& src,
                        uint64_t& left) const {
    if (kind == page_source_kind::host_mapping) {
      const uint64_t off = page << page_shift;
      if (off >= dataset_bytes) return false;
      src = host + off;
      left = dataset_bytes - off;
      return true;
    }
    if (kind != page_source_kind::window_mappings) return false;
    window_source& e = const_cast<window_source&>(windows[page >> window_shift]);
    const unsigned long long data = client_atomic<unsigned long long>(e.data).load(memory_order_relaxed);
    if (!data) return false;
    const unsigned long long bytes = client_atomic<unsigned long long>(e.bytes).load(memory_order_relaxed);
    const uint64_t within = (page & ((1ull << window_shift) - 1)) << page_shift;
    if (within >= bytes) return false;
    src = reinterpret_cast<const uint8_t*>(data) + within;
    left = bytes - within;
    return true;
  }
};

// A write-back tally: a counter per 2^shift pages, in client memory,
// raised as each write-back of those pages is submitted (before the
// command, so that whoever sees the write-back in flight sees it counted).
// The owner compares it with the writes its target completed.
struct writeback_tally {
  uint32_t* counts = nullptr;
  uint32_t shift = 0;
  DW_HD void note(uint64_t page) const {
    if (counts) client_atomic<uint32_t>(counts[page >> shift]).fetch_add(1, memory_order_relaxed);
  }
};

}  // namespace deepwell
