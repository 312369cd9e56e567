// The test access point of page_cache_ref: what tests may read of a cache's
// internals, on the host, for a cache whose memory the host can read (a CPU
// cache), while no access runs. Not for the library's own code.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "deepwell/cache/page_cache_ref.hpp"

namespace deepwell::detail {

struct cache_access {
  static slot_word slot_state(const page_cache_ref& c, uint32_t s) {
    return client_atomic<uint64_t>(c.state[s]).load(memory_order_acquire);
  }
  static uint64_t slot_key(const page_cache_ref& c, uint32_t s) {
    return client_atomic<uint64_t>(c.slot_key[s]).load(memory_order_relaxed);
  }
  // The page hint entry that `key` maps to (shared with other pages).
  static uint64_t& hint_entry(const page_cache_ref& c, uint64_t key) { return c.hint_of(key); }
  // The slot holding `key`, or ~0u (a scan: while no access runs).
  static uint32_t slot_holding(const page_cache_ref& c, uint64_t key) {
    for (uint32_t s = 0; s < c.nslots_; ++s)
      if (slot_key(c, s) == key) return s;
    return ~0u;
  }
  static uint32_t hint_entries(const page_cache_ref& c) { return c.hint_mask + 1; }
  static uint64_t dirty_pages(const page_cache_ref& c) {
    return client_atomic<unsigned long long>(*c.dirty_pages).load(memory_order_relaxed);
  }
  // Where the metadata a lookup reads lies: one range from the state words
  // through the directory's slots (cache_layout.hpp's order), as the
  // clients address it. For the array benchmark's L2 experiment.
  static const void* lookup_metadata(const page_cache_ref& c, uint64_t& bytes) {
    bytes = uint64_t(reinterpret_cast<const uint8_t*>(c.dir.locks) - reinterpret_cast<const uint8_t*>(c.state));
    return c.state;
  }
  // The arrays a lookup touches, for the array benchmark's experiments
  // that take the hit path apart (valid while the cache lives).
  struct lookup_arrays {
    cache_directory dir;
    slot_word* state;
    const uint64_t* slot_key;
    const uint8_t* data;
    uint32_t page_shift;
    uint64_t* hints;
    uint32_t hint_mask;
    uint32_t opaque_zero;  // page_cache_ref::opaque_zero
  };
  static lookup_arrays lookup_parts(const page_cache_ref& c) {
    return {c.dir, c.state, c.slot_key, c.data, c.page_shift_, c.hints, c.hint_mask, c.opaque_zero};
  }

  // Checks the cache's invariants while no access runs; returns what is
  // wrong (empty if nothing):
  //  - no slot is pinned, being filled or claimed by an evictor (a busy
  //    slot must be an unread prefetch: busy | orphan);
  //  - one page, one slot: no two valid slots hold the same key, and each
  //    valid slot's key has exactly one directory entry, pointing to it;
  //  - every directory entry points to a valid slot holding its key, or to
  //    an unread prefetch of that key;
  //  - the dirty counter equals the number of dirty slots (a page written
  //    again while its write-back is in flight counts: it is dirty again).
  static std::string check_invariants(const page_cache_ref& c) {
    std::string out;
    auto fail = [&out](const std::string& what) {
      if (out.size() < 2000) out += what + "\n";
    };
    std::map<uint64_t, uint32_t> holder;
    uint64_t dirty = 0;
    for (uint32_t s = 0; s < c.slots(); ++s) {
      const slot_word v = slot_state(c, s);
      const uint64_t k = slot_key(c, s);
      const std::string at = "slot " + std::to_string(s) + " (state 0x" + hex(v) + ")";
      if (v & slot_state::ref_mask) fail(at + " is still pinned");
      if (v & slot_state::evict) fail(at + " is still claimed by an evictor");
      if ((v & slot_state::busy) && !(v & slot_state::orphan)) fail(at + " is being filled with no I/O in flight");
      if (v & slot_state::dirty) ++dirty;
      if (!(v & (slot_state::valid | slot_state::busy))) continue;
      if (!holder.emplace(k, s).second)
        fail(at + " holds key " + hex(k) + ", as slot " + std::to_string(holder[k]) + " does");
      uint32_t entries = 0;
      const uint32_t b = c.dir.bucket_of(k);
      for (uint32_t w = 0; w < dir_ways; ++w) {
        const uint64_t e = uint64_t(b) * dir_ways + w;
        if (c.dir.keys[e] == k) {
          ++entries;
          if (c.dir.slots[e] != s) fail(at + ": the directory entry of its key points to slot " + std::to_string(c.dir.slots[e]));
        }
      }
      if (entries != 1) fail(at + ": its key " + hex(k) + " has " + std::to_string(entries) + " directory entries");
    }
    for (uint64_t e = 0; e < uint64_t(c.dir.nbuckets) * dir_ways; ++e) {
      const uint64_t k = c.dir.keys[e];
      if (k == empty_key) continue;
      const uint32_t s = c.dir.slots[e];
      if (s == dir_pending) {
        fail("directory entry " + std::to_string(e) + " is still pending");
        continue;
      }
      if (s >= c.slots() || slot_key(c, s) != k || !(slot_state(c, s) & (slot_state::valid | slot_state::busy)))
        fail("directory entry " + std::to_string(e) + " (key " + hex(k) + ") points to slot " + std::to_string(s) +
             ", which does not hold that page");
    }
    if (dirty != dirty_pages(c))
      fail("the dirty counter says " + std::to_string(dirty_pages(c)) + " pages, the slots " + std::to_string(dirty));
    return out;
  }

 private:
  static std::string hex(uint64_t v) {
    char b[17];
    std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
    return b;
  }
};

}  // namespace deepwell::detail
