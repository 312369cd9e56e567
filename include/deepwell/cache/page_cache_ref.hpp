// page_cache_ref: the page cache as kernels and CPU threads use it, a
// trivially copyable view they get by value (the cuCollections `ref`
// pattern; the host owner is page_cache, page_cache.hpp). Written once for
// GPU warps and CPU threads. Its parts live under detail/cache/: the
// directory (directory.hpp), the fill of a missing page (fill.hpp), I/O
// left in flight (orphans.hpp), write-back (writeback.hpp), CLOCK eviction
// and the cleaner (clock.hpp), and the copy loops (copy.hpp).
//
// Pages live in slots; a slot's state word (cache_layout.hpp) counts pins and
// carries its flags. The directory maps a page's key to its slot. The rules
// that keep it correct:
//  - One page, at most one slot: a key enters the directory only under its
//    bucket's lock, after checking it is not there; it leaves only when its
//    slot is evicted, and a slot is evicted only when clean with no
//    write-back in flight, so a page is never re-read while its write-back
//    is in flight (NVMe may reorder the two).
//  - Write-back is asynchronous: an evictor (or the cleaner, ahead of the
//    hand) copies a dirty page to staging, submits its write and moves on;
//    the page stays cached, readable and writable, and becomes evictable
//    once the completion has been seen. One write-back of a page at a time
//    (the writeback bit): two in flight could land in either order.
//  - I/O nobody waits for (prefetch reads, write-backs) is an orphan: its
//    queue and command id are in slot_io and io_slot names its slot, so a
//    thread that finds no free command id finishes completed orphans of
//    its queue (reap_queue) instead of waiting for the clock to reach them.
//  - A slot is reused only when nobody pins it: the evictor's CAS requires a
//    zero pin count. A pinner learns what it pinned from the value its
//    fetch_add returns, and checks the slot's key only after seeing it valid
//    (or failed): a slot may be reassigned between reading the directory and
//    pinning, and the key is rewritten before the new fill is published.
//  - One fetch per missing page: the thread that inserted the key fetches;
//    others find the entry, pin the slot and wait for it to turn valid.
//  - CLOCK with a use bit: the hand is one counter; a slot whose use bit is
//    set gets a second chance. Evictions run in parallel, each on the slot
//    its own CAS claimed.
//  - No hold-and-wait on command ids: a warp never waits for a command id
//    while it holds one (see acquire), so queues cannot deadlock however
//    many warps share them.
//  - Every wait has a deadline and ends with a status.
#pragma once
#include <cstdint>

#include "deepwell/cache/cache_layout.hpp"
#include "deepwell/cache/detail/directory.hpp"
#include "deepwell/cache/detail/phase_timing.hpp"
#include "deepwell/common/detail/copy.hpp"
#include "deepwell/common/warp.hpp"
#include "deepwell/link/queue.hpp"

namespace deepwell {

class page_cache;
namespace detail {
struct cache_access;
}

// What acquire hands each lane: the slot holding its page, pinned once for
// the lanes of the warp that asked for the same page (the leader owns the
// pin), or the status that explains why not.
struct warp_pin {
  uint32_t slot = ~0u;
  request_status status{};
  unsigned mask = 0;    // the lanes that called acquire together
  unsigned leader = 0;  // the lane that owns the pin of this lane's page
  unsigned peers = 0;   // the lanes that asked for this lane's page
  bool owner = false;   // this lane is that leader and holds a pin
};

// The slot and generation a lane's pin-free read of a page was checked
// against (page_cache_ref::read_seen), kept for its later reads of that page.
struct page_sight {
  static constexpr uint32_t none = ~0u;
  uint32_t slot = none;
  uint32_t gen = 0;
};

class page_cache_ref {
 public:
  // ---- geometry ----
  DW_HD uint32_t page_size() const { return page_size_; }
  DW_HD uint32_t page_shift() const { return page_shift_; }  // log2(page_size())
  DW_HD uint32_t slots() const { return nslots_; }
  // False for a default-constructed ref (no cache behind it).
  DW_HD bool attached() const { return state != nullptr; }

  // A read-only dataset's bytes in host memory where it has a direct tier
  // (readable by this client), else nullptr: what is there is what the
  // cache would hold, so sparse reads may skip the cache.
  DW_HD const uint8_t* direct_read_only(uint32_t dataset) const {
    if (dataset >= ndatasets) return nullptr;
    const dataset_desc& d = datasets[dataset];
    return d.read_only ? d.source.mapped() : nullptr;
  }

  // ---- access: pin pages, use them, release them ----

  // Every lane of the calling warp (as `w` sees it) calls this together.
  // Lanes with `want` set get their page's slot pinned (one pin per
  // distinct page, owned by the lowest lane asking for it); the leaders
  // fetch missing pages in rounds, all of a round's reads in flight at
  // once, and the whole warp copies each fetched page in from staging (or
  // straight from host memory: the direct tier).
  // `cover`: the bytes the lane will write from the start of the page
  // before it releases it. When they cover the page (its bytes in the
  // dataset) and every lane asking for the page says so, a missing page is
  // not read (a whole-page overwrite, as bulk writes do, reads nothing):
  // its slot is filled from `cover_src`, the bytes the lane is about to
  // write, before any other thread can see it, so a reader racing the
  // overwrite sees the page's old bytes or the new ones, never others.
  // Without cover_src the slot is zeroed instead: only for output nobody
  // reads while it is written (array_ref::write_range_unread).
  template <class Warp>
  DW_HD warp_pin acquire(const Warp& w, bool want, uint64_t key, uint32_t accesses = 1, uint32_t cover = 0,
                         const void* cover_src = nullptr) const;

  // A read of one T at byte `offset` of `key`'s page by the calling thread
  // alone, with no pin and no warp collective, where the page is valid.
  // First through the page's hint (with acquire; the fill stored it after
  // publishing the page): the hinted slot's key and the data, then its state
  // word, kept if the slot holds `key`, is valid, and has the hint's
  // generation. Else through the directory: its lookup, the slot's state
  // word (with acquire), key and data, then the state word again, kept if
  // the slot held `key`, was valid, and kept its generation throughout. (An
  // evictor raises the generation before the slot can be refilled;
  // model/slot.pml checks both paths.) False: not cached, being filled, or
  // changed meanwhile; `out` is untouched and the caller takes the pinned
  // path. Reads only: a write needs its pin (a page must not be evicted
  // mid-write).
  template <class T>
  DW_HD bool read_hit(uint64_t key, uint32_t offset, T& out) const;

  // read_hit for a lane reading several elements of one page (a warp
  // walking a list): the first read (`at` empty) finds the page as
  // read_hit does and keeps the slot and generation it checked against in
  // `at`; later reads with that `at` skip the lookup and are checked
  // against them (key and data, then the state word). The first read's
  // acquire (hint or state word) made the whole page's bytes visible, and
  // an unchanged generation after each read means no evictor has claimed
  // the slot since. False: the page is not valid here (or changed); `at`
  // is kept as it was, `out` untouched, and the caller pins instead.
  template <class T>
  DW_HD bool read_seen(uint64_t key, uint32_t offset, page_sight& at, T& out) const;
  // Counts n pin-free reads of the calling warp (one access and one hit
  // each), for callers of read_seen; read_element counts its own.
  template <class Warp>
  DW_HD void count_hit_reads(const Warp& w, uint64_t n) const {
    client_atomic<unsigned long long>(shard(w).hit_reads).fetch_add(n, memory_order_relaxed);
  }

  // An element read by every lane of `w` together (`want`: this lane
  // reads `key`'s page at `offset`): lanes whose page is valid read it with
  // read_hit, the rest through acquire (fetching, waiting, evicting). The
  // lane's status; invalid_argument where !want.
  template <class T, class Warp>
  DW_HD request_status read_element(const Warp& w, bool want, uint64_t key, uint32_t offset, T& out) const;

  // Starts fetching `key` if it is neither cached nor being fetched, and
  // returns without waiting. The fill is finished by the first thread that
  // touches the page, or by the clock. Best effort: gives up rather than
  // waits (no command id, no free slot).
  DW_HD void prefetch(uint64_t key, uint32_t qhint) const;

  // Drops the warp's pins (all lanes of pin.mask call it). `dirty`: some
  // lane wrote to its page.
  template <class Warp>
  DW_HD void release(const Warp& w, const warp_pin& p, bool dirty) const {
    const unsigned wrote = w.ballot(p.mask, dirty);  // also orders every lane's access before the unpin
    w.sync(p.mask);
    if (p.owner) unpin(p.slot, (wrote & p.peers) != 0);
  }

  // Adds `n` pins to a slot this thread already pinned (page handles give
  // every lane its own pin).
  DW_HD void add_pins(uint32_t s, uint32_t n) const {
    if (n) client_atomic<uint64_t>(state[s]).fetch_add(n, memory_order_relaxed);
  }

  // Drops one pin; `dirty` marks the page for write-back first.
  DW_HD void unpin(uint32_t s, bool dirty = false) const {
    client_atomic<uint64_t> st(state[s]);
    if (dirty) mark_dirty(s);
    st.fetch_sub(1, memory_order_release);
  }

  // The bytes of a slot this thread (or its warp) has pinned.
  DW_HD uint8_t* page_data(uint32_t s) const { return data + (uint64_t(s) << page_shift_); }

  // Records the first error (the host reads it after the kernel:
  // page_cache::last_error).
  DW_HD void set_error(request_status s) const {
    if (s.ok()) return;
    uint32_t expected = 0;
    client_atomic<uint32_t> e(*error_word);
    if (e.load(memory_order_relaxed) == 0) e.compare_exchange_strong(expected, s.pack(), memory_order_relaxed);
  }

  // Counts `n` element accesses of the calling warp (bulk copies count
  // theirs: acquire is told not to).
  template <class Warp>
  DW_HD void count_accesses(const Warp& w, uint64_t n) const {
    client_atomic<unsigned long long>(shard(w).accesses).fetch_add(n, memory_order_relaxed);
  }

  // ---- durability (detail/cache/persist.hpp; docs/durability.md) ----

  // Makes pages [first_page, last_page] of dataset ds durable: their dirty
  // pages are written back (write-backs already in flight are waited for),
  // then the dataset's namespace is flushed, one flush shared by every
  // persist waiting at the time (group commit). Returns once the bytes
  // written before the call are durable, or with the status that says why
  // not. Every lane of `w` calls it together; lanes may name different
  // ranges and datasets. Runs beside other accesses: a write racing the
  // persist may or may not be in it (the page stays dirty if not).
  template <class Warp>
  DW_HD request_status persist(const Warp& w, uint32_t ds, uint64_t first_page, uint64_t last_page) const;
  // persist of one range that every lane names, for a warp among many
  // persisting the distinct pieces of one large range (the host's persist):
  // each round's adjacent pages go through one queue (run_queue), so that
  // one poller writes them with one call. Not for kernels whose warps may
  // name the same pages (a log's, a program's own persists): there each
  // page goes through its slot's queue, and many warps never crowd one.
  template <class Warp>
  DW_HD request_status persist_run(const Warp& w, uint32_t ds, uint64_t first_page, uint64_t last_page) const;
  // persist for a page the lane has pinned (a page handle; `written`: the
  // lane wrote to it since its last mark); ~0u: none.
  template <class Warp>
  DW_HD request_status persist_pinned(const Warp& w, uint32_t s, bool written) const;
  // Every dirty page of the cache, then every writable dataset flushed.
  template <class Warp>
  DW_HD request_status persist_all(const Warp& w) const;
  // Starts the write-back of the dirty pages [first_page, last_page] of
  // dataset ds and returns once every write is submitted, not waiting for
  // them (they complete as orphans). A page written since its write-back
  // in flight began waits for that one first (one write-back of a page at
  // a time). Every lane of `w` calls it with the same arguments. Nothing is
  // flushed: the caller learns when the writes landed some other way (the
  // file API: the dataset's writeback_tally).
  template <class Warp>
  DW_HD request_status start_write_back(const Warp& w, uint32_t ds, uint64_t first_page, uint64_t last_page) const;

  // ---- the host owner's operations (page_cache runs them in its kernels
  // or CPU loops; no access may run meanwhile) ----

  // flush() on a warp: lanes take the slots [first, first + lanes) and
  // write back the dirty ones together, the warp copying each page to
  // staging with 16-byte loads and stores, every write in flight at once;
  // then each lane waits for its own. A write-back of a slot already in
  // flight is waited for first; a failed write leaves the page dirty; a
  // write still in flight at the deadline stays in flight (the page is
  // neither written again nor evicted until its completion arrives) and
  // the result is a timeout.
  template <class Warp>
  DW_HD request_status flush_warp(const Warp& w, uint32_t first) const;

  // flush() in the files' order: as flush_warp, each lane its own slot `s`
  // (where `pending`), and every write of the warp through one queue
  // (run_queue(run)), so that one poller takes the warp's pages together
  // and writes adjacent ones with one call. A warp given slots sorted by
  // key (dirty_key) writes a run of a file.
  template <class Warp>
  DW_HD request_status flush_slots_warp(const Warp& w, uint32_t s, bool pending, uint64_t run) const;
  // Whether slot s holds a valid dirty page, and its key. A hint for
  // ordering a flush (the slot may change after the look).
  DW_HD bool dirty_key(uint32_t s, uint64_t& key) const;

  // Finishes slot s's orphan I/O if it has one (it holds a command id):
  // a prefetch is copied in; a write-back is waited for until the deadline.
  DW_HD void finish_orphan(uint32_t s) const;

  // Empties slot s and its directory entry unless it is dirty (its
  // write-back failed: dropping it would lose data).
  DW_HD void drop_clean(uint32_t s) const;

 private:
  friend class page_cache;
  friend struct detail::cache_access;  // tests: detail/cache/access.hpp

  uint8_t* data = nullptr;  // slots x page_size
  slot_word* state = nullptr;
  uint64_t* slot_key = nullptr;
  uint32_t* slot_io = nullptr;  // orphan I/O: queue << 16 | cid; failed fill: the packed status
  uint32_t* io_slot = nullptr;  // [queue * io_stride + cid]: the slot whose orphan I/O holds that id
  uint32_t* orphans = nullptr;  // [queue]: orphan I/Os holding ids of that queue (a hint)
  unsigned long long* dirty_pages = nullptr;  // pages marked dirty and not yet being written back (a hint)
  detail::cache_directory dir;
  uint64_t* hints = nullptr;  // page hints (cache_layout.hpp: make_hint), [hint_position(key) & hint_mask]
  uint32_t hint_mask = 0;
  unsigned long long* clock = nullptr;
  uint32_t* error_word = nullptr;  // the first error any access met (packed request_status), 0 if none
  cache_stats_shard* stats = nullptr;
  const queue_ref* queues = nullptr;
  const dataset_desc* datasets = nullptr;
  persist_epoch* persists = nullptr;  // [dataset]: group commit of flushes
  uint32_t ndatasets = 0;             // the datasets array's length (unused entries have nsid 0)
  uint32_t nslots_ = 0;
  uint32_t page_size_ = 0;
  uint32_t page_shift_ = 0;
  uint32_t nqueues = 0;
  uint32_t io_stride = 0;
  uint32_t clean_above = 0;  // the cleaner runs while more pages than this are dirty (0: never)
  uint32_t clean_ahead = 0;  // how many slots ahead of the CLOCK hand it cleans
  // Always 0, but a kernel parameter the compiler cannot see: ANDed into
  // the state word's index after a pin-free read (zero_after_loads), it
  // makes that load wait for the data. A literal zero, even in inline asm,
  // was folded by ptxas, and the state word was read beside the data.
  uint32_t opaque_zero = 0;
  uint64_t timeout_ns = 0;

  DW_HD uint64_t deadline() const { return now_ns() + timeout_ns; }
  DW_HD cache_stats_shard& shard_of(uint32_t qhint) const { return stats[qhint % cache_stats_shards]; }
  DW_HD void note_use(uint32_t s, slot_word seen) const;
  // The hint entry `key` maps to (shared with the pages that map there too).
  DW_HD uint64_t& hint_of(uint64_t key) const { return hints[hint_position(key) & hint_mask]; }
  // read_seen's later reads: slot s's key and the data, then its state
  // word; true if s holds `key`, valid, at generation `gen`. (Not the
  // use bit: the first read set it.)
  template <class T>
  DW_HD bool read_slot(uint32_t s, uint64_t key, uint32_t offset, uint32_t gen, T& out) const;
  template <class Warp>
  DW_HD cache_stats_shard& shard(const Warp& w) const {
    return shard_of(w.queue_hint());
  }
  // Always an RMW with release, even when the page looks dirty already: a
  // persist running beside the writer may be clearing dirty to copy the
  // page, and a stale "already dirty" would leave this write in neither
  // its copy nor a later one. The RMWs on the state word are totally
  // ordered: either this one precedes the persist's clear (which acquires
  // it, so the copy holds the bytes) or it follows (the page stays dirty).
  DW_HD void mark_dirty(uint32_t s) const {
    client_atomic<uint64_t> st(state[s]);
    if (!(st.fetch_or(slot_state::dirty, memory_order_release) & slot_state::dirty))
      client_atomic<unsigned long long>(*dirty_pages).fetch_add(1, memory_order_relaxed);
  }

  // ---- the fill of a missing page (detail/cache/fill.hpp) ----
  enum step_t : uint32_t {
    step_done = 0,    // pinned (or nothing to do)
    step_probe = 1,   // look the key up; insert it if missing
    step_issue = 2,   // hold a slot for the key; need a command id to read it
    step_fill = 3,    // read submitted (has_io) or direct: copy in, publish
    step_wait = 4,    // pinned a slot another thread is filling
    step_failed = 5,  // status says why
  };
  struct fill_job;  // one leader's progress through those steps
  // The hit path: one lookup and one pin of `key`'s page where it is valid.
  DW_HD bool try_hit(uint64_t key, uint32_t& slot) const;
  // The rest of acquire, where some leader did not hit: fills, waits,
  // evictions. Leaders with `hit` already hold a pin of `slot`.
  template <class Warp>
  DW_HD DW_NOINLINE warp_pin acquire_rest(const Warp& w, bool want, uint64_t key, uint32_t accesses, uint32_t cover,
                                          const void* cover_src,
                                          warp_pin out, bool hit, uint32_t slot) const;
  template <class Warp>
  DW_HD warp_pin finish_acquire(const Warp& w, warp_pin out, bool want, uint32_t accesses, bool hit, uint32_t slot,
                                request_status status, bool owner) const;
  DW_HD static void phase_end(fill_job& j, int i);
  DW_HD uint32_t start_read(const queue_ref& q, uint16_t cid, uint64_t key, uint32_t qhint) const;
  DW_HD uint64_t page_lba(const dataset_desc& d, uint64_t key, uint32_t& nlb) const;
  DW_HD uint32_t page_bytes(uint64_t key) const;
  DW_HD bool probe(fill_job& j, cache_stats_shard& sh) const;
  DW_HD bool issue(fill_job& j) const;
  DW_HD void poll_io(fill_job& j, uint64_t dl) const;
  DW_HD void await_io(fill_job& j, uint64_t dl) const;
  DW_HD void io_done(fill_job& j, const wait_result& r) const;
  DW_HD void finish_fill(fill_job& j) const;
  DW_HD void fail_fill(fill_job& j, request_status why) const;
  DW_HD bool await_other(fill_job& j) const;
  DW_HD uint64_t adopt_io(fill_job& j, uint32_t s) const;
  DW_HD void give_up(fill_job& j) const;
  DW_HD void adopt_orphan(uint32_t s, uint32_t qhint) const;

  // ---- I/O left in flight: orphans (detail/cache/orphans.hpp) ----
  DW_HD bool take_orphan(uint32_t s) const;
  DW_HD void orphan_io(uint32_t s, uint32_t qi, uint16_t cid) const;
  DW_HD request_status get_cid(uint32_t qi, uint32_t qhint, uint16_t& cid, uint64_t dl) const;
  DW_HD uint32_t reap_queue(uint32_t qi, uint32_t qhint, uint32_t max) const;
  DW_HD bool settle_orphan(uint32_t s, uint32_t qhint) const;
  DW_HD bool finish_taken_orphan(uint32_t s, uint32_t qhint, uint64_t dl) const;

  // ---- write-back (detail/cache/writeback.hpp) ----
  DW_HD request_status start_writeback(uint32_t s, uint32_t qhint, uint64_t dl, bool evict_claim) const;
  DW_HD request_status begin_writeback(uint32_t s, uint32_t qhint, uint64_t dl, bool evict_claim, uint32_t& qi,
                                       uint16_t& cid) const;
  DW_HD uint32_t writeback_bytes(uint32_t s) const;
  DW_HD void submit_writeback(uint32_t s, uint32_t qi, uint16_t cid, bool evict_claim) const;
  DW_HD bool finish_writeback(uint32_t s, uint64_t dl, request_status* out) const;
  // qhint: the queue of every lane's write (each_slot_queue: each lane's
  // slot picks its own).
  static constexpr uint32_t each_slot_queue = ~0u;
  // The queue hint of a run of a warp's writes of adjacent pages: never
  // each_slot_queue, and runs next to each other on different queues.
  DW_HD static uint32_t run_queue(uint64_t run) { return uint32_t(run % each_slot_queue); }
  template <class Warp>
  DW_HD request_status write_back_warp(const Warp& w, unsigned mask, uint32_t s, bool pending, bool wait = true,
                                       uint32_t qhint = each_slot_queue) const;

  // ---- persist (detail/cache/persist.hpp) ----
  DW_HD uint32_t pin_cached(uint64_t key, uint64_t dl, request_status& r) const;
  DW_HD bool pin_for_persist(uint32_t s, uint64_t dl, request_status& r) const;
  DW_HD request_status run_flush(uint32_t ds, uint32_t qhint, uint64_t dl) const;
  DW_HD request_status group_flush(uint32_t ds, uint32_t qhint, uint64_t dl) const;
  template <class Warp>
  DW_HD request_status write_back_range(const Warp& w, unsigned mask, uint32_t ds, uint64_t first_page,
                                        uint64_t last_page, bool wait = true, bool runs = false) const;
  template <class Warp>
  DW_HD request_status end_persist(const Warp& w, unsigned mask, request_status r, uint32_t ds) const;

  // ---- CLOCK eviction and the cleaner (detail/cache/clock.hpp) ----
  DW_HD bool evict_claimed(uint32_t s, slot_word st_at_claim, uint32_t qhint) const;
  DW_HD void clean_ahead_of(uint64_t hand_pos, uint32_t qhint) const;
  DW_HD bool evict_from_bucket(uint32_t b, uint32_t qhint) const;
  DW_HD uint32_t claim_slot(uint32_t qhint) const;
};

}  // namespace deepwell

#include "deepwell/cache/detail/clock.hpp"
#include "deepwell/cache/detail/fill.hpp"
#include "deepwell/cache/detail/orphans.hpp"
#include "deepwell/cache/detail/persist.hpp"
#include "deepwell/cache/detail/writeback.hpp"
