// page_cache_ref, part: CLOCK eviction with a use bit, the eviction of a
// full directory bucket's page, the cleaner that starts write-backs ahead
// of the hand, and clear()'s emptying of slots.
// Included by page_cache_ref.hpp only.
#pragma once

namespace deepwell {

// The caller set `evict` on a valid, unpinned slot with its CAS (state
// st_at_claim). A clean page leaves the directory and the slot is the
// caller's (true). A dirty one is written back asynchronously and stays
// cached until its completion is seen (false: look further).
DW_HD inline bool page_cache_ref::evict_claimed(uint32_t s, slot_word st_at_claim, uint32_t qhint) const {
  client_atomic<uint64_t> st(state[s]);
  cache_stats_shard& sh = shard_of(qhint);
  if (st_at_claim & slot_state::dirty) {
    (void)start_writeback(s, qhint, 0, true);  // without an id now it stays dirty: evict later
    return false;
  }
  const uint64_t k = client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed);
  dir.remove(k, s);  // only now may the page be read again
  client_atomic<uint64_t>(slot_key[s]).store(empty_key, memory_order_relaxed);
  // No longer valid, and a new generation: a pin-free reader that read the
  // page before this point sees the change when it checks (read_hit), and
  // this comes before anything overwrites the page (the fill's copy-in
  // follows claim_slot's release RMW).
  st.fetch_add(slot_state::gen_one - slot_state::valid, memory_order_relaxed);
  client_atomic<unsigned long long>(sh.evictions).fetch_add(1, memory_order_relaxed);
  return true;
}

// The cleaner: while many pages are dirty, starts the write-back of
// unpinned dirty pages a little ahead of the CLOCK hand, so that by the
// time the hand gets there their writes have completed and the slots are
// clean. Two slots per claim: the hand moves about that far per claim (it
// spares a page with its use bit set, then takes one).
DW_HD inline void page_cache_ref::clean_ahead_of(uint64_t hand_pos, uint32_t qhint) const {
  if (clean_above == 0 ||
      int64_t(client_atomic<unsigned long long>(*dirty_pages).load(memory_order_relaxed)) <= int64_t(clean_above))
    return;
  for (uint32_t k = 0; k < 2; ++k) {
    const uint32_t s = uint32_t((hand_pos + clean_ahead + k) % nslots_);
    client_atomic<uint64_t> st(state[s]);
    slot_word v = st.load(memory_order_relaxed);
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
DW_HD inline bool page_cache_ref::evict_from_bucket(uint32_t b, uint32_t qhint) const {
  const uint64_t base = uint64_t(b) * dir_ways;
  for (uint32_t w = 0; w < dir_ways; ++w) {
    if (client_atomic<uint64_t>(dir.keys[base + w]).load(memory_order_acquire) == empty_key) return true;
    const uint32_t s = client_atomic<uint32_t>(dir.slots[base + w]).load(memory_order_acquire);
    if (s == dir_pending) continue;
    client_atomic<uint64_t> st(state[s]);
    if (!settle_orphan(s, qhint)) continue;  // a write-back still in flight
    slot_word v = st.load(memory_order_relaxed);
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
DW_HD inline uint32_t page_cache_ref::claim_slot(uint32_t qhint) const {
  client_atomic<unsigned long long> hand(*clock);
  const uint64_t limit = 2ull * nslots_ + 32;
  for (uint64_t n = 0; n < limit; ++n) {
    const uint64_t pos = hand.fetch_add(1, memory_order_relaxed);
    if (n == 0) clean_ahead_of(pos, qhint);
    const uint32_t s = uint32_t(pos % nslots_);
    client_atomic<uint64_t> st(state[s]);
    slot_word v = st.load(memory_order_relaxed);
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
    if (st.compare_exchange_strong(v, (v & slot_state::gen_mask) + slot_state::busy + 1, memory_order_acquire)) return s;
  }
  return ~0u;
}

DW_HD inline void page_cache_ref::drop_clean(uint32_t s) const {
  client_atomic<uint64_t> st(state[s]);
  const slot_word v = st.load(memory_order_relaxed);
  if (v & (slot_state::dirty | slot_state::writeback)) return;
  if (v & slot_state::valid) dir.remove(client_atomic<uint64_t>(slot_key[s]).load(memory_order_relaxed), s);
  st.store((v & slot_state::gen_mask) + slot_state::gen_one, memory_order_relaxed);  // empty, a new generation
  client_atomic<uint64_t>(slot_key[s]).store(empty_key, memory_order_relaxed);
}

}  // namespace deepwell
