// Loads and stores of fields shared between a client (CPU thread or GPU
// thread) and the controller. docs/architecture.md: such fields have a single writer and
// are never read-modify-written (CPU-GPU atomics on host memory are not
// supported on our machines); ordering comes from acquire/release at system
// scope (ld.acquire.sys / st.release.sys on the GPU).
#pragma once
#include <cuda/atomic>
#include <cstdint>
#include <ctime>
#if !defined(__CUDA_ARCH__)
#include <sched.h>
#endif

#include "deepwell/common/config.hpp"

namespace deepwell {

using cuda::std::memory_order_acq_rel;
using cuda::std::memory_order_acquire;
using cuda::std::memory_order_relaxed;
using cuda::std::memory_order_release;

template <class T>
DW_HD DW_FORCEINLINE T shared_load_acquire(const T* p) {
  return cuda::atomic_ref<T, cuda::thread_scope_system>(*const_cast<T*>(p)).load(memory_order_acquire);
}
template <class T>
DW_HD DW_FORCEINLINE T shared_load_relaxed(const T* p) {
  return cuda::atomic_ref<T, cuda::thread_scope_system>(*const_cast<T*>(p)).load(memory_order_relaxed);
}
template <class T>
DW_HD DW_FORCEINLINE void shared_store_release(T* p, T v) {
  cuda::atomic_ref<T, cuda::thread_scope_system>(*p).store(v, memory_order_release);
}
template <class T>
DW_HD DW_FORCEINLINE void shared_store_relaxed(T* p, T v) {
  cuda::atomic_ref<T, cuda::thread_scope_system>(*p).store(v, memory_order_relaxed);
}

// A full fence at system scope: orders a thread's earlier stores to host
// memory (a command) before its later stores (a ready mark another thread
// will turn into a doorbell write).
DW_HD DW_FORCEINLINE void system_fence() { cuda::atomic_thread_fence(cuda::std::memory_order_seq_cst, cuda::thread_scope_system); }

// Client-private atomics (tickets, locks, pools): client memory only, never
// shared with the controller. Device scope on the GPU is enough for them.
template <class T>
using client_atomic = cuda::atomic_ref<T, cuda::thread_scope_device>;

// Orders the loads of `v` (already made) before this thread's later
// loads: the check of a seqlock-style read (page_cache_ref::read_hit)
// must not read its sequence word before the data it vouches for. On the
// GPU the later load's address is made to depend on every word of v: the
// result, added to its index, is v's words ANDed with `opaque_zero`, a zero
// the compiler cannot know (page_cache_ref::opaque_zero, a kernel
// parameter), so the load cannot issue before the data is in; at device
// scope both are served by L2, where every write is ordered. Until
// 2026-11-28 the zero was a literal in inline asm ("and.b32 %0, %1, 0"):
// ptxas folded it, and the SASS read the state word beside the data, not
// after it (cuobjdump -sass of examples/gather), which let a slot be evicted
// and refilled between the two reads. On the host an acquire fence.
template <class T>
DW_HD DW_FORCEINLINE uint32_t zero_after_loads(const T& v, uint32_t opaque_zero) {
#if DW_DEVICE_CODE
  uint32_t f = 0;
  if constexpr (sizeof(T) % 4 == 0) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
    for (unsigned i = 0; i < sizeof(T) / 4; ++i) f ^= w[i];
  } else {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&v);
    for (unsigned i = 0; i < sizeof(T); ++i) f ^= b[i];
  }
  uint32_t z;
  asm volatile("and.b32 %0, %1, %2;" : "=r"(z) : "r"(f), "r"(opaque_zero));
  return z;
#else
  (void)v;
  (void)opaque_zero;
  cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_device);
  return 0;
#endif
}

// A pause inside spin loops.
DW_HD DW_FORCEINLINE void spin_pause(unsigned ns = 64) {
#if DW_DEVICE_CODE
  __nanosleep(ns);
#else
  (void)ns;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
#endif
}

// The i-th wait of a spin loop. CPU threads yield after a short spin: CPU
// clients may outnumber cores (CI has two) and the controller's pollers
// must get to run.
DW_HD DW_FORCEINLINE void backoff(uint32_t i) {
#if DW_DEVICE_CODE
  __nanosleep(i < 16 ? 32 : 200);
#else
  if (i < 64)
    spin_pause();
  else
    sched_yield();
#endif
}

// Nanoseconds from a monotonic clock: %globaltimer on the GPU,
// CLOCK_MONOTONIC on the host. Deadlines in waits are expressed with it.
DW_HD DW_FORCEINLINE uint64_t now_ns() {
#if DW_DEVICE_CODE
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
#endif
}

}  // namespace deepwell
