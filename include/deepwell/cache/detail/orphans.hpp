// page_cache_ref, part: I/O left in flight that no thread waits for
// (orphans: prefetch reads and write-backs), and command ids. An orphan's
// queue and command id are in slot_io and io_slot names its slot, so a
// thread short of command ids finishes the completed orphans of its queue
// (reap_queue) instead of waiting for the CLOCK hand to reach them.
// Included by page_cache_ref.hpp only.
#pragma once

namespace deepwell {

DW_HD inline bool page_cache_ref::take_orphan(uint32_t s) const {
  return client_atomic<uint64_t>(state[s]).fetch_and(~slot_state::orphan, memory_order_acq_rel) & slot_state::orphan;
}

// Records that slot s's I/O on (qi, cid) is left in flight. The caller
// then sets `orphan` with a release RMW (which publishes these).
DW_HD inline void page_cache_ref::orphan_io(uint32_t s, uint32_t qi, uint16_t cid) const {
  client_atomic<uint32_t>(slot_io[s]).store(qi << 16 | cid, memory_order_relaxed);
  client_atomic<uint32_t>(io_slot[uint64_t(qi) * io_stride + cid]).store(s, memory_order_relaxed);
  client_atomic<uint32_t>(orphans[qi]).fetch_add(1, memory_order_relaxed);
}

// A command id of queue qi: a free one, else one freed by finishing the
// completed orphans of the queue, else (dl != 0) whichever comes back
// before dl. cache_exhausted (dl == 0) or timeout when none came;
// controller_lost once the queue stopped.
DW_HD inline request_status page_cache_ref::get_cid(uint32_t qi, uint32_t qhint, uint16_t& cid, uint64_t dl) const {
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
DW_HD inline uint32_t page_cache_ref::reap_queue(uint32_t qi, uint32_t qhint, uint32_t max) const {
  if (client_atomic<uint32_t>(orphans[qi]).load(memory_order_relaxed) == 0) return 0;
  const queue_ref& q = queues[qi];
  uint32_t n = 0;
  const uint32_t start = qhint % q.depth;
  for (uint32_t k = 0; k < q.depth && n < max; ++k) {
    const uint16_t cid = uint16_t((start + k) % q.depth);
    if (!q.is_done(cid)) continue;
    const uint32_t s = client_atomic<uint32_t>(io_slot[uint64_t(qi) * io_stride + cid]).load(memory_order_relaxed);
    if (s >= nslots_) continue;
    const uint32_t expect = qi << 16 | cid;
    const slot_word v = client_atomic<uint64_t>(state[s]).load(memory_order_acquire);
    if (!(v & slot_state::orphan) || client_atomic<uint32_t>(slot_io[s]).load(memory_order_relaxed) != expect)
      continue;
    if (!take_orphan(s)) continue;
    if (client_atomic<uint32_t>(slot_io[s]).load(memory_order_relaxed) != expect) {
      client_atomic<uint64_t>(state[s]).fetch_or(slot_state::orphan, memory_order_release);  // not ours after all
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
DW_HD inline bool page_cache_ref::settle_orphan(uint32_t s, uint32_t qhint) const {
  client_atomic<uint64_t> st(state[s]);
  const slot_word v = st.load(memory_order_acquire);
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
DW_HD inline bool page_cache_ref::finish_taken_orphan(uint32_t s, uint32_t qhint, uint64_t dl) const {
  if (client_atomic<uint64_t>(state[s]).load(memory_order_acquire) & slot_state::valid)
    return finish_writeback(s, dl, nullptr);
  adopt_orphan(s, qhint);
  return true;
}

DW_HD inline void page_cache_ref::finish_orphan(uint32_t s) const {
  if ((client_atomic<uint64_t>(state[s]).load(memory_order_acquire) & slot_state::orphan) && take_orphan(s))
    (void)finish_taken_orphan(s, s, deadline());
}

}  // namespace deepwell
