// Gathers and scatters of whole rows on a CUDA stream (deepwell_cuda), for
// host code that has an index array in GPU memory: the Python package's
// gather and scatter. The kernels are rows_ref's warp operations; the grid is
// sized to the GPU and to the cache (every resident warp may pin 32 pages).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/views/rows.hpp"

namespace deepwell {

enum class index_type { i32, i64 };

// Warps of row kernels that may be resident at once on one cache, so that
// each can pin 32 pages: cache.slots() / 32. A launch uses at most this many.
uint64_t row_warp_budget(const page_cache& cache);
// Throws deepwell::error, naming the numbers, if the cache cannot serve one
// block of a row kernel (8 warps of 32 pages).
void check_row_capacity(const page_cache& cache);

// Launches that may run at the same time on one cache (different streams)
// share a gate: a zeroed device counter of the warps inside row kernels. A
// block enters only when its warps fit the budget, so concurrent launches
// never have more warps pinning pages than the cache holds. nullptr: no
// gate (one launch at a time).
struct row_gate {
  unsigned int* warps = nullptr;
};

// Rows idx[0 .. n) into dst (n x r.row_bytes bytes). idx and dst are device
// memory (or mapped host memory) of the cache's device. Asynchronous on
// `stream`; failures show in the cache's last_error() and in r.report.
// Throws deepwell::error if the cache is too small for one block.
void gather_rows_async(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n,
                       void* dst, cudaStream_t stream, row_gate gate = {});
// src rows [0 .. n) into rows idx[0 .. n) (pages marked dirty; flush() writes them).
void scatter_rows_async(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n,
                        const void* src, cudaStream_t stream, row_gate gate = {});

}  // namespace deepwell
