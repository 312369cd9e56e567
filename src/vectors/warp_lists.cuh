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
  uint64_t bytes() const { return n * sizeof(T); }
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

// Inserts v into a warp's sorted array of `size` (at most cap) entries,
// keeping the first cap: the entries ahead of v stay, the rest move up one.
// List: value, ahead(i, v) (entry i comes before v), load(i), store(i, v).
// Whole warp.
template <class List>
__device__ void warp_sorted_insert(List l, uint32_t& size, uint32_t cap, const typename List::value& v, unsigned lane) {
  unsigned ahead = 0;
  for (uint32_t i = lane; i < size; i += 32) ahead += l.ahead(i, v) ? 1u : 0u;
  const uint32_t pos = __reduce_add_sync(0xffffffffu, ahead);
  if (pos >= cap) return;
  const uint32_t grown = size < cap ? size + 1 : cap;
  for (int hi = int(grown) - 2; hi >= int(pos); hi -= 32) {
    const int i = hi - int(lane);
    const bool mine = i >= int(pos);
    typename List::value x{};
    if (mine) x = l.load(i);
    __syncwarp();
    if (mine) l.store(i + 1, x);
    __syncwarp();
  }
  if (lane == 0) l.store(pos, v);
  __syncwarp();
  size = grown;
}

// A search's candidate list: distances, ids and expanded flags, in the
// search's order (distance, then id).
struct candidate_list {
  struct value {
    float d;
    uint32_t id;
    uint8_t expanded;
  };
  float* ld;
  uint32_t* lid;
  uint8_t* lx;
  __device__ bool ahead(uint32_t i, const value& v) const { return before(ld[i], lid[i], v.d, v.id); }
  __device__ value load(uint32_t i) const { return {ld[i], lid[i], lx[i]}; }
  __device__ void store(uint32_t i, const value& v) const { ld[i] = v.d, lid[i] = v.id, lx[i] = v.expanded; }
};

// Puts (d, id), not expanded, into the candidate list.
__device__ inline void list_insert(float* ld, uint32_t* lid, uint8_t* lx, uint32_t& size, uint32_t cap, float d, uint32_t id,
                                   unsigned lane) {
  warp_sorted_insert(candidate_list{ld, lid, lx}, size, cap, {d, id, 0}, lane);
}

// Puts each lane's (d, id) where `joins` holds into the candidate list, in
// lane order. Whole warp.
__device__ inline void list_insert_each(float* ld, uint32_t* lid, uint8_t* lx, uint32_t& size, uint32_t cap, bool joins,
                                        float d, uint32_t id, unsigned lane) {
  for (unsigned m = __ballot_sync(0xffffffffu, joins); m; m &= m - 1) {
    const unsigned src = __ffs(m) - 1;
    list_insert(ld, lid, lx, size, cap, __shfl_sync(0xffffffffu, d, src), __shfl_sync(0xffffffffu, id, src), lane);
  }
}

// Marks expanded, in list order, the first `room` entries not expanded yet
// for which want(id) holds, and writes their ids to out. Whole warp;
// returns how many it took.
template <class Want>
__device__ uint32_t take_unexpanded(const uint32_t* lid, uint8_t* lx, uint32_t size, uint32_t room, uint32_t* out,
                                    unsigned lane, Want want) {
  uint32_t taken = 0;
  for (uint32_t base = 0; base < size && taken < room; base += 32) {
    const uint32_t i = base + lane;
    const bool open = i < size && !lx[i] && want(lid[i]);
    const unsigned b = __ballot_sync(0xffffffffu, open);
    const uint32_t rank = __popc(b & ((1u << lane) - 1));
    if (open && taken + rank < room) {
      lx[i] = 1;
      out[taken + rank] = lid[i];
    }
    taken += min(uint32_t(__popc(b)), room - taken);
  }
  __syncwarp();
  return taken;
}

}  // namespace deepwell::vectors
