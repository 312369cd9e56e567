// Launch-time checks for kernels that use a GPU page cache (CUDA code only).
// A warp may pin up to pages_per_warp pages at once, so the cache must hold
// that many pages for every warp that can be resident together, or warps
// could wait on each other for slots until their deadlines.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/link/gpu_client.hpp"

namespace deepwell {

// Throws deepwell::error naming `what` unless p is memory kernels on CUDA
// device `device` may address (its device memory, managed memory, or
// pinned and mapped host memory); `owner` names what is on that device
// ("the array", "the kv store's cache"). Defined in src/cuda/check_cuda.cu.
void check_device_pointer(const void* p, int device, const char* what, const char* owner);

// Warps of `kernel` that can be resident at once with this launch shape.
template <class Kernel>
uint64_t resident_warps(Kernel kernel, uint64_t grid_blocks, int block_threads, size_t shared_bytes = 0) {
  int device = 0, sms = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_threads, shared_bytes),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  const uint64_t blocks = std::min<uint64_t>(grid_blocks, uint64_t(per_sm) * uint64_t(sms));
  return blocks * uint64_t((block_threads + 31) / 32);
}

// Throws deepwell::error, naming the numbers, if `cache` is too small for
// this launch. `cursors`: array_cursors each thread keeps alive while it
// makes other accesses (each holds one page pinned).
template <class Kernel>
void check_launch(const page_cache& cache, Kernel kernel, uint64_t grid_blocks, int block_threads,
                  size_t shared_bytes = 0, uint32_t cursors = 0) {
  cache.check_capacity(resident_warps(kernel, grid_blocks, block_threads, shared_bytes), cursors);
}

}  // namespace deepwell
