// Warp policies: the few collective operations the cache's coalescing code
// needs, so that one implementation runs as a real GPU warp, as a single
// thread (CPU clients, or a GPU thread that wants no coalescing), and as a
// CPU warp emulator in tests (tests/cpu/warp_emulator.hpp).
//
// Every collective is called by all lanes of `mask` with the same mask, the
// rule of the CUDA *_sync intrinsics; the cache code calls them only with
// the mask it read at entry, never inside lane-dependent branches.
#pragma once
#include <cstdint>

#include "deepwell/common/config.hpp"

namespace deepwell {

// One thread is a warp of one lane: no coalescing, no collectives.
struct one_lane {
  DW_HD unsigned lane() const { return 0; }
  DW_HD unsigned active() const { return 1u; }
  DW_HD unsigned match_any(unsigned, uint64_t) const { return 1u; }
  DW_HD unsigned ballot(unsigned, bool p) const { return p ? 1u : 0u; }
  DW_HD uint32_t shfl(unsigned, uint32_t v, unsigned) const { return v; }
  DW_HD void sync(unsigned) const {}
  // Which of the caller's queues this thread uses.
  DW_HD uint32_t queue_hint() const { return 0; }
};

#if defined(__CUDACC__)
// The calling GPU warp's converged lanes.
struct gpu_warp {
  DW_DEVICE unsigned lane() const {
    unsigned l;
    asm("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
  }
  DW_DEVICE unsigned active() const { return __activemask(); }
  DW_DEVICE unsigned match_any(unsigned mask, uint64_t key) const { return __match_any_sync(mask, key); }
  DW_DEVICE unsigned ballot(unsigned mask, bool p) const { return __ballot_sync(mask, p); }
  DW_DEVICE uint32_t shfl(unsigned mask, uint32_t v, unsigned src) const { return __shfl_sync(mask, v, int(src)); }
  DW_DEVICE void sync(unsigned mask) const { __syncwarp(mask); }
  // Queues are chosen per SM and warp slot, so that warps that run side by
  // side spread over queues and a queue's tickets see little contention.
  DW_DEVICE uint32_t queue_hint() const {
    unsigned sm, warp;
    asm("mov.u32 %0, %%smid;" : "=r"(sm));
    asm("mov.u32 %0, %%warpid;" : "=r"(warp));
    return sm * 8 + (warp & 7);
  }
};

// A whole warp whose 32 lanes are known to make every collective call
// together (kernels whose control flow is warp-uniform at those calls).
// __activemask() only reports the lanes that happen to run together at that
// instant: after divergent code (a CAS loop in one lane) it can return part
// of the warp even where all 32 lanes will arrive, and code that splits work
// by rank among active() lanes would then give two groups the same ranks.
// With the full mask, every *_sync call waits for all lanes instead.
struct gpu_full_warp : gpu_warp {
  DW_DEVICE unsigned active() const { return 0xFFFFFFFFu; }
};

// A GPU thread on its own, a warp of one lane: for calls that lanes make at
// moments of their own (an array_cursor moving to another page inside a
// lane's loop). Collectives with __activemask() there are unsafe: two groups
// of lanes that each read their own mask may be reconverged by the hardware
// in the middle of a call, and then shuffle with different masks. The first
// GPU run of the cursor read a garbage pointer that way. No coalescing, no
// collectives; the queues spread as a warp's do.
struct gpu_lane : one_lane {
  DW_DEVICE uint32_t queue_hint() const { return gpu_warp{}.queue_hint(); }
};
#endif

// The warp policy of the calling thread, for use inside DW_HD function
// bodies: the real warp in device code, one lane on the host.
#if DW_DEVICE_CODE
using this_thread_warp = gpu_warp;
using this_thread_alone = gpu_lane;
#else
using this_thread_warp = one_lane;
using this_thread_alone = one_lane;
#endif

// 64-bit values through a 32-bit shuffle.
template <class Warp>
DW_HD DW_FORCEINLINE uint64_t shfl64(const Warp& w, unsigned mask, uint64_t v, unsigned src) {
  const uint32_t lo = w.shfl(mask, uint32_t(v), src);
  const uint32_t hi = w.shfl(mask, uint32_t(v >> 32), src);
  return uint64_t(hi) << 32 | lo;
}

DW_HD DW_FORCEINLINE unsigned lowest_lane(unsigned mask) {
#if DW_DEVICE_CODE
  return unsigned(__ffs(int(mask)) - 1);
#else
  return unsigned(__builtin_ctz(mask));
#endif
}

DW_HD DW_FORCEINLINE unsigned popcount32(unsigned v) {
#if DW_DEVICE_CODE
  return unsigned(__popc(v));
#else
  return unsigned(__builtin_popcount(v));
#endif
}

// This lane's rank among the lanes of `mask` (0 for the lowest).
template <class Warp>
DW_HD DW_FORCEINLINE unsigned lane_rank(const Warp& w, unsigned mask) {
  return popcount32(mask & ((1u << w.lane()) - 1));
}

// Items [0, count) dealt to the lanes of `mask` a round at a time: in the
// round at `base` the lane of rank r takes item base + r, and every lane
// runs every round (so fn may hold the warp's collectives), told by
// item < count whether it has one. fn(base, item).
template <class Warp, class Fn>
DW_HD DW_FORCEINLINE void in_rounds(const Warp& w, unsigned mask, uint64_t count, Fn&& fn) {
  const unsigned lanes = popcount32(mask), rank = lane_rank(w, mask);
  for (uint64_t base = 0; base < count; base += lanes) fn(base, base + rank);
}

}  // namespace deepwell
