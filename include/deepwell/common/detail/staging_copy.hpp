// Copies that fill staging buffers the GPU reads next. Three kinds of store:
//  - streaming (the default): non-temporal stores send the lines to memory
//    instead of leaving them dirty in the CPU's caches, where every GPU read
//    over the host link would have to snoop them out of a core;
//  - cached: plain memcpy (for comparison);
//  - demote: memcpy, then `cldemote` on each line, which asks the core to
//    push it from its private caches to the shared last-level cache, where
//    a GPU read finds it without a trip to memory (a no-op on CPUs without
//    the instruction: it is encoded as a hint).
// The sfence at the end orders the streamed stores before the release store
// that posts the completion (x86 release stores do not order them).
// DEEPWELL_STAGING_STORES=streaming|cached|demote picks the kind.
// Internal to the targets; public (under detail/) so that host_copy_bench
// measures the controller's own copy.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "deepwell/common/defaults.hpp"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace deepwell::detail {

enum class staging_stores { streaming, cached, demote };

// The kind a name stands for: "cached", "demote", else streaming.
inline staging_stores staging_stores_from(const char* v) {
  if (v && std::strcmp(v, "cached") == 0) return staging_stores::cached;
  if (v && std::strcmp(v, "demote") == 0) return staging_stores::demote;
  return staging_stores::streaming;
}

inline const char* staging_stores_name(staging_stores k) {
  return k == staging_stores::cached ? "cached" : k == staging_stores::demote ? "demote" : "streaming";
}

// This process's kind, from DEEPWELL_STAGING_STORES (read once; a name it
// does not know is refused: defaults.hpp).
inline staging_stores default_staging_stores() {
  static const staging_stores kind = staging_stores_from(defaults::staging_stores().c_str());
  return kind;
}

// Asks the core to move [p, p + len)'s lines from its private caches to the
// last-level cache (see `demote` above).
inline void demote_lines(const void* p, size_t len) {
#if defined(__x86_64__)
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + len;
  for (uintptr_t line = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(63); line < end; line += 64)
    asm volatile("cldemote (%0)" ::"r"(line) : "memory");
#else
  (void)p, (void)len;
#endif
}

// Copies with non-temporal stores where dst is 16-byte aligned and the copy
// at least a line (else memcpy), then sfence. For destinations nobody
// reads soon: the stores need no read for ownership of the lines and leave
// the copying core's caches to its own work.
inline void copy_streaming(void* dst, const void* src, size_t len) {
#if defined(__SSE2__)
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0 && len >= 64) {
    auto* d = static_cast<__m128i*>(dst);
    auto* s = static_cast<const __m128i*>(src);
    const size_t n = len / 64;
    for (size_t i = 0; i < n; ++i) {
      const __m128i a = _mm_loadu_si128(s + 4 * i), b = _mm_loadu_si128(s + 4 * i + 1);
      const __m128i c = _mm_loadu_si128(s + 4 * i + 2), e = _mm_loadu_si128(s + 4 * i + 3);
      _mm_stream_si128(d + 4 * i, a);
      _mm_stream_si128(d + 4 * i + 1, b);
      _mm_stream_si128(d + 4 * i + 2, c);
      _mm_stream_si128(d + 4 * i + 3, e);
    }
    if (len % 64) std::memcpy(static_cast<char*>(dst) + n * 64, static_cast<const char*>(src) + n * 64, len % 64);
    _mm_sfence();
    return;
  }
#endif
  std::memcpy(dst, src, len);
}

inline void copy_to_staging(void* dst, const void* src, size_t len, staging_stores kind) {
  if (kind == staging_stores::streaming) return copy_streaming(dst, src, len);
  std::memcpy(dst, src, len);
  if (kind == staging_stores::demote) demote_lines(dst, len);
}

inline void copy_to_staging(void* dst, const void* src, size_t len) {
  copy_to_staging(dst, src, len, default_staging_stores());
}

}  // namespace deepwell::detail
