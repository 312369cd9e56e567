// The hit path's loads and pins of the cache's own metadata (directory
// entries, state words, slot keys), with an L2 eviction-priority hint on the
// GPU. Part of page_cache_ref; self-contained.
//
// Why: an all-hit random element read touches four metadata lines (the
// bucket's keys, its slots, the state word, the slot's key) before the one
// data sector it wants. When the data is much larger than L2 the data
// sectors stream through it and push those lines out, so every access paid
// DRAM for all of them: 0.2 of the GPU's random 8-byte reads of device
// memory. Marking metadata accesses evict_last keeps the lines in L2 while
// the data lines (normal priority) come and go. `keep` is the share of the
// metadata lines so marked (createpolicy.fractional), set by the host so
// that they take at most a given share of L2 (cache_config::l2_metadata_share);
// 0 turns the hints off. On the CPU these are plain atomics.
#pragma once
#include <cstdint>

#include "deepwell/config.hpp"
#include "deepwell/shared_atomic.hpp"

namespace deepwell::detail {

struct meta_hint {
  uint64_t policy = 0;
  bool on = false;
};

DW_HD DW_FORCEINLINE meta_hint make_meta_hint(float keep) {
  meta_hint h;
#if DW_DEVICE_CODE
  if (keep > 0.0f) {
    asm volatile("createpolicy.fractional.L2::evict_last.L2::evict_unchanged.b64 %0, %1;"
                 : "=l"(h.policy)
                 : "f"(keep > 1.0f ? 1.0f : keep));
    h.on = true;
  }
#else
  (void)keep;
#endif
  return h;
}

DW_HD DW_FORCEINLINE uint64_t meta_load_relaxed(const uint64_t* p, meta_hint h) {
#if DW_DEVICE_CODE
  if (h.on) {
    uint64_t v;
    asm volatile("ld.relaxed.gpu.L2::cache_hint.u64 %0, [%1], %2;" : "=l"(v) : "l"(p), "l"(h.policy) : "memory");
    return v;
  }
#endif
  (void)h;
  return client_atomic<uint64_t>(*const_cast<uint64_t*>(p)).load(memory_order_relaxed);
}

// Four consecutive words (16-byte aligned), loaded together: the loads are
// in flight at once, so a directory scan costs one round trip per four ways
// instead of one per way.
DW_HD DW_FORCEINLINE void meta_load4_relaxed(const uint64_t* p, meta_hint h, uint64_t v[4]) {
#if DW_DEVICE_CODE
  if (h.on) {
    asm volatile("ld.relaxed.gpu.L2::cache_hint.v2.u64 {%0, %1}, [%2], %3;"
                 : "=l"(v[0]), "=l"(v[1])
                 : "l"(p), "l"(h.policy)
                 : "memory");
    asm volatile("ld.relaxed.gpu.L2::cache_hint.v2.u64 {%0, %1}, [%2], %3;"
                 : "=l"(v[2]), "=l"(v[3])
                 : "l"(p + 2), "l"(h.policy)
                 : "memory");
    return;
  }
  asm volatile("ld.relaxed.gpu.v2.u64 {%0, %1}, [%2];" : "=l"(v[0]), "=l"(v[1]) : "l"(p) : "memory");
  asm volatile("ld.relaxed.gpu.v2.u64 {%0, %1}, [%2];" : "=l"(v[2]), "=l"(v[3]) : "l"(p + 2) : "memory");
#else
  (void)h;
  for (int i = 0; i < 4; ++i) v[i] = client_atomic<uint64_t>(*const_cast<uint64_t*>(p + i)).load(memory_order_relaxed);
#endif
}

DW_HD DW_FORCEINLINE uint32_t meta_load_relaxed32(const uint32_t* p, meta_hint h) {
#if DW_DEVICE_CODE
  if (h.on) {
    uint32_t v;
    asm volatile("ld.relaxed.gpu.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(h.policy) : "memory");
    return v;
  }
#endif
  (void)h;
  return client_atomic<uint32_t>(*const_cast<uint32_t*>(p)).load(memory_order_relaxed);
}

DW_HD DW_FORCEINLINE uint32_t meta_load_acquire(const uint32_t* p, meta_hint h) {
#if DW_DEVICE_CODE
  if (h.on) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(h.policy) : "memory");
    return v;
  }
#endif
  (void)h;
  return client_atomic<uint32_t>(*const_cast<uint32_t*>(p)).load(memory_order_acquire);
}

// A pin: fetch_add(1) with acquire (what follows reads the page), returning
// the state before it. Not acq_rel: nothing before the pin needs to be seen
// by whoever reads the state next, and a release would first wait for this
// thread's last unpin to reach L2.
DW_HD DW_FORCEINLINE uint32_t meta_pin(uint32_t* p, meta_hint h) {
#if DW_DEVICE_CODE
  if (h.on) {
    uint32_t v;
    asm volatile("atom.acquire.gpu.add.L2::cache_hint.u32 %0, [%1], 1, %2;" : "=r"(v) : "l"(p), "l"(h.policy) : "memory");
    return v;
  }
#endif
  (void)h;
  return client_atomic<uint32_t>(*p).fetch_add(1, memory_order_acquire);
}

// An unpin: fetch_sub(1) with release (the page's reads and writes come
// before it), its result unused.
DW_HD DW_FORCEINLINE void meta_unpin(uint32_t* p, meta_hint h) {
#if DW_DEVICE_CODE
  if (h.on) {
    asm volatile("red.release.gpu.add.L2::cache_hint.u32 [%0], %1, %2;" ::"l"(p), "r"(~0u), "l"(h.policy) : "memory");
    return;
  }
#endif
  (void)h;
  client_atomic<uint32_t>(*p).fetch_sub(1, memory_order_release);
}

}  // namespace deepwell::detail
