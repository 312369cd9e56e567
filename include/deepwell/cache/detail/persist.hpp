// page_cache_ref, part: persist. A persist writes back the dirty pages of a
// range (waiting for write-backs already in flight), waits for those
// writes to complete, then has the dataset's namespace flushed (an NVMe
// Flush, which the controller turns into fdatasync or the target's own
// flush). Runs beside ordinary accesses: the pages it writes are pinned,
// so no evictor claims them meanwhile.
//
// Group commit: a flush covers every write completed before it was
// submitted, so persists that arrive while one flush is running share the
// next one. Per dataset, `started` counts flushes begun and `completed`
// names the newest one finished; a persister whose writes have completed
// reads `started` (s) and needs any flush numbered s + 1 or later. One
// thread at a time (the leader) submits a flush; the others wait for
// `completed` to reach their number. A failed or timed-out flush is
// reported to every persister whose number it covers (conservatively: a
// persister that reads the record late may also be told of a later
// failure).
// Included by page_cache_ref.hpp only.
#pragma once

namespace deepwell {

// Pins the slot holding `key` if the page is cached and valid; ~0u if it
// is not cached, or is being filled or failed (then it holds nothing
// written: a page leaves the directory only when clean, with no
// write-back in flight, so an absent page has nothing pending either). A
// page being evicted stays in the directory until its write-back has
// completed: that is waited out. On the deadline, r says timeout.
DW_HD inline uint32_t page_cache_ref::pin_cached(uint64_t key, uint64_t dl, request_status& r) const {
  const uint32_t b = dir.bucket_of(key);
  for (uint32_t i = 0;; ++i) {
    const int64_t e = dir.find(key, b);
    if (e < 0) return ~0u;
    const uint32_t s = client_atomic<uint32_t>(dir.slots[e]).load(memory_order_acquire);
    if (s == dir_pending) return ~0u;  // its inserter is about to fill it: nothing written yet
    client_atomic<uint64_t> st(state[s]);
    const slot_word old = st.fetch_add(1, memory_order_acq_rel);
    const bool ours = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed) == key;
    if (ours && !(old & slot_state::evict)) {
      if (old & slot_state::valid) return s;
      st.fetch_sub(1, memory_order_release);  // being filled, or failed
      return ~0u;
    }
    st.fetch_sub(1, memory_order_release);  // being evicted, or the entry is stale
    if (now_ns() > dl) {
      r = request_status::client(client_code::timeout);
      return ~0u;
    }
    backoff(i);
  }
}

// One NVMe Flush of dataset ds's namespace, waited for (one thread).
DW_HD inline request_status page_cache_ref::run_flush(uint32_t ds, uint32_t qhint, uint64_t dl) const {
  const uint32_t qi = qhint % nqueues;
  const queue_ref& q = queues[qi];
  uint16_t cid;
  const request_status a = get_cid(qi, qhint, cid, dl);
  if (!a.ok()) return a;
  q.submit(cid, nvme::make_flush(datasets[ds].nsid));
  const wait_result w = q.wait(cid, dl);
  if (w.status.code != client_code::timeout && w.status.code != client_code::controller_lost) q.release_cid(cid);
  return w.status;
}

// Waits until a flush of dataset ds submitted after this call began has
// completed, running it if no other thread is (one thread of a warp).
DW_HD inline request_status page_cache_ref::group_flush(uint32_t ds, uint32_t qhint, uint64_t dl) const {
  persist_epoch& pe = persists[ds];
  client_atomic<unsigned long long> started(pe.started), completed(pe.completed), failed(pe.failed);
  client_atomic<uint32_t> leader(pe.leader);
  // An RMW, not a load: the leader's later increment reads from it, so the
  // flush it submits is ordered after this thread's completed writes.
  const unsigned long long need = started.fetch_add(0, memory_order_acq_rel) + 1;
  for (uint32_t i = 0;; ++i) {
    if (completed.load(memory_order_acquire) >= need) {
      if (failed.load(memory_order_relaxed) >= need)
        return request_status::unpack(client_atomic<uint32_t>(pe.error).load(memory_order_relaxed));
      return {};
    }
    uint32_t expected = 0;
    if (leader.load(memory_order_relaxed) == 0 && leader.compare_exchange_strong(expected, 1, memory_order_acquire)) {
      if (completed.load(memory_order_acquire) < need) {
        const unsigned long long mine = started.fetch_add(1, memory_order_acq_rel) + 1;  // >= need
        const request_status f = run_flush(ds, qhint, dl);
        if (!f.ok()) {
          client_atomic<uint32_t>(pe.error).store(f.pack(), memory_order_relaxed);
          failed.store(mine, memory_order_relaxed);
          client_atomic<unsigned long long>(shard_of(qhint).errors).fetch_add(1, memory_order_relaxed);
          set_error(f);
        } else {
          client_atomic<unsigned long long>(shard_of(qhint).flushes).fetch_add(1, memory_order_relaxed);
        }
        completed.store(mine, memory_order_release);
      }
      leader.store(0, memory_order_release);
      continue;
    }
    if (now_ns() > dl) return request_status::client(client_code::timeout);
    backoff(i);
  }
}

// The first (lowest lane's) error of the lanes of `mask`, in every lane; ok if none.
template <class Warp>
DW_HD inline request_status warp_first_error(const Warp& w, unsigned mask, request_status r) {
  const unsigned bad = w.ballot(mask, !r.ok());
  const uint32_t packed = w.shfl(mask, r.pack(), bad ? lowest_lane(bad) : lowest_lane(mask));
  return bad ? request_status::unpack(packed) : request_status{};
}

// Ends a persist: the warp's first write-back error goes to every lane;
// then the lowest lane of each group of lanes naming the same dataset
// flushes it (group commit) and its lanes return that flush's status.
// ds >= ndatasets: nothing to flush for this lane.
template <class Warp>
DW_HD inline request_status page_cache_ref::end_persist(const Warp& w, unsigned mask, request_status r,
                                                        uint32_t ds) const {
  const request_status wrote = warp_first_error(w, mask, r);
  const unsigned lead = lowest_lane(w.match_any(mask, ds));
  uint32_t f = 0;
  if (w.lane() == lead && ds < ndatasets && !datasets[ds].read_only)
    f = group_flush(ds, w.queue_hint(), deadline()).pack();
  f = w.shfl(mask, f, lead);
  const request_status out = wrote.ok() ? request_status::unpack(f) : wrote;
  set_error(out);
  return out;
}

// Writes back the cached dirty pages [first_page, last_page] of dataset ds
// (the whole warp, a page per lane), waiting for their writes. `runs`: a
// round's pages, adjacent, go through one queue, so that one poller takes
// them together and writes them with one call (a queue a page: each
// poller writes one page at a time); the next round's go to the next
// queue. Else each page goes through its slot's queue.
template <class Warp>
DW_HD inline request_status page_cache_ref::write_back_range(const Warp& w, unsigned mask, uint32_t ds,
                                                             uint64_t first_page, uint64_t last_page,
                                                             bool wait, bool runs) const {
  const unsigned lanes = popcount32(mask);
  const unsigned rank = lane_rank(w, mask);
  const uint64_t pages = datasets[ds].pages;
  if (last_page >= pages) last_page = pages - 1;
  request_status r{};
  for (uint64_t base = first_page; pages && base <= last_page; base += lanes) {
    const uint64_t pg = base + rank;
    request_status e{};
    const uint32_t s = pg <= last_page ? pin_cached(make_key(ds, pg), deadline(), e) : ~0u;
    const request_status wb =
        write_back_warp(w, mask, s, s != ~0u, wait, runs ? run_queue(base / lanes) : each_slot_queue);
    if (s != ~0u) client_atomic<uint64_t>(state[s]).fetch_sub(1, memory_order_release);
    if (r.ok()) r = e.ok() ? wb : e;
    if (last_page - base < lanes) break;  // also keeps base from wrapping
  }
  return r;
}

template <class Warp>
DW_HD inline request_status page_cache_ref::persist(const Warp& w, uint32_t ds, uint64_t first_page,
                                                    uint64_t last_page) const {
  // The mask is taken once, here: every collective below uses it (warp.hpp
  // says why active() must not be read again after divergent code).
  const unsigned mask = w.active();
  // Lanes may name different ranges (each thread persisting its own
  // data): each distinct range is written back by the whole warp, then one
  // flush per dataset serves them all.
  const unsigned same = w.match_any(mask, first_page) & w.match_any(mask, last_page) & w.match_any(mask, ds);
  unsigned todo = w.ballot(mask, w.lane() == lowest_lane(same));
  request_status r{};
  while (todo) {
    const unsigned l = lowest_lane(todo);
    todo &= todo - 1;
    const uint32_t lds = w.shfl(mask, ds, l);
    const uint64_t f = shfl64(w, mask, first_page, l);
    const uint64_t la = shfl64(w, mask, last_page, l);
    const request_status e = lds < ndatasets ? write_back_range(w, mask, lds, f, la) : request_status{};
    if (r.ok()) r = e;
  }
  return end_persist(w, mask, r, ds);
}

template <class Warp>
DW_HD inline request_status page_cache_ref::persist_run(const Warp& w, uint32_t ds, uint64_t first_page,
                                                        uint64_t last_page) const {
  const unsigned mask = w.active();
  const request_status r =
      ds < ndatasets ? write_back_range(w, mask, ds, first_page, last_page, true, true) : request_status{};
  return end_persist(w, mask, r, ds);
}

template <class Warp>
DW_HD inline request_status page_cache_ref::start_write_back(const Warp& w, uint32_t ds, uint64_t first_page,
                                                             uint64_t last_page) const {
  const unsigned mask = w.active();
  if (ds >= ndatasets || datasets[ds].read_only || first_page > last_page) return {};
  const request_status r = warp_first_error(w, mask, write_back_range(w, mask, ds, first_page, last_page, false));
  set_error(r);
  return r;
}

// A page this lane has pinned (a page handle; `written`: the handle wrote
// to it): written back if dirty, then its dataset flushed. s == ~0u: the
// lane takes part without a page.
template <class Warp>
DW_HD inline request_status page_cache_ref::persist_pinned(const Warp& w, uint32_t s, bool written) const {
  const unsigned mask = w.active();  // before any divergent code
  if (written && s != ~0u) mark_dirty(s);
  const request_status r = write_back_warp(w, mask, s, s != ~0u);
  const uint32_t ds = s != ~0u ? key_dataset(client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed)) : ~0u;
  return end_persist(w, mask, r, ds);
}

// Pins slot s for persist_all if it holds a page that may need writing;
// waits out an evictor's claim (its write-back must be waited for too).
DW_HD inline bool page_cache_ref::pin_for_persist(uint32_t s, uint64_t dl, request_status& r) const {
  client_atomic<uint64_t> st(state[s]);
  for (uint32_t i = 0;; ++i) {
    if (!(st.load(memory_order_relaxed) & (slot_state::dirty | slot_state::writeback | slot_state::evict)))
      return false;
    const slot_word old = st.fetch_add(1, memory_order_acq_rel);
    if (!(old & slot_state::evict)) {
      if (old & slot_state::valid) return true;
      st.fetch_sub(1, memory_order_release);
      return false;
    }
    st.fetch_sub(1, memory_order_release);
    if (now_ns() > dl) {
      r = request_status::client(client_code::timeout);
      return false;
    }
    backoff(i);
  }
}

template <class Warp>
DW_HD inline request_status page_cache_ref::persist_all(const Warp& w) const {
  const unsigned mask = w.active();
  request_status r{};
  in_rounds(w, mask, nslots_, [&](uint64_t, uint64_t slot) {
    const uint32_t s = uint32_t(slot);
    request_status e{};
    const bool pinned = slot < nslots_ && pin_for_persist(s, deadline(), e);
    const request_status wb = write_back_warp(w, mask, s, pinned);
    if (pinned) client_atomic<uint64_t>(state[s]).fetch_sub(1, memory_order_release);
    if (r.ok()) r = e.ok() ? wb : e;
  });
  // Every writable dataset, a lane each (group commit per dataset).
  const request_status wrote = warp_first_error(w, mask, r);
  request_status f{};
  const unsigned lanes = popcount32(mask);
  for (uint32_t ds = lane_rank(w, mask); ds < ndatasets; ds += lanes) {
    const dataset_desc& d = datasets[ds];
    if (d.nsid == 0 || d.read_only) continue;
    const request_status g = group_flush(ds, w.queue_hint() + ds, deadline());
    if (f.ok()) f = g;
  }
  const request_status flushed = warp_first_error(w, mask, f);
  const request_status out = wrote.ok() ? flushed : wrote;
  set_error(out);
  return out;
}

}  // namespace deepwell
