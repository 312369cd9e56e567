// Copies that fill staging buffers the GPU reads next. Non-temporal stores
// send the lines to memory instead of leaving them dirty in the CPU's
// caches, where every GPU read over the host link would have to snoop them
// out. The sfence at the end orders the streamed stores before the release
// store that posts the completion (x86 release stores do not order them).
// DEEPWELL_STAGING_STORES=cached selects plain memcpy (for comparison).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace deepwell::detail {

inline bool staging_streaming() {
  static const bool on = [] {
    const char* v = std::getenv("DEEPWELL_STAGING_STORES");
    return !(v && std::strcmp(v, "cached") == 0);
  }();
  return on;
}

inline void copy_to_staging(void* dst, const void* src, size_t len) {
#if defined(__SSE2__)
  if (staging_streaming() && (reinterpret_cast<uintptr_t>(dst) & 15) == 0 && len >= 64) {
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

}  // namespace deepwell::detail
