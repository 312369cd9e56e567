// Gathers and scatters of whole rows on a CUDA stream (deepwell_cuda), for
// host code that has an index array in GPU memory: the Python package's
// gather and scatter. The kernels are rows_ref's warp operations; the grid is
// sized to the GPU and to the cache (every resident warp may pin 32 pages).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "deepwell/page_cache.hpp"
#include "deepwell/rows.hpp"

namespace deepwell {

enum class index_type { i32, i64 };

// Rows idx[0 .. n) into dst (n x r.row_bytes bytes). idx and dst are device
// memory (or mapped host memory) of the cache's device. Asynchronous on
// `stream`; failures show in the cache's last_error() and in r.report.
// Throws deepwell::error if the cache is too small for a single block.
void gather_rows_async(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n,
                       void* dst, cudaStream_t stream);
// src rows [0 .. n) into rows idx[0 .. n) (pages marked dirty; flush() writes them).
void scatter_rows_async(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n,
                        const void* src, cudaStream_t stream);

}  // namespace deepwell
