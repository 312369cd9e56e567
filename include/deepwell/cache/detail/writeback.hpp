// page_cache_ref, part: write-back. Asynchronous: an evictor (or the
// cleaner) copies a dirty page to staging, submits its write and moves on;
// the page stays cached and becomes evictable once the completion has been
// seen. One write-back of a page at a time (the writeback bit). flush_warp
// is the host owner's flush, a warp (or a CPU thread) at a time.
// Included by page_cache_ref.hpp only.
#pragma once

namespace deepwell {

// The caller owns slot s for a write-back: either it set `evict` on an
// unpinned, valid, dirty slot with its CAS (evictors and the cleaner:
// nobody can write the page during the copy), or it set `writeback` on a
// valid dirty slot (flush, with no access running). Copies the page to
// staging and submits its write; the slot goes on (evict cleared, dirty
// cleared, writeback | orphan set) until finish_writeback sees the
// completion. dl: how long to wait for a command id (0: take one only if
// free now, finishing done orphans of the queue first). On failure to get
// one the slot is handed back as it was.
DW_HD inline request_status page_cache_ref::start_writeback(uint32_t s, uint32_t qhint, uint64_t dl, bool evict_claim) const {
  uint32_t qi;
  uint16_t cid;
  const request_status a = begin_writeback(s, qhint, dl, evict_claim, qi, cid);
  if (!a.ok()) return a;
  detail::copy_out(queues[qi].buffer(cid), page_data(s), writeback_bytes(s));
  submit_writeback(s, qi, cid, evict_claim);
  return {};
}

// start_writeback in three steps, so that a warp can copy its lanes'
// pages together between the first and the last: a command id (the slot
// handed back without one), then the caller copies writeback_bytes(s) of
// the page to queues[qi].buffer(cid), then the write is submitted.
DW_HD inline request_status page_cache_ref::begin_writeback(uint32_t s, uint32_t qhint, uint64_t dl, bool evict_claim, uint32_t& qi,
                                     uint16_t& cid) const {
  client_atomic<uint64_t> st(state[s]);
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

DW_HD inline uint32_t page_cache_ref::writeback_bytes(uint32_t s) const {
  return page_bytes(client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed));
}

DW_HD inline void page_cache_ref::submit_writeback(uint32_t s, uint32_t qi, uint16_t cid, bool evict_claim) const {
  const queue_ref& q = queues[qi];
  const uint64_t key = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed);
  const dataset_desc& d = datasets[key_dataset(key)];
  uint32_t nlb;
  const uint64_t lba = page_lba(d, key, nlb);
  // Counted before the submit: whoever sees this write-back in flight
  // (the writeback bit, released below) sees it counted.
  d.tally.note(key_page(key));
  q.submit(cid, nvme::make_write(d.nsid, lba, nlb, q.buffer_offset(cid)));
  orphan_io(s, qi, cid);
  client_atomic<uint64_t> st(state[s]);
  if (evict_claim)
    st.fetch_add(slot_state::writeback + slot_state::orphan - slot_state::evict, memory_order_release);
  else
    st.fetch_or(slot_state::orphan, memory_order_release);
}

template <class Warp>
DW_HD inline request_status page_cache_ref::flush_warp(const Warp& w, uint32_t first) const {
  const unsigned mask = w.active();
  const uint32_t s = first + lane_rank(w, mask);
  return write_back_warp(w, mask, s, s < nslots_);
}

template <class Warp>
DW_HD inline request_status page_cache_ref::flush_slots_warp(const Warp& w, uint32_t s, bool pending,
                                                             uint64_t run) const {
  return write_back_warp(w, w.active(), s, pending && s < nslots_, true, run_queue(run));
}

DW_HD inline bool page_cache_ref::dirty_key(uint32_t s, uint64_t& key) const {
  if (s >= nslots_) return false;
  const slot_word v = client_atomic<uint64_t>(state[s]).load(memory_order_relaxed);
  if (!(v & slot_state::valid) || !(v & slot_state::dirty)) return false;
  key = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed);
  return true;
}

// Each lane of `mask` with `pending` writes back slot s if it is dirty (after any
// write-back of it already in flight), the warp copying the pages; the
// lanes return once their writes have completed (with !wait: once they are
// submitted; a write-back already in flight of a page not written since is
// left to complete on its own). Safe beside running
// accesses when the caller holds a pin of s (no evictor can claim it):
// writers re-mark the page dirty with a release RMW (mark_dirty) that
// either precedes the clearing of dirty here (its bytes are then in the
// copy) or follows it (the page stays dirty).
template <class Warp>
DW_HD inline request_status page_cache_ref::write_back_warp(const Warp& w, unsigned mask, uint32_t s,
                                                            bool pending, bool wait, uint32_t qhint) const {
  const uint64_t dl = deadline();
  request_status r{};
  // In rounds: lanes take a command id only if one is free now (never
  // waiting for one while another lane of the warp holds one: many warps
  // flushing at once would otherwise wait on each other's ids); lanes left
  // without one try again once the round's writes have completed.
  for (uint32_t round = 0;; ++round) {
    bool claimed = false;
    uint32_t qi = 0;
    uint16_t cid = 0;
    if (pending) {
      client_atomic<uint64_t> st(state[s]);
      for (;;) {
        slot_word v = st.load(memory_order_acquire);
        if (v & slot_state::writeback) {  // a write-back in flight: it comes first
          if (!wait && (v & slot_state::orphan) && !(v & slot_state::dirty)) {
            // Submitted (so counted in the tally) and holding every
            // write so far. One claimed and not yet submitted is waited
            // for below, as is one being finished.
            pending = false;
            break;
          }
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
          // Claimed by a lane of another warp that has not submitted it
          // yet (or being finished by another thread): try again next
          // round, never wait here. That warp may be waiting, at its
          // ballot below, for one of its own lanes that waits for a page
          // this warp's lanes have claimed: two warps, each holding what
          // the other needs.
        } else if (!(v & slot_state::valid) || (v & (slot_state::busy | slot_state::error)) ||
                   !(v & slot_state::dirty)) {
          pending = false;  // nothing (more) to write
          break;
        } else if (!(v & slot_state::evict)) {
          if (!st.compare_exchange_strong(v, v | slot_state::writeback, memory_order_acquire)) continue;
          const request_status a = begin_writeback(s, qhint == each_slot_queue ? s : qhint, 0, false, qi, cid);
          if (a.ok()) {
            claimed = true;
            pending = false;
          } else if (a.code != client_code::cache_exhausted || now_ns() > dl) {
            r = a.code == client_code::cache_exhausted ? request_status::client(client_code::timeout) : a;
            pending = false;
          }  // else: no free id now (the slot was handed back): next round
          break;
        }  // else an evictor's claim: its write-back is submitted soon; next round
        if (now_ns() > dl) {
          r = request_status::client(client_code::timeout);
          pending = false;
        }
        break;
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
      detail::copy_out_warp(w, mask, queues[lq].buffer(uint16_t(lc)), page_data(ls), bytes);
    }
    w.sync(mask);
    if (claimed) {
      submit_writeback(s, qi, cid, false);
      if (wait && take_orphan(s)) {
        request_status e;
        if (!finish_writeback(s, dl, &e))
          r = request_status::client(client_code::timeout);
        else if (!e.ok())
          r = e;
        else if (!r.ok() && !(client_atomic<uint64_t>(state[s]).load(memory_order_acquire) & slot_state::dirty))
          r = {};  // an earlier failed write-back, now written
      }
    }
    if (!w.ballot(mask, pending)) break;
    if (!any) backoff(round);  // ids or pages are held by other warps: let their writes go out
  }
  return r;
}

// After take_orphan(s) on a slot whose write-back is in flight: finishes
// it once its completion has arrived, looking until dl (0: look once).
// False (the write stays in flight, orphaned again) if it has not. A
// failed write leaves the page dirty and is recorded in the error flag.
DW_HD inline bool page_cache_ref::finish_writeback(uint32_t s, uint64_t dl, request_status* out) const {
  client_atomic<uint64_t> st(state[s]);
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

}  // namespace deepwell
