// The page cache's device-side (and CPU-side) logic: a trivially copyable
// view, cache_ref, that kernels get by value (the cuCollections `ref`
// pattern). Written once for GPU warps and CPU threads.
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
#include <cstring>

#include "deepwell/cache_layout.hpp"
#include "deepwell/queue.hpp"
#include "deepwell/warp.hpp"

// A diagnostic, off unless a translation unit defines DW_CACHE_PHASE_TIMING
// to 1 before including this header (the gpu_array_bench_phases target): GPU
// fills through the controller add the nanoseconds they spend waiting for a
// command id, submitting (the SQ entry, its fence, the doorbell), waiting
// for the completion, and copying the page in (with the warp's other
// copies) to dw_fill_phase_ns[0..3]; [4] counts the fills.
#ifndef DW_CACHE_PHASE_TIMING
#define DW_CACHE_PHASE_TIMING 0
#endif
#if DW_CACHE_PHASE_TIMING && defined(__CUDACC__)
__device__ unsigned long long dw_fill_phase_ns[5];
#endif

namespace deepwell {

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

class cache_ref {
 public:
  uint8_t* data = nullptr;  // slots x page_size
  uint32_t* state = nullptr;
  uint64_t* slot_key = nullptr;
  uint32_t* slot_io = nullptr;  // orphan I/O: queue << 16 | cid; failed fill: the packed status
  uint32_t* io_slot = nullptr;  // [queue * io_stride + cid]: the slot whose orphan I/O holds that id
  uint32_t* orphans = nullptr;  // [queue]: orphan I/Os holding ids of that queue (a hint)
  unsigned long long* dirty_pages = nullptr;  // pages marked dirty and not yet being written back (a hint)
  uint64_t* dir_keys = nullptr;
  uint32_t* dir_slots = nullptr;
  uint32_t* dir_locks = nullptr;
  unsigned long long* clock = nullptr;
  uint32_t* error_word = nullptr;  // the first error any access met (packed request_status), 0 if none
  cache_stats_shard* stats = nullptr;
  const queue_ref* queues = nullptr;
  const dataset_desc* datasets = nullptr;
  uint32_t nslots = 0;
  uint32_t nbuckets = 0;
  uint32_t page_size = 0;
  uint32_t page_shift = 0;
  uint32_t nqueues = 0;
  uint32_t io_stride = 0;
  uint32_t clean_above = 0;  // the cleaner runs while more pages than this are dirty (0: never)
  uint32_t clean_ahead = 0;  // how many slots ahead of the CLOCK hand it cleans
  uint64_t timeout_ns = 0;

  DW_HD uint8_t* page_data(uint32_t s) const { return data + (uint64_t(s) << page_shift); }
  DW_HD uint64_t deadline() const { return now_ns() + timeout_ns; }

  // Records the first error (for the host to see after the kernel).
  DW_HD void set_error(request_status s) const {
    if (s.ok()) return;
    uint32_t expected = 0;
    client_atomic<uint32_t> e(*error_word);
    if (e.load(memory_order_relaxed) == 0) e.compare_exchange_strong(expected, s.pack(), memory_order_relaxed);
  }

  // ---- the warp-level acquire ----

  // Every lane of the calling warp (as `w` sees it) calls this together.
  // Lanes with `want` set get their page's slot pinned (one pin per
  // distinct page, owned by the lowest lane asking for it); the leaders
  // fetch missing pages in rounds, all of a round's reads in flight at
  // once, and the whole warp copies each fetched page in from staging (or
  // straight from host memory: the direct tier).
  template <class Warp>
  DW_HD warp_pin acquire(const Warp& w, bool want, uint64_t key, uint32_t accesses = 1) const {
    warp_pin out;
    out.mask = w.active();
    const unsigned lane = w.lane();
    const unsigned peers = w.match_any(out.mask, want ? key : empty_key);
    out.peers = peers;
    out.leader = lowest_lane(peers);
    const bool lead = want && lane == out.leader;
    const uint64_t dl = deadline();
    cache_stats_shard& sh = shard(w);
    fill_job job;
    job.key = key;
    job.qhint = w.queue_hint();
    job.step = lead ? step_probe : step_done;
    for (uint32_t round = 0;; ++round) {
      bool progress = false;
      if (job.step == step_probe) progress |= probe(job, sh);
      if (job.step == step_issue) progress |= issue(job);
      // The warp copies each page in as soon as its read completes, so that
      // command ids (the in-flight budget) go back early.
      for (uint32_t spin = 0;; ++spin) {
        if (job.step == step_fill && job.has_io && !job.src) poll_io(job, dl);
        w.sync(out.mask);
        unsigned fills = w.ballot(out.mask, job.step == step_fill && job.src);
        const bool any = fills != 0;
        while (fills) {
          const unsigned f = lowest_lane(fills);
          fills &= fills - 1;
          const uint32_t s = w.shfl(out.mask, job.slot, f);
          const uint8_t* src = reinterpret_cast<const uint8_t*>(shfl64(w, out.mask, uint64_t(job.src), f));
          const uint32_t bytes = w.shfl(out.mask, job.bytes, f);
          copy_in(w, out.mask, page_data(s), src, bytes);
          w.sync(out.mask);
          if (lane == f) finish_fill(job);
        }
        if (!w.ballot(out.mask, job.step == step_fill)) break;
        progress |= any;
        if (!any) backoff(spin);
      }
      // Pages other threads are fetching (this warp holds no command id now).
      if (job.step == step_wait) progress |= await_other(job);
      const bool pending = job.step == step_probe || job.step == step_issue || job.step == step_wait;
      if (pending && now_ns() > dl) give_up(job);
      if (!w.ballot(out.mask, job.step != step_done && job.step != step_failed)) break;
      if (!progress) backoff(round);
    }
    // Accesses and hits are counted once per warp, not once per leader: in a
    // random all-hit pattern every lane leads, and 64 atomics on one
    // statistics line per warp access cost more than the lookups.
    const unsigned wanted = w.ballot(out.mask, want);
    const unsigned hits = w.ballot(out.mask, lead && job.hit);
    if (lane == lowest_lane(out.mask)) {
      if (wanted && accesses)
        client_atomic<unsigned long long>(sh.accesses).fetch_add(uint64_t(accesses) * popcount32(wanted), memory_order_relaxed);
      if (hits) client_atomic<unsigned long long>(sh.hits).fetch_add(popcount32(hits), memory_order_relaxed);
    }
    out.slot = w.shfl(out.mask, job.slot, out.leader);
    out.status = request_status::unpack(w.shfl(out.mask, job.status.pack(), out.leader));
    out.owner = lead && job.step == step_done;
    if (!want) out.status = request_status::client(client_code::invalid_argument);
    // The leader's acquire (pin or fill) ordered the page's data; the lanes
    // that read it are ordered after it by this barrier.
    w.sync(out.mask);
    return out;
  }

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
    if (n) client_atomic<uint32_t>(state[s]).fetch_add(n, memory_order_relaxed);
  }

  // Drops one pin; `dirty` marks the page for write-back first.
  DW_HD void unpin(uint32_t s, bool dirty = false) const {
    client_atomic<uint32_t> st(state[s]);
    if (dirty) mark_dirty(s);
    st.fetch_sub(1, memory_order_release);
  }

  DW_HD void mark_dirty(uint32_t s) const {
    client_atomic<uint32_t> st(state[s]);
    if (st.load(memory_order_relaxed) & slot_state::dirty) return;
    if (!(st.fetch_or(slot_state::dirty, memory_order_relaxed) & slot_state::dirty))
      client_atomic<unsigned long long>(*dirty_pages).fetch_add(1, memory_order_relaxed);
  }

  // ---- prefetch ----

  // Starts fetching `key` if it is neither cached nor being fetched, and
  // returns without waiting. The fill is finished by the first thread that
  // touches the page, or by the clock. Best effort: gives up rather than
  // waits (no command id, no free slot).
  DW_HD void prefetch(uint64_t key, uint32_t qhint) const {
    const dataset_desc& d = datasets[key_dataset(key)];
    if (d.direct) return;  // the direct tier has no I/O latency to hide
    const uint32_t b = bucket_of(key);
    if (dir_find(key, b) >= 0) return;
    const dir_insert_result ins = dir_insert(key, b);
    if (!ins.inserted) return;
    uint32_t s = claim_slot(qhint);
    if (s == ~0u) {
      dir_remove(key, dir_pending);
      return;
    }
    client_atomic<uint64_t>(slot_key[s]).store(key, memory_order_relaxed);
    client_atomic<uint32_t>(dir_slots[ins.entry]).store(s, memory_order_release);
    const uint32_t qi = qhint % nqueues;
    const queue_ref& q = queues[qi];
    uint16_t cid;
    if (!q.try_acquire_cid(cid)) {
      // Without a command id there is nothing to start: hand the slot back.
      dir_remove(key, s);
      client_atomic<uint32_t>(state[s]).fetch_sub(slot_state::busy + 1, memory_order_release);
      return;
    }
    client_atomic<unsigned long long>(shard_of(qhint).misses).fetch_add(1, memory_order_relaxed);
    start_read(q, cid, key, qhint);
    orphan_io(s, qi, cid);
    client_atomic<uint32_t>(state[s]).fetch_add(slot_state::orphan - 1, memory_order_release);  // unpin, orphaned
  }

  // ---- write-back ----

  // The caller owns slot s for a write-back: either it set `evict` on an
  // unpinned, valid, dirty slot with its CAS (evictors and the cleaner:
  // nobody can write the page during the copy), or it set `writeback` on a
  // valid dirty slot (flush, with no access running). Copies the page to
  // staging and submits its write; the slot goes on (evict cleared, dirty
  // cleared, writeback | orphan set) until finish_writeback sees the
  // completion. dl: how long to wait for a command id (0: take one only if
  // free now, finishing done orphans of the queue first). On failure to get
  // one the slot is handed back as it was.
  DW_HD request_status start_writeback(uint32_t s, uint32_t qhint, uint64_t dl, bool evict_claim) const {
    uint32_t qi;
    uint16_t cid;
    const request_status a = begin_writeback(s, qhint, dl, evict_claim, qi, cid);
    if (!a.ok()) return a;
    copy_out(queues[qi].buffer(cid), page_data(s), writeback_bytes(s));
    submit_writeback(s, qi, cid, evict_claim);
    return {};
  }

  // start_writeback in three steps, so that a warp can copy its lanes'
  // pages together between the first and the last: a command id (the slot
  // handed back without one), then the caller copies writeback_bytes(s) of
  // the page to queues[qi].buffer(cid), then the write is submitted.
  DW_HD request_status begin_writeback(uint32_t s, uint32_t qhint, uint64_t dl, bool evict_claim, uint32_t& qi,
                                       uint16_t& cid) const {
    client_atomic<uint32_t> st(state[s]);
    qi = qhint % nqueues;
    const request_status a = get_cid(qi, qhint, cid, dl);
    if (!a.ok()) {
      st.fetch_and(~(evict_claim ? slot_state::evict : slot_state::writeback), memory_order_release);
      return a;
    }
    // dirty is cleared before the copy: a writer that raced a flush marks
    // the page dirty again.
    st.fetch_and(~slot_state::dirty, memory_order_acq_rel);
    client_atomic<unsigned long long>(*dirty_pages).fetch_sub(1, memory_order_relaxed);
    return {};
  }

  DW_HD uint32_t writeback_bytes(uint32_t s) const {
    return page_bytes(client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed));
  }

  DW_HD void submit_writeback(uint32_t s, uint32_t qi, uint16_t cid, bool evict_claim) const {
    const queue_ref& q = queues[qi];
    const uint64_t key = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed);
    const dataset_desc& d = datasets[key_dataset(key)];
    uint32_t nlb;
    const uint64_t lba = page_lba(d, key, nlb);
    q.submit(cid, nvme::make_write(d.nsid, lba, nlb, q.buffer_offset(cid)));
    orphan_io(s, qi, cid);
    client_atomic<uint32_t> st(state[s]);
    if (evict_claim)
      st.fetch_add(slot_state::writeback + slot_state::orphan - slot_state::evict, memory_order_release);
    else
      st.fetch_or(slot_state::orphan, memory_order_release);
  }

  // flush() on a warp: lanes take the slots [first, first + lanes) and
  // write back the dirty ones together, the warp copying each page to
  // staging with 16-byte loads and stores, every write in flight at once;
  // then each lane waits for its own. A write-back of a slot already in
  // flight is waited for first; a failed write leaves the page dirty; a
  // write still in flight at the deadline stays in flight (the page is
  // neither written again nor evicted until its completion arrives) and
  // the result is a timeout.
  template <class Warp>
  DW_HD request_status flush_warp(const Warp& w, uint32_t first) const {
    const unsigned mask = w.active();
    const unsigned lane = w.lane();
    const uint32_t s = first + popcount32(mask & ((1u << lane) - 1));
    const uint64_t dl = deadline();
    request_status r{};
    bool pending = s < nslots;  // this lane's slot may still need writing
    // In rounds: lanes take a command id only if one is free now (never
    // waiting for one while another lane of the warp holds one: many warps
    // flushing at once would otherwise wait on each other's ids); lanes left
    // without one try again once the round's writes have completed.
    for (uint32_t round = 0;; ++round) {
      bool claimed = false;
      uint32_t qi = 0;
      uint16_t cid = 0;
      if (pending) {
        client_atomic<uint32_t> st(state[s]);
        for (uint32_t i = 0;; ++i) {
          uint32_t v = st.load(memory_order_acquire);
          if (v & slot_state::writeback) {  // a write-back in flight: it comes first
            if ((v & slot_state::orphan) && take_orphan(s)) {
              request_status e;
              if (!finish_writeback(s, dl, &e)) {
                r = request_status::client(client_code::timeout);
                pending = false;
                break;
              }
              if (!e.ok()) r = e;  // reported; the page is dirty again and written once more below
              continue;
            }
          } else if (!(v & slot_state::valid) || (v & (slot_state::busy | slot_state::error)) ||
                     !(v & slot_state::dirty)) {
            pending = false;  // nothing (more) to write
            break;
          } else if (!(v & slot_state::evict) &&
                     st.compare_exchange_strong(v, v | slot_state::writeback, memory_order_acquire)) {
            const request_status a = begin_writeback(s, s, 0, false, qi, cid);
            if (a.ok()) {
              claimed = true;
              pending = false;
            } else if (a.code != client_code::cache_exhausted || now_ns() > dl) {
              r = a.code == client_code::cache_exhausted ? request_status::client(client_code::timeout) : a;
              pending = false;
            }  // else: no free id now (the slot was handed back): next round
            break;
          }
          if (now_ns() > dl) {
            r = request_status::client(client_code::timeout);
            pending = false;
            break;
          }
          backoff(i);
        }
      }
      unsigned todo = w.ballot(mask, claimed);
      const bool any = todo != 0;
      while (todo) {
        const unsigned l = lowest_lane(todo);
        todo &= todo - 1;
        const uint32_t ls = w.shfl(mask, s, l);
        const uint32_t lq = w.shfl(mask, qi, l);
        const uint32_t lc = w.shfl(mask, uint32_t(cid), l);
        const uint32_t bytes = writeback_bytes(ls);
        copy_out_warp(w, mask, queues[lq].buffer(uint16_t(lc)), page_data(ls), bytes);
      }
      w.sync(mask);
      if (claimed) {
        submit_writeback(s, qi, cid, false);
        if (take_orphan(s)) {
          request_status e;
          if (!finish_writeback(s, dl, &e))
            r = request_status::client(client_code::timeout);
          else if (!e.ok())
            r = e;
          else if (!r.ok() && !(client_atomic<uint32_t>(state[s]).load(memory_order_acquire) & slot_state::dirty))
            r = {};  // an earlier failed write-back, now written
        }
      }
      if (!w.ballot(mask, pending)) break;
      if (!any) backoff(round);  // ids are held by other warps: let their writes complete
    }
    return r;
  }

  // All lanes of mask copy `bytes` (a multiple of 16) from a page to staging.
  template <class Warp>
  DW_HD static void copy_out_warp(const Warp& w, unsigned mask, uint8_t* dst, const uint8_t* src, uint32_t bytes) {
    const unsigned n = popcount32(mask);
    const unsigned rank = popcount32(mask & ((1u << w.lane()) - 1));
#if DW_DEVICE_CODE
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (uint32_t i = rank; i < bytes / 16; i += n) d[i] = s[i];
#else
    const uint32_t chunk = (bytes / 16 + n - 1) / n * 16;
    const uint32_t from = rank * chunk;
    if (from < bytes) std::memcpy(dst + from, src + from, bytes - from < chunk ? bytes - from : chunk);
#endif
  }

  // After take_orphan(s) on a slot whose write-back is in flight: finishes
  // it once its completion has arrived, looking until dl (0: look once).
  // False (the write stays in flight, orphaned again) if it has not. A
  // failed write leaves the page dirty and is recorded in the error flag.
  DW_HD bool finish_writeback(uint32_t s, uint64_t dl, request_status* out) const {
    client_atomic<uint32_t> st(state[s]);
    const uint32_t io = client_atomic<uint32_t>(slot_io[s]).load(memory_order_relaxed);
    const uint32_t qi = io >> 16;
    const uint16_t cid = uint16_t(io & 0xFFFF);
    const queue_ref& q = queues[qi];
    wait_result r;
    for (uint32_t i = 0; !q.try_wait_keep(cid, r); ++i) {
      if (dl == 0 || now_ns() > dl) {
        st.fetch_or(slot_state::orphan, memory_order_release);
        return false;
      }
      backoff(i);
    }
    client_atomic<uint32_t>(orphans[qi]).fetch_sub(1, memory_order_relaxed);
    if (r.status.code != client_code::controller_lost) q.release_cid(cid);
    cache_stats_shard& sh = shard_of(s);
    if (r.status.ok()) {
      client_atomic<unsigned long long>(sh.writebacks).fetch_add(1, memory_order_relaxed);
      client_atomic<unsigned long long>(sh.bytes_written).fetch_add(writeback_bytes(s), memory_order_relaxed);
    } else {
      client_atomic<unsigned long long>(sh.errors).fetch_add(1, memory_order_relaxed);
      set_error(r.status);
      mark_dirty(s);  // not written: write it again later
    }
    st.fetch_and(~slot_state::writeback, memory_order_release);
    if (out) *out = r.status;
    return true;
  }

  // ---- internals (public so that tests and the host owner can use them) ----

  enum step_t : uint32_t {
    step_done = 0,    // pinned (or nothing to do)
    step_probe = 1,   // look the key up; insert it if missing
    step_issue = 2,   // hold a slot for the key; need a command id to read it
    step_fill = 3,    // read submitted (has_io) or direct: copy in, publish
    step_wait = 4,    // pinned a slot another thread is filling
    step_failed = 5,  // status says why
  };

  struct fill_job {
    uint64_t key = empty_key;
    uint32_t step = step_done;
    uint32_t slot = ~0u;
    uint32_t qhint = 0;
    uint32_t queue = 0;
    uint16_t cid = 0;
    bool has_io = false;
    bool mine = true;  // the slot's key is the one asked for (false: an adopted orphan of another key)
    bool hit = false;   // found valid by probe (counted once per warp by acquire)
    const uint8_t* src = nullptr;
    uint32_t bytes = 0;
    request_status status{};
#if DW_CACHE_PHASE_TIMING
    uint64_t t_phase = 0;  // when the current phase of a controller fill began
#endif
  };

  // Ends phase i of a controller fill (DW_CACHE_PHASE_TIMING): adds its
  // length and starts the next.
  DW_HD static void phase_end(fill_job& j, int i) {
#if DW_CACHE_PHASE_TIMING && DW_DEVICE_CODE
    const uint64_t t = now_ns();
    atomicAdd(&dw_fill_phase_ns[i], (unsigned long long)(t - j.t_phase));
    if (i == 3) atomicAdd(&dw_fill_phase_ns[4], 1ull);
    j.t_phase = t;
#else
    (void)j, (void)i;
#endif
  }

  DW_HD static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
  }
  DW_HD uint32_t bucket_of(uint64_t key) const { return uint32_t(mix64(key)) & (nbuckets - 1); }

  DW_HD cache_stats_shard& shard_of(uint32_t qhint) const { return stats[qhint % cache_stats_shards]; }
  template <class Warp>
  DW_HD cache_stats_shard& shard(const Warp& w) const {
    return shard_of(w.queue_hint());
  }

  // Submits the read of `key`'s page into cid's staging buffer; returns the
  // bytes it reads (the last page of a dataset may be short).
  DW_HD uint32_t start_read(const queue_ref& q, uint16_t cid, uint64_t key, uint32_t qhint) const {
    const dataset_desc& d = datasets[key_dataset(key)];
    uint32_t nlb;
    const uint64_t lba = page_lba(d, key, nlb);
    q.submit(cid, nvme::make_read(d.nsid, lba, nlb, q.buffer_offset(cid)));
    const uint32_t bytes = nlb * d.block_size;
    client_atomic<unsigned long long>(shard_of(qhint).bytes_read).fetch_add(bytes, memory_order_relaxed);
    return bytes;
  }

  // The first LBA of the page of `key` and its block count (the last page
  // of a dataset may hold fewer blocks).
  DW_HD uint64_t page_lba(const dataset_desc& d, uint64_t key, uint32_t& nlb) const {
    const uint64_t lba = key_page(key) * d.blocks_per_page;
    const uint64_t left = d.blocks - lba;
    nlb = left < d.blocks_per_page ? uint32_t(left) : d.blocks_per_page;
    return lba;
  }

  // The bytes of `key`'s page that are part of its dataset.
  DW_HD uint32_t page_bytes(uint64_t key) const {
    const dataset_desc& d = datasets[key_dataset(key)];
    uint32_t nlb;
    (void)page_lba(d, key, nlb);
    return nlb * d.block_size;
  }

  // Inserts fill a bucket from its first way, so the scan stops at the
  // first match (measured on an H100: faster than loading all 16 keys, or
  // the first four, together). Relaxed is enough: a lookup is a hint,
  // checked against the slot's own state and key after pinning it.
  DW_HD int64_t dir_find(uint64_t key, uint32_t b) const {
    const uint64_t base = uint64_t(b) * dir_ways;
    for (uint32_t w = 0; w < dir_ways; ++w)
      if (client_atomic<uint64_t>(dir_keys[base + w]).load(memory_order_relaxed) == key) return int64_t(base + w);
    return -1;
  }

  DW_HD void lock_bucket(uint32_t b) const {
    client_atomic<uint32_t> l(dir_locks[b]);
    for (uint32_t i = 0;; ++i) {
      uint32_t expected = 0;
      if (l.load(memory_order_relaxed) == 0 && l.compare_exchange_strong(expected, 1, memory_order_acquire)) return;
      backoff(i);  // holders only scan one bucket: the wait is short
    }
  }
  DW_HD void unlock_bucket(uint32_t b) const { client_atomic<uint32_t>(dir_locks[b]).store(0, memory_order_release); }

  struct dir_insert_result {
    int64_t entry = -1;
    bool inserted = false;
    bool full = false;
  };

  // Reserves an entry for `key` (slot pending) unless the key is there.
  DW_HD dir_insert_result dir_insert(uint64_t key, uint32_t b) const {
    dir_insert_result r;
    lock_bucket(b);
    r.entry = dir_find(key, b);
    if (r.entry < 0) {
      const uint64_t base = uint64_t(b) * dir_ways;
      for (uint32_t w = 0; w < dir_ways; ++w) {
        client_atomic<uint64_t> k(dir_keys[base + w]);
        if (k.load(memory_order_relaxed) == empty_key) {
          client_atomic<uint32_t>(dir_slots[base + w]).store(dir_pending, memory_order_relaxed);
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
  DW_HD void dir_remove(uint64_t key, uint32_t slot) const {
    const uint32_t b = bucket_of(key);
    const uint64_t base = uint64_t(b) * dir_ways;
    lock_bucket(b);
    for (uint32_t w = 0; w < dir_ways; ++w) {
      client_atomic<uint64_t> k(dir_keys[base + w]);
      if (k.load(memory_order_relaxed) == key &&
          client_atomic<uint32_t>(dir_slots[base + w]).load(memory_order_relaxed) == slot) {
        k.store(empty_key, memory_order_release);
        break;
      }
    }
    unlock_bucket(b);
  }

  // One lookup of the leader's key; on a miss, inserts it, claims a slot
  // and starts the fetch. Bounded work: returns with step_probe to try
  // again next round. True if it changed the step.
  DW_HD bool probe(fill_job& j, cache_stats_shard& sh) const {
    const uint32_t b = bucket_of(j.key);
    for (uint32_t i = 0; i < 8; ++i) {
      const int64_t e = dir_find(j.key, b);
      if (e >= 0) {
        const uint32_t s = client_atomic<uint32_t>(dir_slots[e]).load(memory_order_acquire);
        if (s == dir_pending) return false;  // its inserter is claiming a slot
        client_atomic<uint32_t> st(state[s]);
        const uint32_t old = st.fetch_add(1, memory_order_acq_rel);
        if ((old & slot_state::valid) && !(old & slot_state::evict)) {
          if (client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed) == j.key) {
            if (!(old & slot_state::use)) st.fetch_or(slot_state::use, memory_order_relaxed);
            j.hit = true;
            j.slot = s;
            j.step = step_done;
            return true;
          }
        } else if ((old & slot_state::busy) && !(old & slot_state::evict)) {
          client_atomic<unsigned long long>(sh.waits).fetch_add(1, memory_order_relaxed);
          j.slot = s;
          j.step = step_wait;
          return true;
        }
        st.fetch_sub(1, memory_order_release);  // evicting, failed, free, or reused for another key
        return false;
      }
      const dir_insert_result ins = dir_insert(j.key, b);
      if (ins.full) {
        if (!evict_from_bucket(b, j.qhint)) return false;
        continue;
      }
      if (!ins.inserted) continue;  // another thread inserted it meanwhile: look again
      const uint32_t s = claim_slot(j.qhint);
      if (s == ~0u) {
        dir_remove(j.key, dir_pending);
        return false;
      }
      client_atomic<uint64_t>(slot_key[s]).store(j.key, memory_order_relaxed);
      client_atomic<uint32_t>(dir_slots[ins.entry]).store(s, memory_order_release);
      j.slot = s;
      j.mine = true;
      const dataset_desc& d = datasets[key_dataset(j.key)];
      const uint64_t off = key_page(j.key) << page_shift;
      client_atomic<unsigned long long>(sh.misses).fetch_add(1, memory_order_relaxed);
      if (d.direct) {
        const uint64_t left = d.bytes - off;
        j.bytes = left < page_size ? uint32_t(left) : page_size;
        j.src = d.direct + off;
        j.has_io = false;
        j.step = step_fill;
        client_atomic<unsigned long long>(sh.direct_fills).fetch_add(1, memory_order_relaxed);
        client_atomic<unsigned long long>(sh.bytes_read).fetch_add(j.bytes, memory_order_relaxed);
        return true;
      }
      j.step = step_issue;
#if DW_CACHE_PHASE_TIMING
      j.t_phase = now_ns();
#endif
      return true;
    }
    return false;
  }

  // Reads the leader's page into staging if a command id is free now.
  DW_HD bool issue(fill_job& j) const {
    j.queue = j.qhint % nqueues;
    const queue_ref& q = queues[j.queue];
    uint16_t cid;
    const request_status a = get_cid(j.queue, j.qhint, cid, 0);
    if (!a.ok()) {
      if (a.code == client_code::controller_lost) {  // ids of commands sent after a stop never come back
        fail_fill(j, a);
        return true;
      }
      return false;
    }
    j.cid = cid;
    j.has_io = true;
    j.src = nullptr;  // set once the read completes
    phase_end(j, 0);  // waited for a command id
    j.bytes = start_read(q, cid, j.key, j.qhint);
    phase_end(j, 1);  // submitted
    j.step = step_fill;
    return true;
  }

  // Checks once whether the leader's read completed: sets src (the staging
  // buffer) when it did, fails the fill when it failed.
  DW_HD void poll_io(fill_job& j, uint64_t dl) const {
    wait_result r;
    if (queues[j.queue].try_wait(j.cid, dl, r)) io_done(j, r);
  }

  // Waits for the leader's read (single thread).
  DW_HD void await_io(fill_job& j, uint64_t dl) const { io_done(j, queues[j.queue].wait(j.cid, dl)); }

  // The read's outcome. On failure the fill fails (the slot is marked
  // failed and leaves the directory).
  DW_HD void io_done(fill_job& j, const wait_result& r) const {
    const queue_ref& q = queues[j.queue];
    if (r.status.code == client_code::timeout || r.status.code == client_code::controller_lost) {
      j.has_io = false;  // the id is abandoned: the poller frees it when its completion arrives
      fail_fill(j, r.status);
      return;
    }
    if (!r.status.ok()) {
      q.release_cid(j.cid);
      j.has_io = false;
      fail_fill(j, r.status);
      return;
    }
    j.src = q.buffer(j.cid);
    phase_end(j, 2);  // the controller served it, and the completion was seen
  }

  // After the warp copied the page in: publish it, free the command id.
  DW_HD void finish_fill(fill_job& j) const {
    if (j.has_io) {
      phase_end(j, 3);  // copied in from staging
      queues[j.queue].release_cid(j.cid);
      j.has_io = false;
    }
    // One release RMW: whoever sees `valid` sees the data. busy is set and
    // valid and use are clear here, so the sum changes just those bits.
    client_atomic<uint32_t> st(state[j.slot]);
    st.fetch_add(slot_state::valid + slot_state::use - slot_state::busy, memory_order_release);
    if (j.mine) {
      j.step = step_done;
    } else {  // an adopted orphan of another page: done with it, look for ours
      st.fetch_sub(1, memory_order_release);
      j.slot = ~0u;
      j.step = step_probe;
    }
  }

  DW_HD void fail_fill(fill_job& j, request_status why) const {
    client_atomic<unsigned long long>(shard_of(j.qhint).errors).fetch_add(1, memory_order_relaxed);
    const uint64_t k = client_atomic<uint64_t>(slot_key[j.slot]).load(memory_order_relaxed);
    dir_remove(k, j.slot);
    client_atomic<uint32_t>(slot_io[j.slot]).store(why.pack(), memory_order_relaxed);
    // error set, busy cleared, the filler's pin dropped: one release RMW, so
    // a waiter that sees `error` also sees the status in slot_io.
    client_atomic<uint32_t>(state[j.slot]).fetch_add(slot_state::error - slot_state::busy - 1, memory_order_release);
    j.slot = ~0u;
    if (j.mine) {
      j.status = why;
      j.step = step_failed;
    } else {
      j.step = step_probe;
    }
  }

  // The leader pinned a slot another thread is filling: wait (bounded per
  // round) until it is valid or failed, then check it holds our key.
  DW_HD bool await_other(fill_job& j) const {
    client_atomic<uint32_t> st(state[j.slot]);
    for (uint32_t i = 0; i < 256; ++i) {
      const uint32_t v = st.load(memory_order_acquire);
      if (v & slot_state::valid) {
        if (client_atomic<uint64_t>(slot_key[j.slot]).load(memory_order_relaxed) == j.key) {
          j.step = step_done;
        } else {
          st.fetch_sub(1, memory_order_release);
          j.slot = ~0u;
          j.step = step_probe;
        }
        return true;
      }
      if ((v & slot_state::error) || !(v & slot_state::busy)) {
        if ((v & slot_state::error) &&
            client_atomic<uint64_t>(slot_key[j.slot]).load(memory_order_relaxed) == j.key) {
          j.status = request_status::unpack(client_atomic<uint32_t>(slot_io[j.slot]).load(memory_order_relaxed));
          j.step = step_failed;
        } else {
          j.step = step_probe;  // abandoned (a prefetch without an id) or reused for another key
        }
        st.fetch_sub(1, memory_order_release);
        j.slot = ~0u;
        return true;
      }
      if ((v & slot_state::orphan) && take_orphan(j.slot)) {
        // Its reader left after submitting: finish its fill ourselves
        // (awaited and copied next round).
        j.mine = adopt_io(j, j.slot) == j.key;
        return true;
      }
      spin_pause();
    }
    return false;
  }

  DW_HD bool take_orphan(uint32_t s) const {
    return client_atomic<uint32_t>(state[s]).fetch_and(~slot_state::orphan, memory_order_acq_rel) & slot_state::orphan;
  }

  // After take_orphan(s): makes j the filler of the orphan's read (its
  // queue and command id are in slot_io). Returns the slot's key.
  DW_HD uint64_t adopt_io(fill_job& j, uint32_t s) const {
    const uint32_t io = client_atomic<uint32_t>(slot_io[s]).load(memory_order_relaxed);
    client_atomic<uint32_t>(orphans[io >> 16]).fetch_sub(1, memory_order_relaxed);
    const uint64_t k = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed);
    j.slot = s;
    j.queue = io >> 16;
    j.cid = uint16_t(io & 0xFFFF);
    j.has_io = true;
    j.src = nullptr;
    j.bytes = page_bytes(k);
    j.step = step_fill;
    return k;
  }

  // Ends a leader's job at its deadline.
  DW_HD void give_up(fill_job& j) const {
    if (j.step == step_issue) {
      fail_fill(j, request_status::client(client_code::timeout));  // our own key: ends failed with this status
      return;
    }
    if (j.step == step_wait) {
      client_atomic<uint32_t>(state[j.slot]).fetch_sub(1, memory_order_release);
      j.slot = ~0u;
      j.status = request_status::client(client_code::timeout);
    } else {
      j.status = request_status::client(client_code::cache_exhausted);
    }
    j.step = step_failed;
  }

  // Copies a page's `bytes` into a slot, all lanes of `mask` together, and
  // zeroes the rest of the page.
  template <class Warp>
  DW_HD void copy_in(const Warp& w, unsigned mask, uint8_t* dst, const uint8_t* src, uint32_t bytes) const {
    const unsigned n = popcount32(mask);
    const unsigned rank = popcount32(mask & ((1u << w.lane()) - 1));
#if DW_DEVICE_CODE
    // 16-byte loads that skip L1 (the staging buffer is reused).
    // All of a lane's loads of a batch are issued before its stores, so a
    // page crosses the host link in one round trip, not one per chunk.
    constexpr uint32_t batch = 8;
    const uint32_t vec = bytes / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (uint32_t base = rank; base < vec; base += n * batch) {
      uint4 r[batch];
#pragma unroll
      for (uint32_t k = 0; k < batch; ++k)
        if (base + k * n < vec) r[k] = __ldcv(s + base + k * n);
#pragma unroll
      for (uint32_t k = 0; k < batch; ++k)
        if (base + k * n < vec) d[base + k * n] = r[k];
    }
    if (bytes < page_size)  // the last page of a dataset: the rest is zeros
      for (uint32_t i = vec * 16 + rank; i < page_size; i += n) dst[i] = i < bytes ? src[i] : uint8_t(0);
#else
    if (n == 1) {
      std::memcpy(dst, src, bytes);
      std::memset(dst + bytes, 0, page_size - bytes);
      return;
    }
    for (uint32_t i = rank * 16; i < page_size; i += n * 16) {
      const uint32_t len = 16;
      if (i + len <= bytes) {
        std::memcpy(dst + i, src + i, len);
      } else {
        for (uint32_t k = 0; k < len; ++k) dst[i + k] = i + k < bytes ? src[i + k] : 0;
      }
    }
#endif
  }

  // Copies a page to staging (single thread): 16-byte words, a batch of
  // loads before their stores.
  DW_HD static void copy_out(uint8_t* dst_bytes, const uint8_t* src_bytes, uint32_t bytes) {
#if DW_DEVICE_CODE
    const uint4* src = reinterpret_cast<const uint4*>(src_bytes);
    uint4* dst = reinterpret_cast<uint4*>(dst_bytes);
    for (uint32_t i = 0; i < bytes / 16; i += 8) {
      uint4 r[8];
#pragma unroll
      for (uint32_t k = 0; k < 8; ++k)
        if (i + k < bytes / 16) r[k] = src[i + k];
#pragma unroll
      for (uint32_t k = 0; k < 8; ++k)
        if (i + k < bytes / 16) dst[i + k] = r[k];
    }
#else
    std::memcpy(dst_bytes, src_bytes, bytes);
#endif
  }

  // Records that slot s's I/O on (qi, cid) is left in flight. The caller
  // then sets `orphan` with a release RMW (which publishes these).
  DW_HD void orphan_io(uint32_t s, uint32_t qi, uint16_t cid) const {
    client_atomic<uint32_t>(slot_io[s]).store(qi << 16 | cid, memory_order_relaxed);
    client_atomic<uint32_t>(io_slot[uint64_t(qi) * io_stride + cid]).store(s, memory_order_relaxed);
    client_atomic<uint32_t>(orphans[qi]).fetch_add(1, memory_order_relaxed);
  }

  // A command id of queue qi: a free one, else one freed by finishing the
  // completed orphans of the queue, else (dl != 0) whichever comes back
  // before dl. cache_exhausted (dl == 0) or timeout when none came;
  // controller_lost once the queue stopped.
  DW_HD request_status get_cid(uint32_t qi, uint32_t qhint, uint16_t& cid, uint64_t dl) const {
    const queue_ref& q = queues[qi];
    for (uint32_t i = 0;; ++i) {
      if (q.try_acquire_cid(cid)) return {};
      q.try_poll();  // completions of others free ids
      if (reap_queue(qi, qhint, 4) && q.try_acquire_cid(cid)) return {};
      if (q.lost()) return request_status::client(client_code::controller_lost);
      if (dl == 0) return request_status::client(client_code::cache_exhausted);
      if (now_ns() > dl) return request_status::client(client_code::timeout);
      backoff(i);
    }
  }

  // Finishes up to `max` orphans of queue qi whose completions have arrived
  // (prefetch reads are copied in, write-backs settled), so that their
  // command ids go back: unread prefetches and write-backs nobody waits for
  // must never make a demand miss wait. Returns how many it finished.
  DW_HD uint32_t reap_queue(uint32_t qi, uint32_t qhint, uint32_t max) const {
    if (client_atomic<uint32_t>(orphans[qi]).load(memory_order_relaxed) == 0) return 0;
    const queue_ref& q = queues[qi];
    uint32_t n = 0;
    const uint32_t start = qhint % q.depth;
    for (uint32_t k = 0; k < q.depth && n < max; ++k) {
      const uint16_t cid = uint16_t((start + k) % q.depth);
      if (!q.is_done(cid)) continue;
      const uint32_t s = client_atomic<uint32_t>(io_slot[uint64_t(qi) * io_stride + cid]).load(memory_order_relaxed);
      if (s >= nslots) continue;
      const uint32_t expect = qi << 16 | cid;
      const uint32_t v = client_atomic<uint32_t>(state[s]).load(memory_order_acquire);
      if (!(v & slot_state::orphan) || client_atomic<uint32_t>(slot_io[s]).load(memory_order_relaxed) != expect)
        continue;
      if (!take_orphan(s)) continue;
      if (client_atomic<uint32_t>(slot_io[s]).load(memory_order_relaxed) != expect) {
        client_atomic<uint32_t>(state[s]).fetch_or(slot_state::orphan, memory_order_release);  // not ours after all
        continue;
      }
      if (!finish_taken_orphan(s, qhint, 0)) continue;
      client_atomic<unsigned long long>(shard_of(qhint).reaped).fetch_add(1, memory_order_relaxed);
      ++n;
    }
    return n;
  }

  // Finishes slot s's orphan I/O if its completion is in: a write-back is
  // settled, a prefetch copied in. Never waits. True if s has no orphan now.
  DW_HD bool settle_orphan(uint32_t s, uint32_t qhint) const {
    client_atomic<uint32_t> st(state[s]);
    const uint32_t v = st.load(memory_order_acquire);
    if (!(v & slot_state::orphan)) return true;
    const uint32_t io = client_atomic<uint32_t>(slot_io[s]).load(memory_order_relaxed);
    const queue_ref& q = queues[io >> 16];
    const uint16_t cid = uint16_t(io & 0xFFFF);
    if (!q.is_done(cid) && (q.try_poll(), !q.is_done(cid))) return false;
    if (!take_orphan(s)) return false;  // another thread is finishing it
    return finish_taken_orphan(s, qhint, 0);
  }

  // After take_orphan(s): finishes its I/O by kind: a write-back is settled
  // once its completion is in (looking until dl; 0: once; false and
  // orphaned again if it is not), a prefetch's read is awaited and copied in.
  DW_HD bool finish_taken_orphan(uint32_t s, uint32_t qhint, uint64_t dl) const {
    if (client_atomic<uint32_t>(state[s]).load(memory_order_acquire) & slot_state::valid)
      return finish_writeback(s, dl, nullptr);
    adopt_orphan(s, qhint);
    return true;
  }

  // The caller set `evict` on a valid, unpinned slot with its CAS (state
  // st_at_claim). A clean page leaves the directory and the slot is the
  // caller's (true). A dirty one is written back asynchronously and stays
  // cached until its completion is seen (false: look further).
  DW_HD bool evict_claimed(uint32_t s, uint32_t st_at_claim, uint32_t qhint) const {
    client_atomic<uint32_t> st(state[s]);
    cache_stats_shard& sh = shard_of(qhint);
    if (st_at_claim & slot_state::dirty) {
      (void)start_writeback(s, qhint, 0, true);  // without an id now it stays dirty: evict later
      return false;
    }
    const uint64_t k = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed);
    dir_remove(k, s);  // only now may the page be read again
    client_atomic<uint64_t>(slot_key[s]).store(empty_key, memory_order_relaxed);
    st.fetch_and(~slot_state::valid, memory_order_relaxed);
    client_atomic<unsigned long long>(sh.evictions).fetch_add(1, memory_order_relaxed);
    return true;
  }

  // The cleaner: while many pages are dirty, starts the write-back of
  // unpinned dirty pages a little ahead of the CLOCK hand, so that by the
  // time the hand gets there their writes have completed and the slots are
  // clean. Two slots per claim: the hand moves about that far per claim (it
  // spares a page with its use bit set, then takes one).
  DW_HD void clean_ahead_of(uint64_t hand_pos, uint32_t qhint) const {
    if (clean_above == 0 ||
        int64_t(client_atomic<unsigned long long>(*dirty_pages).load(memory_order_relaxed)) <= int64_t(clean_above))
      return;
    for (uint32_t k = 0; k < 2; ++k) {
      const uint32_t s = uint32_t((hand_pos + clean_ahead + k) % nslots);
      client_atomic<uint32_t> st(state[s]);
      uint32_t v = st.load(memory_order_relaxed);
      if ((v & slot_state::ref_mask) ||
          (v & (slot_state::valid | slot_state::dirty)) != (slot_state::valid | slot_state::dirty) ||
          (v & (slot_state::busy | slot_state::evict | slot_state::writeback | slot_state::error)))
        continue;
      if (!st.compare_exchange_strong(v, v | slot_state::evict, memory_order_acquire)) continue;
      if (!start_writeback(s, qhint, 0, true).ok()) return;  // no command id free: later
      client_atomic<unsigned long long>(shard_of(qhint).cleans).fetch_add(1, memory_order_relaxed);
    }
  }

  // Tries to evict one page of a full directory bucket.
  DW_HD bool evict_from_bucket(uint32_t b, uint32_t qhint) const {
    const uint64_t base = uint64_t(b) * dir_ways;
    for (uint32_t w = 0; w < dir_ways; ++w) {
      if (client_atomic<uint64_t>(dir_keys[base + w]).load(memory_order_acquire) == empty_key) return true;
      const uint32_t s = client_atomic<uint32_t>(dir_slots[base + w]).load(memory_order_acquire);
      if (s == dir_pending) continue;
      client_atomic<uint32_t> st(state[s]);
      if (!settle_orphan(s, qhint)) continue;  // a write-back still in flight
      uint32_t v = st.load(memory_order_relaxed);
      if ((v & slot_state::ref_mask) || !(v & slot_state::valid) ||
          (v & (slot_state::busy | slot_state::evict | slot_state::writeback)))
        continue;
      if (!st.compare_exchange_strong(v, v | slot_state::evict, memory_order_acquire)) continue;
      if (!evict_claimed(s, v, qhint)) continue;
      st.fetch_sub(slot_state::evict, memory_order_release);  // free
      return true;
    }
    return false;
  }

  // CLOCK: returns a slot pinned once by the caller and marked busy, or
  // ~0u after two sweeps without one.
  DW_HD uint32_t claim_slot(uint32_t qhint) const {
    client_atomic<unsigned long long> hand(*clock);
    const uint64_t limit = 2ull * nslots + 32;
    for (uint64_t n = 0; n < limit; ++n) {
      const uint64_t pos = hand.fetch_add(1, memory_order_relaxed);
      if (n == 0) clean_ahead_of(pos, qhint);
      const uint32_t s = uint32_t(pos % nslots);
      client_atomic<uint32_t> st(state[s]);
      uint32_t v = st.load(memory_order_relaxed);
      if (v & slot_state::ref_mask) continue;
      // I/O left in flight here: finish it if its completion is in (a
      // prefetch nobody read is copied in; a settled write-back leaves the
      // page clean, so it may go at once). Never waits.
      if (v & slot_state::orphan) {
        if (!settle_orphan(s, qhint)) continue;
        v = st.load(memory_order_relaxed);
        if (v & slot_state::ref_mask) continue;
      }
      if (v & slot_state::busy) continue;
      if (v & (slot_state::evict | slot_state::writeback)) continue;
      if (v & slot_state::valid) {
        if (v & slot_state::use) {
          st.fetch_and(~slot_state::use, memory_order_relaxed);
          continue;
        }
        if (!st.compare_exchange_strong(v, v | slot_state::evict, memory_order_acquire)) continue;
        if (!evict_claimed(s, v, qhint)) continue;
        st.fetch_add(slot_state::busy + 1 - slot_state::evict, memory_order_acq_rel);
        return s;
      }
      // Free, or its last fill failed.
      if (st.compare_exchange_strong(v, slot_state::busy + 1, memory_order_acquire)) return s;
    }
    return ~0u;
  }

  // Finishes an orphaned prefetch the clock came across (single thread).
  DW_HD void adopt_orphan(uint32_t s, uint32_t qhint) const {
    client_atomic<uint32_t>(state[s]).fetch_add(1, memory_order_acquire);
    fill_job j;
    j.qhint = qhint;
    j.key = adopt_io(j, s);
    await_io(j, deadline());
    if (j.step != step_fill) return;  // failed: the slot is marked and unpinned
    copy_in(one_lane{}, 1u, page_data(s), j.src, j.bytes);
    finish_fill(j);
    client_atomic<uint32_t> st(state[s]);
    st.fetch_and(~slot_state::use, memory_order_relaxed);  // not used yet: first to go
    st.fetch_sub(1, memory_order_release);
  }

  // ---- clear() (no access may run meanwhile) ----

  // Finishes slot s's orphan I/O if it has one (it holds a command id):
  // a prefetch is copied in; a write-back is waited for until the deadline.
  DW_HD void finish_orphan(uint32_t s) const {
    if ((client_atomic<uint32_t>(state[s]).load(memory_order_acquire) & slot_state::orphan) && take_orphan(s))
      (void)finish_taken_orphan(s, s, deadline());
  }

  // Empties slot s and its directory entry unless it is dirty (its
  // write-back failed: dropping it would lose data).
  DW_HD void drop_clean(uint32_t s) const {
    client_atomic<uint32_t> st(state[s]);
    const uint32_t v = st.load(memory_order_relaxed);
    if (v & (slot_state::dirty | slot_state::writeback)) return;
    if (v & slot_state::valid) dir_remove(client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed), s);
    st.store(0, memory_order_relaxed);
    client_atomic<uint64_t>(slot_key[s]).store(empty_key, memory_order_relaxed);
  }
};

}  // namespace deepwell
