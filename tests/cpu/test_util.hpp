// Shared helpers for the CPU tests: the common data pattern and scratch
// files (tests/common), and work sizes.
#pragma once
#include <cstdint>

#include "../common/pattern.hpp"
#include "../common/scratch_file.hpp"

namespace deepwell::test {

// Work sizes shrink under ThreadSanitizer, which is ~10x slower.
#if defined(DEEPWELL_TSAN_BUILD)
constexpr uint64_t scale_div = 10;
#else
constexpr uint64_t scale_div = 1;
#endif

}  // namespace deepwell::test
