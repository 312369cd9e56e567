// Kernels and launchers of gpu_rows.hpp.
#include <algorithm>
#include <string>

#include "deepwell/gpu_client.hpp"
#include "deepwell/gpu_launch.hpp"
#include "deepwell/gpu_rows.hpp"

namespace deepwell {

namespace {

constexpr int block_threads = 256;
constexpr uint32_t warps_per_block = block_threads / 32;

// Warps stride over the index array: 32 rows a step when rows are packed in
// pages (a row per lane), else one. Control flow is warp-uniform, so the
// warp is the full warp.
template <class Index, bool Scatter>
__global__ void __launch_bounds__(block_threads, 2)
    rows_kernel(rows_ref r, const Index* idx, uint64_t n, uint8_t* mem) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  const uint64_t per = r.packed() ? 32 : 1;
  for (uint64_t b = warp * per; b < n; b += warps * per) {
    const uint64_t count = n - b < per ? n - b : per;
    uint8_t* rows = mem + b * r.row_bytes;
    if constexpr (Scatter)
      r.scatter(gpu_full_warp{}, idx + b, count, rows);
    else
      r.gather(gpu_full_warp{}, idx + b, count, rows);
  }
}

template <class Index, bool Scatter>
void launch(const page_cache& cache, const rows_ref& r, const void* idx, uint64_t n, uint8_t* mem,
            cudaStream_t stream) {
  if (n == 0) return;
  if (!cache.on_gpu()) throw error("gather/scatter of rows on the GPU needs a GPU page cache");
  if (r.row_bytes == 0) throw error("rows of 0 bytes");
  auto kernel = rows_kernel<Index, Scatter>;
  const uint64_t per = r.packed() ? 32 : 1;
  const uint64_t steps = (n + per - 1) / per;
  const uint64_t wanted = (steps + warps_per_block - 1) / warps_per_block;
  // Every resident warp may pin pages_per_warp pages: no more blocks than
  // the cache can serve at once.
  const uint64_t by_cache = cache.slots() / (uint64_t(pages_per_warp) * warps_per_block);
  if (by_cache == 0)
    throw error("the page cache has " + std::to_string(cache.slots()) + " pages; a row gather needs at least " +
                std::to_string(pages_per_warp * warps_per_block) + " (one block of " +
                std::to_string(warps_per_block) + " warps, 32 pages each)");
  const uint64_t blocks = std::max<uint64_t>(1, std::min({wanted, by_cache, resident_warps(kernel, wanted, block_threads) /
                                                                               warps_per_block}));
  kernel<<<unsigned(blocks), block_threads, 0, stream>>>(r, static_cast<const Index*>(idx), n, mem);
  check_cuda(cudaGetLastError(), "launching the row kernel");
}

template <bool Scatter>
void dispatch(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n, uint8_t* mem,
              cudaStream_t stream) {
  if (t == index_type::i32)
    launch<int32_t, Scatter>(cache, r, idx, n, mem, stream);
  else
    launch<int64_t, Scatter>(cache, r, idx, n, mem, stream);
}

}  // namespace

void gather_rows_async(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n,
                       void* dst, cudaStream_t stream) {
  dispatch<false>(cache, r, idx, t, n, static_cast<uint8_t*>(dst), stream);
}

void scatter_rows_async(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n,
                        const void* src, cudaStream_t stream) {
  dispatch<true>(cache, r, idx, t, n, static_cast<uint8_t*>(const_cast<void*>(src)), stream);
}

}  // namespace deepwell
