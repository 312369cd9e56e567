// Four consecutive 64-bit words loaded together with relaxed atomics: on
// the GPU two 16-byte relaxed loads issued back to back, so the four are in
// flight at once and cost one round trip, where a loop of scalar atomic
// loads (each waited for before the next: they are volatile to the
// compiler) cost four. The directory's scan reads a bucket's keys this way,
// and the hit path their slots beside them.
// Part of page_cache_ref; self-contained.
#pragma once
#include <cstdint>

#include "deepwell/common/config.hpp"
#include "deepwell/protocol/shared_atomic.hpp"

namespace deepwell::detail {

// `p` must be 16-byte aligned.
DW_HD DW_FORCEINLINE void load4_relaxed(const uint64_t* p, uint64_t v[4]) {
#if DW_DEVICE_CODE
  asm volatile("ld.relaxed.gpu.v2.u64 {%0, %1}, [%2];" : "=l"(v[0]), "=l"(v[1]) : "l"(p) : "memory");
  asm volatile("ld.relaxed.gpu.v2.u64 {%0, %1}, [%2];" : "=l"(v[2]), "=l"(v[3]) : "l"(p + 2) : "memory");
#else
  for (int i = 0; i < 4; ++i) v[i] = client_atomic<uint64_t>(*const_cast<uint64_t*>(p + i)).load(memory_order_relaxed);
#endif
}

// Four consecutive 32-bit words the same way (one 16-byte load).
DW_HD DW_FORCEINLINE void load4_relaxed(const uint32_t* p, uint32_t v[4]) {
#if DW_DEVICE_CODE
  asm volatile("ld.relaxed.gpu.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "l"(p)
               : "memory");
#else
  for (int i = 0; i < 4; ++i) v[i] = client_atomic<uint32_t>(*const_cast<uint32_t*>(p + i)).load(memory_order_relaxed);
#endif
}

}  // namespace deepwell::detail
