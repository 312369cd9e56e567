// The page cache's directory: which slot holds a page. Buckets of dir_ways
// entries (a key and a slot index, cache_layout.hpp), sized by the cache,
// not the dataset. A key lives only in its home bucket; inserts and
// removals take the bucket's lock, lookups take none: a lookup is a hint,
// which the caller checks against the slot's own state and key after
// pinning it. Part of page_cache_ref; self-contained.
#pragma once
#include <cstdint>

#include "deepwell/cache/cache_layout.hpp"
#include "deepwell/cache/detail/wide_load.hpp"
#include "deepwell/common/detail/hash.hpp"
#include "deepwell/link/queue.hpp"

namespace deepwell::detail {

struct dir_insert_result {
  int64_t entry = -1;
  bool inserted = false;  // the entry is new and reserved (slot dir_pending) for the caller
  bool full = false;      // the bucket had no room: evict one of its pages and retry
};

// A by-value view of the directory's arrays (in the cache's metadata).
struct cache_directory {
  uint64_t* keys = nullptr;   // [bucket * dir_ways + way]
  uint32_t* slots = nullptr;  // the slot of the same entry, or dir_pending
  uint32_t* locks = nullptr;  // [bucket]
  uint32_t nbuckets = 0;      // a power of two

  DW_HD uint32_t bucket_of(uint64_t key) const { return uint32_t(fmix64(key)) & (nbuckets - 1); }

  // The entry of `key` in bucket b, or -1. Inserts fill a bucket from its
  // first way, so the scan stops at the group holding the first match: a
  // hit loads four ways at a time (one 32-byte sector, in flight at once)
  // up to its own, not the whole bucket. Relaxed is enough: the caller
  // checks what it finds.
  DW_HD int64_t find(uint64_t key, uint32_t b) const { return scan<false>(key, b, nullptr); }

  // find() for the hit path: the slots of each group of four ways are read
  // with its keys, in the same round trip, and the matching entry's slot
  // returned in `slot`. Read together, not after the key, a slot may be
  // older than its key (an entry being reused): the caller's pin and key
  // check catch that, as they catch any stale entry.
  DW_HD bool find_slot(uint64_t key, uint32_t b, uint32_t& slot) const { return scan<true>(key, b, &slot) >= 0; }

  // Reserves an entry for `key` (slot pending) unless the key is there.
  DW_HD dir_insert_result insert(uint64_t key, uint32_t b) const {
    dir_insert_result r;
    lock_bucket(b);
    r.entry = find(key, b);
    if (r.entry < 0) {
      const uint64_t base = uint64_t(b) * dir_ways;
      for (uint32_t w = 0; w < dir_ways; ++w) {
        client_atomic<uint64_t> k(keys[base + w]);
        if (k.load(memory_order_relaxed) == empty_key) {
          client_atomic<uint32_t>(slots[base + w]).store(dir_pending, memory_order_relaxed);
          k.store(key, memory_order_release);
          r.entry = int64_t(base + w);
          r.inserted = true;
          break;
        }
      }
      r.full = !r.inserted;
    }
    unlock_bucket(b);
    return r;
  }

  // Removes `key`'s entry if it still points to `slot` (or is pending).
  DW_HD void remove(uint64_t key, uint32_t slot) const {
    const uint32_t b = bucket_of(key);
    const uint64_t base = uint64_t(b) * dir_ways;
    lock_bucket(b);
    for (uint32_t w = 0; w < dir_ways; ++w) {
      client_atomic<uint64_t> k(keys[base + w]);
      if (k.load(memory_order_relaxed) == key &&
          client_atomic<uint32_t>(slots[base + w]).load(memory_order_relaxed) == slot) {
        k.store(empty_key, memory_order_release);
        break;
      }
    }
    unlock_bucket(b);
  }

 private:
  template <bool WithSlots>
  DW_HD DW_FORCEINLINE int64_t scan(uint64_t key, uint32_t b, uint32_t* slot) const {
    static_assert(dir_ways % 4 == 0, "the scan reads four ways at a time");
    const uint64_t base = uint64_t(b) * dir_ways;
    for (uint32_t w = 0; w < dir_ways; w += 4) {
      uint64_t k[4];
      uint32_t s[4];
      load4_relaxed(keys + base + w, k);
      if (WithSlots) load4_relaxed(slots + base + w, s);
      for (uint32_t i = 0; i < 4; ++i)
        if (k[i] == key) {
          if (WithSlots) *slot = s[i];
          return int64_t(base + w + i);
        }
    }
    return -1;
  }

  DW_HD void lock_bucket(uint32_t b) const {
    client_atomic<uint32_t> l(locks[b]);
    for (uint32_t i = 0;; ++i) {
      uint32_t expected = 0;
      if (l.load(memory_order_relaxed) == 0 && l.compare_exchange_strong(expected, 1, memory_order_acquire)) return;
      backoff(i);  // holders only scan one bucket: the wait is short
    }
  }
  DW_HD void unlock_bucket(uint32_t b) const { client_atomic<uint32_t>(locks[b]).store(0, memory_order_release); }
};

}  // namespace deepwell::detail
