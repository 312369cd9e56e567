// The page cache's copy loops: a page into its slot (from staging or from
// host memory: the direct tier), a page out to staging for its write-back,
// and the byte ranges array_ref and rows_ref move between a page and the
// caller's memory. On the GPU the lanes of a warp share each copy with
// 16-byte words; on the CPU these are memcpy. Part of page_cache_ref;
// self-contained.
#pragma once
#include <cstdint>
#include <cstring>

#include "deepwell/common/warp.hpp"

namespace deepwell::detail {

// Copies a page's `bytes` into a slot of page_size bytes, all lanes of
// `mask` together, and zeroes the rest of the slot (the last page of a
// dataset may be short).
template <class Warp>
DW_HD void copy_in(const Warp& w, unsigned mask, uint8_t* dst, const uint8_t* src, uint32_t bytes,
                   uint32_t page_size) {
  const unsigned n = popcount32(mask);
  const unsigned rank = lane_rank(w, mask);
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
  if (bytes < page_size) {
    // The tail: the bytes up to the next 16-byte word one at a time, then
    // zero words (page_size is a multiple of 16; a zero-filled page, as
    // for an overwrite, is all words).
    const uint32_t zero_from = (bytes + 15) / 16;
    for (uint32_t i = vec * 16 + rank; i < zero_from * 16; i += n) dst[i] = i < bytes ? src[i] : uint8_t(0);
    for (uint32_t k = zero_from + rank; k < page_size / 16; k += n) d[k] = make_uint4(0, 0, 0, 0);
  }
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

// copy_in from the caller's own memory (a whole-page overwrite's bytes):
// any alignment, and on the GPU any address space (shared memory too), so
// plain loads rather than copy_in's staging loads.
template <class Warp>
DW_HD void copy_in_any(const Warp& w, unsigned mask, uint8_t* dst, const uint8_t* src, uint32_t bytes,
                       uint32_t page_size);

// A write-back's copy of a page races, by design, with threads that hold a
// pin and write other bytes of it (writers re-mark the page dirty after
// their store, so a byte the copy missed is written again:
// detail/cache/writeback.hpp). Under ThreadSanitizer the copy is left
// uninstrumented: a suppression by function name needs both stacks, and
// TSan cannot always restore the racing copy's (it then reported the race
// as a failure in about 1 run in 150 of a write-heavy test).
#if defined(__SANITIZE_THREAD__)
#define DW_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DW_UNDER_TSAN 1
#endif
#endif
#if !defined(__CUDA_ARCH__) && defined(DW_UNDER_TSAN)
__attribute__((no_sanitize("thread"), noinline)) inline void racy_page_copy(uint8_t* dst, const uint8_t* src,
                                                                           uint32_t bytes) {
  // Volatile word loads: the compiler may not turn the loop into a memcpy
  // call, which TSan would intercept.
  const volatile uint64_t* s = reinterpret_cast<const volatile uint64_t*>(src);
  volatile uint64_t* d = reinterpret_cast<volatile uint64_t*>(dst);
  for (uint32_t i = 0; i < bytes / 8; ++i) d[i] = s[i];
  for (uint32_t i = bytes / 8 * 8; i < bytes; ++i) reinterpret_cast<volatile uint8_t*>(dst)[i] = reinterpret_cast<const volatile uint8_t*>(src)[i];
}
#else
inline void racy_page_copy(uint8_t* dst, const uint8_t* src, uint32_t bytes) { std::memcpy(dst, src, bytes); }
#endif

// One T read from a page with no pin (page_cache_ref::read_hit), which a
// fill of the slot may race; the reader then throws the value away.
template <class T>
DW_HD DW_FORCEINLINE T racy_load(const uint8_t* p) {
#if DW_DEVICE_CODE
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  racy_page_copy(reinterpret_cast<uint8_t*>(&v), p, uint32_t(sizeof(T)));
  return v;
#endif
}

// Copies a page to staging (one thread): 16-byte words, a batch of loads
// before their stores.
DW_HD inline void copy_out(uint8_t* dst_bytes, const uint8_t* src_bytes, uint32_t bytes) {
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
  racy_page_copy(dst_bytes, src_bytes, bytes);
#endif
}

// All lanes of mask copy `bytes` (a multiple of 16) from a page to staging.
template <class Warp>
DW_HD void copy_out_warp(const Warp& w, unsigned mask, uint8_t* dst, const uint8_t* src, uint32_t bytes) {
  const unsigned n = popcount32(mask);
  const unsigned rank = lane_rank(w, mask);
#if DW_DEVICE_CODE
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (uint32_t i = rank; i < bytes / 16; i += n) d[i] = s[i];
#else
  const uint32_t chunk = (bytes / 16 + n - 1) / n * 16;
  const uint32_t from = rank * chunk;
  if (from < bytes) racy_page_copy(dst + from, src + from, bytes - from < chunk ? bytes - from : chunk);
#endif
}

// All lanes of mask copy `bytes` together: 16-byte words when both ends
// allow, else 4-byte words or single bytes (array_ref's ranges, rows_ref's
// rows).
template <class Warp>
DW_HD void copy_bytes(const Warp& w, unsigned mask, uint8_t* dst, const uint8_t* src, uint32_t bytes) {
  const unsigned lanes = popcount32(mask);
  const unsigned rank = lane_rank(w, mask);
  const uintptr_t a = uintptr_t(dst) | uintptr_t(src) | bytes;
#if DW_DEVICE_CODE
  if ((a & 15) == 0) {
    for (uint32_t i = rank; i < bytes / 16; i += lanes)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else if ((a & 3) == 0) {
    for (uint32_t i = rank; i < bytes / 4; i += lanes)
      reinterpret_cast<uint32_t*>(dst)[i] = reinterpret_cast<const uint32_t*>(src)[i];
  } else {
    for (uint32_t i = rank; i < bytes; i += lanes) dst[i] = src[i];
  }
#else
  (void)a;
  const uint32_t chunk = (bytes + lanes - 1) / lanes;
  const uint32_t from = rank * chunk;
  if (from < bytes) std::memcpy(dst + from, src + from, bytes - from < chunk ? bytes - from : chunk);
#endif
}

template <class Warp>
DW_HD void copy_in_any(const Warp& w, unsigned mask, uint8_t* dst, const uint8_t* src, uint32_t bytes,
                       uint32_t page_size) {
  copy_bytes(w, mask, dst, src, bytes);
  const unsigned n = popcount32(mask);
  for (uint32_t i = bytes + lane_rank(w, mask); i < page_size; i += n) dst[i] = 0;
}

}  // namespace deepwell::detail
