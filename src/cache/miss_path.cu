// The page cache's miss path, compiled once with relocatable device code
// and a register cap (CMakeLists.txt: deepwell_miss_path), for kernels that
// include deepwell/cache/miss_path.hpp. Device pass only: acquire_rest<gpu_warp>
// calls device-only warp functions, and the host needs no instance.
#include "deepwell/cache/miss_path.hpp"
#include "deepwell/cache/page_cache_ref.hpp"

#ifdef __CUDA_ARCH__
namespace deepwell {
template warp_pin page_cache_ref::acquire_rest<gpu_warp>(const gpu_warp&, bool, uint64_t, uint32_t, uint32_t,
                                                         const void*, warp_pin, bool, uint32_t) const;
}  // namespace deepwell
#endif
