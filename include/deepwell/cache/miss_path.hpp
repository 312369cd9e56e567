// Opt-in: the page cache's miss path compiled once, in the library
// deepwell_miss_path, instead of in every kernel that reads through the
// cache. Include this first in a translation unit compiled with relocatable
// device code (CMake: CUDA_SEPARABLE_COMPILATION ON) and link
// deepwell::miss_path.
//
// Why: ptxas gives a kernel the registers of the hungriest function it can
// call. Compiled into the kernel, the miss path (fills, evictions, waits)
// takes 255 registers, so an a[i] kernel runs one block of 256 threads an
// SM although its hit path needs about 46. Compiled apart under a register
// cap (the miss path spills; it waits for storage anyway), the kernel gets
// the cap's registers, 64, and four blocks an SM, with no __launch_bounds__
// of the user's (docs/analytics.md, "The element hit").
#pragma once
#include "deepwell/cache/page_cache_ref.hpp"
#include "deepwell/common/warp.hpp"

#if defined(__CUDACC__)
namespace deepwell {
// The one instance the library's device code uses (acquire on gpu_warp);
// src/cache/miss_path.cu defines it.
extern template warp_pin page_cache_ref::acquire_rest<gpu_warp>(const gpu_warp&, bool, uint64_t, uint32_t, uint32_t,
                                                                  const void*, warp_pin, bool, uint32_t) const;
}  // namespace deepwell
#endif
