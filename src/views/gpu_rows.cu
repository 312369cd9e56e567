// Kernels and launchers of gpu_rows.hpp.
#include <algorithm>
#include <cuda/atomic>
#include <string>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/link/gpu_client.hpp"
#include "deepwell/views/gpu_rows.hpp"

namespace deepwell {

namespace {

constexpr int block_threads = 256;
constexpr uint32_t warps_per_block = block_threads / 32;

// Warps stride over the index array, `per` rows a step (up to a row per
// lane when rows are packed in pages or read in place, else one row). Control flow is warp-uniform, so
// the warp is the full warp. With a gate, a block waits at entry until its
// warps fit the budget (blocks inside never wait on blocks outside: they
// hold no pins).
template <class Index, bool Scatter>
__global__ void __launch_bounds__(block_threads, 2)
    rows_kernel(rows_ref r, const Index* idx, uint64_t n, uint8_t* mem, uint32_t per, row_gate gate,
                uint32_t budget) {
  if (gate.warps) {
    if (threadIdx.x == 0) {
      cuda::atomic_ref<unsigned, cuda::thread_scope_device> in(*gate.warps);
      for (unsigned sleep = 64;; sleep = sleep < 4096 ? sleep * 2 : sleep) {
        if (in.fetch_add(warps_per_block, cuda::memory_order_acquire) + warps_per_block <= budget) break;
        in.fetch_sub(warps_per_block, cuda::memory_order_relaxed);
        __nanosleep(sleep);
      }
    }
    __syncthreads();
  }
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  for (uint64_t b = warp * per; b < n; b += warps * per) {
    const uint64_t count = n - b < per ? n - b : per;
    uint8_t* rows = mem + b * r.row_bytes;
    if constexpr (Scatter)
      r.scatter(gpu_full_warp{}, idx + b, count, rows);
    else
      r.gather(gpu_full_warp{}, idx + b, count, rows);
  }
  if (gate.warps) {
    __syncthreads();
    if (threadIdx.x == 0)
      cuda::atomic_ref<unsigned, cuda::thread_scope_device>(*gate.warps).fetch_sub(warps_per_block,
                                                                                  cuda::memory_order_release);
  }
}

// Resident blocks of a kernel on the current device, asked once per kernel.
template <class Kernel>
uint64_t resident_blocks(Kernel kernel) {
  static const uint64_t blocks = resident_warps(kernel, ~0u >> 1, block_threads) / warps_per_block;
  return blocks;
}

template <class Index, bool Scatter>
void launch(const page_cache& cache, const rows_ref& r, const void* idx, uint64_t n, uint8_t* mem,
            cudaStream_t stream, row_gate gate) {
  if (n == 0) return;
  if (!cache.on_gpu()) throw error("gather/scatter of rows on the GPU needs a GPU page cache");
  if (r.row_bytes == 0) throw error("rows of 0 bytes");
  auto kernel = rows_kernel<Index, Scatter>;
  check_row_capacity(cache);
  const uint64_t budget = row_warp_budget(cache);
  const uint64_t cap_blocks = std::max<uint64_t>(1, std::min(budget / warps_per_block, resident_blocks(kernel)));
  // Rows per warp step: as many warps as the GPU holds for small batches
  // (latency), up to a row per lane for large ones (32 pages in flight per warp).
  const uint64_t warps = cap_blocks * warps_per_block;
  const bool many = r.packed() || (r.in_place && (!Scatter || r.in_place_writes));  // several rows per warp step
  const uint32_t per = many ? uint32_t(std::clamp<uint64_t>((n + warps - 1) / warps, 1, 32)) : 1;
  const uint64_t steps = (n + per - 1) / per;
  const uint64_t blocks = std::clamp<uint64_t>((steps + warps_per_block - 1) / warps_per_block, 1, cap_blocks);
  kernel<<<unsigned(blocks), block_threads, 0, stream>>>(r, static_cast<const Index*>(idx), n, mem, per, gate,
                                                          uint32_t(std::min<uint64_t>(budget, ~0u)));
  check_cuda(cudaGetLastError(), "launching the row kernel");
}

template <bool Scatter>
void dispatch(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n, uint8_t* mem,
              cudaStream_t stream, row_gate gate) {
  if (t == index_type::i32)
    launch<int32_t, Scatter>(cache, r, idx, n, mem, stream, gate);
  else
    launch<int64_t, Scatter>(cache, r, idx, n, mem, stream, gate);
}

}  // namespace

uint64_t row_warp_budget(const page_cache& cache) { return cache.slots() / pages_per_warp; }

void check_row_capacity(const page_cache& cache) {
  if (row_warp_budget(cache) < warps_per_block)
    throw error("the page cache has " + std::to_string(cache.slots()) + " pages; a row gather needs at least " +
                std::to_string(pages_per_warp * warps_per_block) + " (one block of " +
                std::to_string(warps_per_block) + " warps, 32 pages each)");
}

void gather_rows_async(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n,
                       void* dst, cudaStream_t stream, row_gate gate) {
  dispatch<false>(cache, r, idx, t, n, static_cast<uint8_t*>(dst), stream, gate);
}

void scatter_rows_async(const page_cache& cache, const rows_ref& r, const void* idx, index_type t, uint64_t n,
                        const void* src, cudaStream_t stream, row_gate gate) {
  dispatch<true>(cache, r, idx, t, n, static_cast<uint8_t*>(const_cast<void*>(src)), stream, gate);
}

}  // namespace deepwell
