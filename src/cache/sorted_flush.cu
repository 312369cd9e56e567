// flush() in key order: see sorted_flush.hpp.
#include "cache/sorted_flush.hpp"

#include <cub/device/device_radix_sort.cuh>
#include <string>

#include "deepwell/common/error.hpp"
#include "deepwell/common/warp.hpp"

namespace deepwell::detail {
namespace {

constexpr unsigned block_threads = 256;

// Each dirty slot's key and index, appended in any order.
__global__ void collect_dirty(page_cache_ref c, uint64_t* keys, uint32_t* slots, uint32_t* count) {
  for (uint32_t s = blockIdx.x * blockDim.x + threadIdx.x; s < c.slots(); s += gridDim.x * blockDim.x) {
    uint64_t key;
    if (!c.dirty_key(s, key)) continue;
    const uint32_t i = atomicAdd(count, 1u);
    keys[i] = key;
    slots[i] = s;
  }
}

// Warp k writes back sorted entries [32k, 32k + 32) as run k (one queue).
// Failures are left to the slot-order pass (the pages stay dirty).
__global__ void write_back_sorted(page_cache_ref c, const uint32_t* slots, uint32_t n) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  const uint32_t lane = threadIdx.x % 32;
  for (uint32_t base = warp * 32; base < n; base += warps * 32) {
    const uint32_t i = base + lane;
    (void)c.flush_slots_warp(gpu_warp{}, i < n ? slots[i] : 0, i < n, base / 32);
  }
}

unsigned grid_for(uint64_t threads) {
  const uint64_t blocks = (threads + block_threads - 1) / block_threads;
  return unsigned(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}

}  // namespace

void flush_in_key_order(const page_cache_ref& c, cudaStream_t stream) {
  const uint32_t n_slots = c.slots();
  if (n_slots == 0) return;
  // One allocation: the count, keys and slots twice (the sort's input and
  // output), then cub's scratch.
  size_t sort_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const uint64_t*>(nullptr),
                                  static_cast<uint64_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                  static_cast<uint32_t*>(nullptr), int(n_slots), 0, 64, stream);
  auto align = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t keys_bytes = align(size_t(n_slots) * 8), slots_bytes = align(size_t(n_slots) * 4);
  const size_t total = 256 + 2 * keys_bytes + 2 * slots_bytes + align(sort_bytes);
  uint8_t* mem = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&mem), total, stream) != cudaSuccess) {
    (void)cudaGetLastError();  // no room for the scratch: the slot-order pass writes everything
    return;
  }
  auto* count = reinterpret_cast<uint32_t*>(mem);
  auto* keys_in = reinterpret_cast<uint64_t*>(mem + 256);
  auto* keys_out = reinterpret_cast<uint64_t*>(mem + 256 + keys_bytes);
  auto* slots_in = reinterpret_cast<uint32_t*>(mem + 256 + 2 * keys_bytes);
  auto* slots_out = reinterpret_cast<uint32_t*>(mem + 256 + 2 * keys_bytes + slots_bytes);
  void* sort_tmp = mem + 256 + 2 * keys_bytes + 2 * slots_bytes;
  uint32_t n = 0;
  cudaError_t e = cudaMemsetAsync(count, 0, sizeof(*count), stream);
  if (e == cudaSuccess) {
    collect_dirty<<<grid_for(n_slots), block_threads, 0, stream>>>(c, keys_in, slots_in, count);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpyAsync(&n, count, sizeof(n), cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess && n > 0) {
    e = cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, keys_in, keys_out, slots_in, slots_out, int(n), 0, 64,
                                        stream);
    if (e == cudaSuccess) {
      write_back_sorted<<<grid_for(uint64_t(n)), block_threads, 0, stream>>>(c, slots_out, n);
      e = cudaGetLastError();
    }
  }
  cudaFreeAsync(mem, stream);
  cudaStreamSynchronize(stream);
  if (e != cudaSuccess) throw error(std::string("flush in key order: ") + cudaGetErrorString(e));
}

}  // namespace deepwell::detail
