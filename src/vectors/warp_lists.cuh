// What the GPU search and the GPU build share: device memory owned by an
// object, a warp's seen set, and a warp's sorted candidate list.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/common/detail/hash.hpp"
#include "deepwell/vectors/distance.hpp"

namespace deepwell::vectors {

template <class T>
struct device_buffer {
  T* p = nullptr;
  uint64_t n = 0;
  void reset(uint64_t count) {
    if (p) cudaFree(p);
    p = nullptr;
    n = count;
    if (count)
      check_cuda(cudaMalloc(&p, count * sizeof(T)),
                 ("cudaMalloc of " + std::to_string(count * sizeof(T)) + " bytes (vectors)").c_str());
  }
  void zero() {
    if (n) check_cuda(cudaMemset(p, 0, n * sizeof(T)), "cudaMemset");
  }
  ~device_buffer() {
    if (p) cudaFree(p);
  }
};


// Inserts `id` into the query's seen set; true if it was not there.
__device__ inline bool see(uint64_t* table, uint32_t slots, uint64_t tag, uint32_t id) {
  uint32_t s = uint32_t(detail::fmix64(id)) & (slots - 1);
  for (;;) {
    const uint64_t cur = *reinterpret_cast<volatile uint64_t*>(&table[s]);
    if ((cur & 0xFFFFFFFF00000000ull) == tag) {
      if (uint32_t(cur) == id) return false;
      s = (s + 1) & (slots - 1);
      continue;
    }
    const unsigned long long prev = atomicCAS(reinterpret_cast<unsigned long long*>(&table[s]),
                                              (unsigned long long)cur, (unsigned long long)(tag | id));
    if (prev == cur) return true;
  }
}

// Puts (d, id) into the sorted list of `size` (at most cap) entries: the
// list stays the first `cap` in the search's order. Whole warp.
__device__ inline void list_insert(float* ld, uint32_t* lid, uint8_t* lx, uint32_t& size, uint32_t cap, float d, uint32_t id,
                            unsigned lane) {
  unsigned ahead = 0;
  for (uint32_t i = lane; i < size; i += 32) ahead += before(ld[i], lid[i], d, id) ? 1u : 0u;
  const uint32_t pos = __reduce_add_sync(0xffffffffu, ahead);
  if (pos >= cap) return;
  const uint32_t grown = size < cap ? size + 1 : cap;
  for (int hi = int(grown) - 2; hi >= int(pos); hi -= 32) {
    const int i = hi - int(lane);
    const bool mine = i >= int(pos);
    float vd = 0;
    uint32_t vid = 0;
    uint8_t vx = 0;
    if (mine) vd = ld[i], vid = lid[i], vx = lx[i];
    __syncwarp();
    if (mine) ld[i + 1] = vd, lid[i + 1] = vid, lx[i + 1] = vx;
    __syncwarp();
  }
  if (lane == 0) ld[pos] = d, lid[pos] = id, lx[pos] = 0;
  __syncwarp();
  size = grown;
}

}  // namespace deepwell::vectors
