// Shared helpers for the CPU tests: deterministic data patterns and scale.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "../common/pattern.hpp"

namespace deepwell::test {

inline void fill_pattern(void* dst, uint64_t bytes, uint64_t offset, uint64_t seed = 0) {
  auto* p = static_cast<uint8_t*>(dst);
  for (uint64_t i = 0; i < bytes; i += 8) {
    const uint64_t w = pattern_word(offset + i, seed);
    std::memcpy(p + i, &w, bytes - i < 8 ? bytes - i : 8);
  }
}

// Index of the first byte that differs from the pattern, or -1.
inline int64_t check_pattern(const void* src, uint64_t bytes, uint64_t offset, uint64_t seed = 0) {
  std::vector<uint8_t> want(bytes);
  fill_pattern(want.data(), bytes, offset, seed);
  const auto* p = static_cast<const uint8_t*>(src);
  for (uint64_t i = 0; i < bytes; ++i)
    if (p[i] != want[i]) return int64_t(i);
  return -1;
}

// Work sizes shrink under ThreadSanitizer, which is ~10x slower.
#if defined(DEEPWELL_TSAN_BUILD)
constexpr uint64_t scale_div = 10;
#else
constexpr uint64_t scale_div = 1;
#endif

}  // namespace deepwell::test
