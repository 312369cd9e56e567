// A diagnostic of the page cache, off unless a translation unit defines
// DW_CACHE_PHASE_TIMING to 1 before including page_cache_ref.hpp (the
// gpu_array_bench_phases target): GPU fills through the controller then
// report the nanoseconds they spend waiting for a command id, submitting
// (the SQ entry, its fence, the doorbell), waiting for the completion, and
// copying the page in, to dw_cache_phase_add(phase, ns), which that
// translation unit defines (phase 4 counts the fills, ns = 1).
#pragma once

#ifndef DW_CACHE_PHASE_TIMING
#define DW_CACHE_PHASE_TIMING 0
#endif
#if DW_CACHE_PHASE_TIMING && defined(__CUDACC__)
__device__ void dw_cache_phase_add(int phase, unsigned long long ns);
#endif
