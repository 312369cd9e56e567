// The page cache's memory, as kernels and CPU threads see it: page slots,
// one state word and one key per slot, a translation directory sized by the
// cache (not the dataset), datasets, statistics. The host owner
// (page_cache.hpp) allocates all of it in device memory for GPU clients or in
// host memory for CPU clients; page_cache_ref (page_cache_ref.hpp) is the view.
#pragma once
#include <cstdint>

#include "deepwell/cache/page_source.hpp"
#include "deepwell/common/config.hpp"

namespace deepwell {

// A slot's state word, 64 bits. In the low 32, pins (references) in the
// low bits and flags above them saying what the slot holds; in the high 32,
// the slot's generation, raised each time its page leaves (eviction,
// clear), so that a reader holding no pin can tell that the page it read
// was not replaced meanwhile (page_cache_ref::read_hit). Pinning is a
// fetch_add of 1, so a thread learns the state at the moment it pinned from
// the value it gets back, and transitions that others may race with change
// flag bits only with arithmetic or bitwise atomics, never by storing a
// whole word (a store would also lose the generation).
using slot_word = uint64_t;
namespace slot_state {
constexpr slot_word ref_mask = 0x00FFFFFFu;
constexpr slot_word valid = 1u << 24;      // holds the page of slot_key
constexpr slot_word busy = 1u << 25;       // being filled; the filler owns it
constexpr slot_word evict = 1u << 26;      // claimed by an evictor: write-back / reuse under way
constexpr slot_word dirty = 1u << 27;      // written since the last write-back
constexpr slot_word use = 1u << 28;        // CLOCK's second-chance bit, set on access
constexpr slot_word error = 1u << 29;      // the last fill failed; the slot is free to reclaim
constexpr slot_word orphan = 1u << 30;     // I/O in flight that no thread waits for (slot_io names it)
constexpr slot_word writeback = 1u << 31;  // the page's one write-back is under way
constexpr slot_word gen_one = 1ull << 32;  // one generation
constexpr slot_word gen_mask = ~0ull << 32;
DW_HD constexpr uint32_t gen(slot_word w) { return uint32_t(w >> 32); }
// The two kinds of I/O left in flight (orphans), whoever finishes them:
//  busy | orphan:              a prefetch's read; the finisher copies the page in
//  valid | writeback | orphan: a write-back (eviction, cleaner, or a flush
//                              that timed out); the page stays readable and
//                              writable, is not written back again, and is
//                              not evicted (so never re-read) until the
//                              completion has been seen
}  // namespace slot_state

// Keys: dataset id in the top 16 bits, page number below.
constexpr uint64_t empty_key = ~0ull;
constexpr uint32_t key_page_bits = 48;
DW_HD constexpr uint64_t make_key(uint32_t dataset, uint64_t page) { return uint64_t(dataset) << key_page_bits | page; }
DW_HD constexpr uint32_t key_dataset(uint64_t key) { return uint32_t(key >> key_page_bits); }
DW_HD constexpr uint64_t key_page(uint64_t key) { return key & ((1ull << key_page_bits) - 1); }

// The directory: buckets of `dir_ways` entries (a key and a slot index). A
// key lives only in its home bucket; inserts and removals take the bucket's
// lock, lookups take none (the slot's own key and state are checked after
// pinning it). Sized at four entries per slot, a bucket rarely fills; when
// one does, the inserter evicts one of the bucket's own pages.
constexpr uint32_t dir_ways = 16;
constexpr uint32_t dir_pending = ~0u;  // entry reserved by an inserter that has no slot yet

// Page hints: a direct-mapped table beside the directory, indexed by page
// number (consecutive pages in consecutive entries) and sized at two
// entries per slot or more, so a dataset that fits in the cache has one
// entry per page. A fill stores its page's entry with release once the page
// is valid: (generation << 32) | (slot + 1); 0 is no hint. A hint is never
// removed nor trusted: the reader checks the slot's key and generation
// (page_cache_ref::read_hit), so a stale hint, or one that another page
// took over, only sends it to the directory.
DW_HD constexpr uint64_t make_hint(uint32_t slot, uint32_t generation) {
  return uint64_t(generation) << 32 | (uint64_t(slot) + 1);
}
DW_HD constexpr uint32_t hint_slot(uint64_t hint) { return uint32_t(hint) - 1; }  // ~0u for no hint
DW_HD constexpr uint32_t hint_generation(uint64_t hint) { return uint32_t(hint >> 32); }
// Datasets start far apart in the table (a golden-ratio stride).
DW_HD constexpr uint64_t hint_position(uint64_t key) {
  return key_page(key) + uint64_t(key_dataset(key)) * 0x9E3779B1ull;
}

// One dataset served through the cache: a namespace of the link, and where
// its missing pages come from (page_source.hpp).
struct dataset_desc {
  uint32_t nsid = 0;
  uint32_t block_size = 0;
  uint32_t blocks_per_page = 0;
  uint32_t read_only = 0;
  uint64_t bytes = 0;    // dataset length (the last page may be partial)
  uint64_t blocks = 0;   // namespace blocks
  uint64_t pages = 0;
  page_source source;    // set when the dataset is added; the link where no other
  writeback_tally tally; // where its owner asked for one (page_cache::add_dataset)
};

// Group commit of one dataset's flushes (page_cache_ref::persist): flushes
// begun, the newest finished, the newest that failed and why, and the lock
// of the one thread running a flush.
struct alignas(128) persist_epoch {
  unsigned long long started;
  unsigned long long completed;
  unsigned long long failed;  // 0: none
  uint32_t leader;
  uint32_t error;  // packed request_status of that failure
};

// Statistics, sharded so that warps on different SMs do not contend on one
// line; the host sums the shards.
struct alignas(128) cache_stats_shard {
  unsigned long long accesses;       // element accesses (reads, writes, handles, bulk copies per page)
  unsigned long long hits;           // page lookups that found the page valid
  unsigned long long misses;         // pages fetched (read from the dataset)
  unsigned long long waits;          // lookups that found the page being fetched by another thread
  unsigned long long evictions;      // valid pages evicted
  unsigned long long writebacks;     // dirty pages written back (eviction or flush)
  unsigned long long bytes_read;     // bytes fetched into the cache
  unsigned long long bytes_written;  // bytes written back
  unsigned long long direct_fills;   // fills from host memory with no controller round trip
  unsigned long long errors;         // failed fills and write-backs
  unsigned long long cleans;         // write-backs started ahead of the CLOCK hand (the cleaner)
  unsigned long long reaped;         // I/O left in flight finished by a thread short of command ids
  unsigned long long flushes;        // namespace flushes run by persists (each may serve many)
  unsigned long long tier_fills;     // fills copied from a host-tier arena (no controller round trip)
  unsigned long long tier_retries;   // such copies discarded because the server changed the frame meanwhile
  unsigned long long hit_reads;      // element reads served with no pin (read_hit): each one access and one hit
};
constexpr uint32_t cache_stats_shards = 32;

struct cache_stats {
  uint64_t accesses = 0, hits = 0, misses = 0, waits = 0, evictions = 0, writebacks = 0, bytes_read = 0,
           bytes_written = 0, direct_fills = 0, errors = 0, cleans = 0, reaped = 0, flushes = 0, tier_fills = 0,
           tier_retries = 0;
  uint64_t hit_reads = 0;  // of the accesses and hits: reads with no pin (read_hit, read_seen)
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
};

inline cache_stats sum_stats(const cache_stats_shard* s, uint32_t n) {
  cache_stats t;
  for (uint32_t i = 0; i < n; ++i) {
    t.accesses += s[i].accesses;
    t.hits += s[i].hits;
    t.misses += s[i].misses;
    t.waits += s[i].waits;
    t.evictions += s[i].evictions;
    t.writebacks += s[i].writebacks;
    t.bytes_read += s[i].bytes_read;
    t.bytes_written += s[i].bytes_written;
    t.direct_fills += s[i].direct_fills;
    t.errors += s[i].errors;
    t.cleans += s[i].cleans;
    t.reaped += s[i].reaped;
    t.flushes += s[i].flushes;
    t.tier_fills += s[i].tier_fills;
    t.tier_retries += s[i].tier_retries;
    t.accesses += s[i].hit_reads;
    t.hits += s[i].hit_reads;
    t.hit_reads += s[i].hit_reads;
  }
  return t;
}

// Where each part lives inside the cache's one allocation of metadata (the
// page data is a separate allocation).
struct cache_geometry {
  uint32_t page_size = 0;
  uint32_t slots = 0;
  uint32_t buckets = 0;  // a power of two
  uint32_t hints = 0;    // page hints (page_cache_ref::hints), a power of two
  uint32_t queues = 0;
  uint32_t queue_entries = 0;  // per queue: the stride of io_slot
  uint32_t max_datasets = 0;
};

struct cache_meta_layout {
  uint64_t state, slot_key, slot_io, io_slot, orphans, dir_keys, dir_slots, dir_locks, hints, clock, dirty, error,
      stats, queues, datasets, persists, total;
};

DW_HD constexpr uint64_t cache_align(uint64_t v) { return (v + 127) / 128 * 128; }

inline cache_meta_layout compute_cache_layout(const cache_geometry& g, uint64_t queue_ref_bytes) {
  cache_meta_layout l{};
  uint64_t o = 0;
  auto take = [&o](uint64_t bytes) {
    const uint64_t at = o;
    o = cache_align(o + bytes);
    return at;
  };
  l.state = take(uint64_t(g.slots) * sizeof(slot_word));
  l.slot_key = take(uint64_t(g.slots) * 8);
  l.slot_io = take(uint64_t(g.slots) * 4);
  l.io_slot = take(uint64_t(g.queues) * g.queue_entries * 4);
  l.orphans = take(uint64_t(g.queues) * 4);
  l.dir_keys = take(uint64_t(g.buckets) * dir_ways * 8);
  l.dir_slots = take(uint64_t(g.buckets) * dir_ways * 4);
  l.dir_locks = take(uint64_t(g.buckets) * 4);
  l.hints = take(uint64_t(g.hints) * 8);
  l.clock = take(8);
  l.dirty = take(8);
  l.error = take(4);
  l.stats = take(sizeof(cache_stats_shard) * cache_stats_shards);
  l.queues = take(queue_ref_bytes * g.queues);
  l.datasets = take(sizeof(dataset_desc) * g.max_datasets);
  l.persists = take(sizeof(persist_epoch) * g.max_datasets);
  l.total = o;
  return l;
}

}  // namespace deepwell
