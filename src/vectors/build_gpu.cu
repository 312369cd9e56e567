// The index build's graph steps on the GPU (graph_engine.hpp), each giving
// the lists graph_cpu.cpp gives, to the bit:
//   - nearest centres: a warp a point, the centres in turn;
//   - the first graph: a block a tile of 32 members of a group against the
//     whole group, 32 at a time (their rows staged in shared memory), a
//     thread a pair (row_l2), each member's nearest kept in shared memory;
//     then sorted and pruned;
//   - a pass: a warp a node, the greedy search of graph_cpu's pass_worker
//     (a sorted list in shared memory, a seen set in device memory); the
//     expanded nodes and current neighbours sorted and pruned; a node whose
//     search outgrows its room is redone on the CPU;
//   - reverse edges: the edges sorted by target, each node's own and
//     incoming neighbours sorted and pruned where they exceed the degree.
// A candidate is a 64-bit key, the distance's bits above the id: distances
// are squared L2, never negative, so the keys sort as (distance, id).
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <limits>
#include <string>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/vectors/distance.hpp"
#include "deepwell/vectors/gpu_build.hpp"
#include "vectors/graph_engine.hpp"
#include "vectors/warp_lists.cuh"

namespace deepwell::vectors {

namespace {

constexpr uint64_t none_key = ~0ull;  // sorts last; its id is no_neighbour

__device__ __forceinline__ uint64_t key_of(float d, uint32_t id) {
  return (uint64_t(__float_as_uint(d)) << 32) | id;
}
__device__ __forceinline__ float key_distance(uint64_t k) { return __uint_as_float(uint32_t(k >> 32)); }
__device__ __forceinline__ uint32_t key_id(uint64_t k) { return uint32_t(k); }

struct warp_place {
  unsigned lane;
  uint64_t warp, warps;
};
__device__ __forceinline__ warp_place place() {
  const unsigned per_block = blockDim.x >> 5;
  return {threadIdx.x & 31u, uint64_t(blockIdx.x) * per_block + (threadIdx.x >> 5), uint64_t(gridDim.x) * per_block};
}

// The graph as the GPU holds it: `degree` slots a node, the first deg[i] used.
struct flat_graph {
  const uint32_t* ids;
  const uint32_t* deg;
  uint32_t degree;
};

// ---- nearest centres ----
__global__ void nearest_kernel(const float* pts, uint64_t n, uint32_t dim, uint64_t stride, const float* centres,
                               uint32_t k, uint32_t ways, uint32_t* out) {
  const warp_place w = place();
  for (uint64_t i = w.warp; i < n; i += w.warps) {
    const float* x = pts + i * stride;
    float d0 = INFINITY, d1 = INFINITY;
    uint32_t b0 = no_neighbour, b1 = no_neighbour;
    for (uint32_t j = 0; j < k; ++j) {
      const float d = warp_row_l2(x, centres + uint64_t(j) * dim, dim, w.lane);
      if (before(d, j, d0, b0)) {
        d1 = d0, b1 = b0, d0 = d, b0 = j;
      } else if (before(d, j, d1, b1)) {
        d1 = d, b1 = j;
      }
    }
    if (w.lane == 0) {
      out[i * ways] = b0;
      if (ways > 1) out[i * ways + 1] = b1;
    }
  }
}

// A sorted list of keys (distance bits, then id: build_gpu's candidates).
struct key_list {
  using value = uint64_t;
  uint64_t* keys;
  __device__ bool ahead(uint32_t i, uint64_t k) const { return keys[i] < k; }
  __device__ uint64_t load(uint32_t i) const { return keys[i]; }
  __device__ void store(uint32_t i, uint64_t k) const { keys[i] = k; }
};

// ---- the first graph: each member's `per` nearest in its group ----
struct group_params {
  const float* x;
  uint32_t dim;
  const uint64_t* group_at;  // k + 1: group g's members are members[group_at[g] .. group_at[g + 1])
  const uint32_t* members;
  const uint32_t* tile_group;  // a block's group, and its first member's place in the group
  const uint32_t* tile_first;
  const uint32_t* near;
  uint32_t ways, per;
  uint64_t* cand;  // n * ways * per keys
};

constexpr unsigned group_tile = 32, group_warps = 4;

// A row's place in a shared-memory tile: an odd stride puts the 32 lanes'
// rows in 32 different banks, so a lane each reading its own row's d-th
// float never conflicts.
__host__ __device__ inline uint32_t tile_stride(uint32_t dim) { return dim | 1u; }

// The shared memory a group block takes: its members' lists and, where it
// fits (tiles true), a step's 32 rows, which each of the block's members is
// compared with. Without the tile each lane reads its own row from device
// memory, 32 rows a load instruction, once for each of its warp's members:
// the same distances, many times the memory traffic. (A member's row is
// the same address for all 32 lanes: one transaction, left in device memory.)
__host__ __device__ inline uint64_t group_smem(uint32_t per, uint32_t dim, bool tiles) {
  return uint64_t(group_tile) * per * 8 + (tiles ? uint64_t(group_tile) * tile_stride(dim) * 4 : 0);
}

__global__ void __launch_bounds__(group_tile * group_warps) group_kernel(group_params p, bool tiles) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint64_t* lists = reinterpret_cast<uint64_t*>(smem);  // group_tile x per
  const uint32_t stride = tile_stride(p.dim);
  float* step = reinterpret_cast<float*>(lists + uint64_t(group_tile) * p.per);  // a step's rows, `stride` apart
  const unsigned lane = threadIdx.x & 31u, wib = threadIdx.x >> 5;
  const uint32_t g = p.tile_group[blockIdx.x];
  const uint64_t begin = p.group_at[g], end = p.group_at[g + 1];
  const uint64_t first = begin + p.tile_first[blockIdx.x];
  const uint32_t mine = end - first < group_tile ? uint32_t(end - first) : group_tile;
  uint32_t size[group_tile / group_warps];
  for (unsigned s = 0; s < group_tile / group_warps; ++s) size[s] = 0;
  for (uint64_t bt = begin; bt < end; bt += 32) {
    const uint64_t bi = bt + lane;
    const uint32_t b = bi < end ? p.members[bi] : no_neighbour;
    const uint32_t rows = end - bt < 32 ? uint32_t(end - bt) : 32u;
    if (tiles) {
      __syncthreads();  // the last step's rows are read by every warp
      for (uint32_t i = threadIdx.x; i < rows * p.dim; i += blockDim.x) {
        const uint32_t r = i / p.dim, c = i % p.dim;
        step[r * stride + c] = p.x[uint64_t(p.members[bt + r]) * p.dim + c];
      }
      __syncthreads();
    }
    const float* brow = tiles ? step + lane * stride : p.x + uint64_t(b != no_neighbour ? b : 0) * p.dim;
    for (unsigned s = 0; s < group_tile / group_warps; ++s) {
      const unsigned t = wib * (group_tile / group_warps) + s;
      if (t >= mine) break;
      const uint32_t a = p.members[first + t];
      uint64_t key = none_key;
      if (b != no_neighbour && b != a) key = key_of(row_l2(p.x + uint64_t(a) * p.dim, brow, p.dim), b);
      uint64_t* list = lists + uint64_t(t) * p.per;
      const uint64_t last = size[s] < p.per ? none_key : list[p.per - 1];
      for (unsigned m = __ballot_sync(0xffffffffu, key < last); m; m &= m - 1) {
        const uint64_t k = __shfl_sync(0xffffffffu, key, __ffs(m) - 1);
        warp_sorted_insert(key_list{list}, size[s], p.per, k, lane);
      }
    }
  }
  for (unsigned s = 0; s < group_tile / group_warps; ++s) {
    const unsigned t = wib * (group_tile / group_warps) + s;
    if (t >= mine) break;
    const uint32_t a = p.members[first + t];
    uint32_t way = 0;
    while (p.near[uint64_t(a) * p.ways + way] != g) ++way;
    uint64_t* out = p.cand + (uint64_t(a) * p.ways + way) * p.per;
    const uint64_t* list = lists + uint64_t(t) * p.per;
    for (uint32_t i = lane; i < p.per; i += 32) out[i] = i < size[s] ? list[i] : none_key;
  }
}

// ---- sorted candidates to lists: unique, without the node, pruned ----
struct prune_params {
  const float* x;
  uint32_t dim;
  uint64_t first_node;    // segment i is node first_node + i
  uint64_t nodes;
  const uint64_t* begin;  // segment i: keys[begin[i] .. end[i]), sorted
  const uint64_t* end;
  uint64_t* keys;         // rewritten in place
  uint32_t degree;
  float alpha;
  bool keep_if_fits;      // the reverse edges' rule: no prune when they fit
  uint32_t* out_ids;      // nodes x degree
  uint32_t* out_deg;
};

__global__ void prune_kernel(prune_params p) {
  const warp_place w = place();
  for (uint64_t i = w.warp; i < p.nodes; i += w.warps) {
    const uint32_t node = uint32_t(p.first_node + i);
    uint64_t* c = p.keys + p.begin[i];
    const uint64_t len = p.end[i] - p.begin[i];
    // Unique, without the node and padding, in place (writes trail reads).
    uint64_t m = 0, prev = none_key;
    for (uint64_t base = 0; base < len; base += 32) {
      const uint64_t j = base + w.lane;
      const uint64_t k = j < len ? c[j] : none_key;
      uint64_t before_k = __shfl_up_sync(0xffffffffu, k, 1);
      if (w.lane == 0) before_k = prev;
      const bool keep = j < len && key_id(k) != no_neighbour && key_id(k) != node && (base + w.lane == 0 || k != before_k);
      prev = __shfl_sync(0xffffffffu, k, 31);
      const unsigned b = __ballot_sync(0xffffffffu, keep);
      __syncwarp();
      if (keep) c[m + __popc(b & ((1u << w.lane) - 1))] = k;
      m += __popc(b);
      __syncwarp();
    }
    uint32_t* out = p.out_ids + i * p.degree;
    uint32_t kept = 0;
    if (p.keep_if_fits && m <= p.degree) {
      for (uint64_t j = w.lane; j < m; j += 32) out[j] = key_id(c[j]);
      kept = uint32_t(m);
    } else {
      // RobustPrune: a dropped candidate's key becomes none_key.
      for (uint64_t a = 0; a < m && kept < p.degree; ++a) {
        const uint64_t ka = c[a];
        if (ka == none_key) continue;
        if (w.lane == 0) out[kept] = key_id(ka);
        ++kept;
        const float* xa = p.x + uint64_t(key_id(ka)) * p.dim;
        for (uint64_t base = a + 1; base < m; base += 32) {
          const uint64_t j = base + w.lane;
          if (j < m) {
            const uint64_t kj = c[j];
            if (kj != none_key &&
                __fmul_rn(p.alpha, row_l2(xa, p.x + uint64_t(key_id(kj)) * p.dim, p.dim)) <= key_distance(kj))
              c[j] = none_key;
          }
        }
        __syncwarp();
      }
    }
    if (w.lane == 0) p.out_deg[i] = kept;
    for (uint32_t j = kept + w.lane; j < p.degree; j += 32) out[j] = no_neighbour;
    __syncwarp();
  }
}

// ---- a pass's search ----
struct pass_params {
  const float* x;
  uint32_t dim;
  flat_graph g;
  uint32_t entry;
  uint64_t first_node, nodes;
  uint32_t list;       // L
  uint32_t room;       // expanded nodes a search may hold
  uint64_t* seen;      // seen_slots a warp
  uint32_t seen_slots;
  uint32_t* epochs;    // a warp's nodes so far (tags its seen entries)
  uint64_t* cand;      // nodes x (room + degree) keys
  uint32_t* overflow;  // [0]: count, then the nodes
  uint32_t warp_smem;
};

__global__ void pass_kernel(pass_params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const warp_place w = place();
  const unsigned wib = threadIdx.x >> 5;
  float* ld = reinterpret_cast<float*>(smem + wib * p.warp_smem);
  uint32_t* lid = reinterpret_cast<uint32_t*>(ld + p.list);
  uint8_t* lx = reinterpret_cast<uint8_t*>(lid + p.list);
  uint64_t* seen = p.seen + w.warp * p.seen_slots;
  const uint32_t width = p.room + p.g.degree;
  for (uint64_t i = w.warp; i < p.nodes; i += w.warps) {
    const uint32_t node = uint32_t(p.first_node + i);
    const float* xp = p.x + uint64_t(node) * p.dim;
    uint64_t* out = p.cand + i * width;
    uint32_t epoch = 0;
    if (w.lane == 0) epoch = ++p.epochs[w.warp];
    const uint64_t tag = uint64_t(__shfl_sync(0xffffffffu, epoch, 0)) << 32;
    const float d0 = warp_row_l2(xp, p.x + uint64_t(p.entry) * p.dim, p.dim, w.lane);
    if (w.lane == 0) {
      ld[0] = d0, lid[0] = p.entry, lx[0] = 0;
      see(seen, p.seen_slots, tag, p.entry);
    }
    __syncwarp();
    uint32_t size = 1, done = 0;
    bool overflowed = false;
    for (;;) {
      // The first entry not yet expanded.
      uint32_t at = no_neighbour;
      for (uint32_t base = 0; base < size && at == no_neighbour; base += 32) {
        const uint32_t j = base + w.lane;
        const unsigned b = __ballot_sync(0xffffffffu, j < size && !lx[j]);
        if (b) at = base + __ffs(b) - 1;
      }
      if (at == no_neighbour) break;
      if (done == p.room) {
        overflowed = true;
        break;
      }
      const uint32_t x = lid[at];
      if (w.lane == 0) out[done] = key_of(ld[at], x), lx[at] = 1;
      ++done;
      __syncwarp();
      const uint32_t used = p.g.deg[x];
      for (uint32_t jb = 0; jb < used; jb += 32) {
        const uint32_t jj = jb + w.lane;
        const uint32_t y = jj < used ? p.g.ids[uint64_t(x) * p.g.degree + jj] : no_neighbour;
        const bool fresh = y != no_neighbour && see(seen, p.seen_slots, tag, y);
        for (unsigned fm = __ballot_sync(0xffffffffu, fresh); fm; fm &= fm - 1) {
          const uint32_t yy = __shfl_sync(0xffffffffu, y, __ffs(fm) - 1);
          const float d = warp_row_l2(xp, p.x + uint64_t(yy) * p.dim, p.dim, w.lane);
          list_insert(ld, lid, lx, size, p.list, d, yy, w.lane);
        }
      }
    }
    if (overflowed) {
      if (w.lane == 0) p.overflow[1 + atomicAdd(p.overflow, 1u)] = node;
      for (uint32_t j = w.lane; j < width; j += 32) out[j] = none_key;
      __syncwarp();
      continue;
    }
    // The node's current neighbours beside the expanded ones; padding after.
    const uint32_t used = p.g.deg[node];
    for (uint32_t j = 0; j < used; ++j) {
      const uint32_t y = p.g.ids[uint64_t(node) * p.g.degree + j];
      const float d = warp_row_l2(xp, p.x + uint64_t(y) * p.dim, p.dim, w.lane);
      if (w.lane == 0) out[done + j] = key_of(d, y);
    }
    for (uint32_t j = done + used + w.lane; j < width; j += 32) out[j] = none_key;
    __syncwarp();
  }
}

// ---- reverse edges ----
__global__ void edge_keys_kernel(flat_graph g, uint64_t n, uint64_t* keys) {
  for (uint64_t s = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; s < n * g.degree;
       s += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t u = s / g.degree;
    keys[s] = s % g.degree < g.deg[u] ? (uint64_t(g.ids[s]) << 32) | u : none_key;
  }
}

// in_at[v]: the first sorted edge whose target is v or later.
__global__ void in_start_kernel(const uint64_t* sorted, uint64_t edges, uint64_t n, uint64_t* in_at) {
  for (uint64_t v = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; v <= n; v += uint64_t(gridDim.x) * blockDim.x) {
    uint64_t lo = 0, hi = edges;
    while (lo < hi) {
      const uint64_t mid = (lo + hi) / 2;
      if ((sorted[mid] >> 32) < v) lo = mid + 1;
      else hi = mid;
    }
    in_at[v] = lo;
  }
}

__global__ void seg_size_kernel(flat_graph g, const uint64_t* in_at, uint64_t n, uint64_t* size) {
  for (uint64_t v = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < n; v += uint64_t(gridDim.x) * blockDim.x)
    size[v] = g.deg[v] + (in_at[v + 1] - in_at[v]);
}

__global__ void reverse_fill_kernel(const float* x, uint32_t dim, flat_graph g, const uint64_t* sorted,
                                    const uint64_t* in_at, uint64_t n, const uint64_t* seg_at, uint64_t* keys) {
  const warp_place w = place();
  for (uint64_t v = w.warp; v < n; v += w.warps) {
    const float* xv = x + v * dim;
    const uint32_t own = g.deg[v];
    const uint64_t in = in_at[v + 1] - in_at[v];
    uint64_t* out = keys + seg_at[v];
    for (uint64_t j = w.lane; j < own + in; j += 32) {
      const uint32_t u = j < own ? g.ids[v * g.degree + j] : uint32_t(sorted[in_at[v] + (j - own)]);
      out[j] = key_of(row_l2(xv, x + uint64_t(u) * dim, dim), u);
    }
  }
}

__global__ void begin_end_kernel(const uint64_t* at, uint64_t n, uint64_t width, uint64_t* begin, uint64_t* end) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    begin[i] = at ? at[i] : i * width;
    end[i] = at ? at[i + 1] : (i + 1) * width;
  }
}

// ---- the engine ----
unsigned blocks_for(uint64_t threads) { return unsigned(std::min<uint64_t>((threads + 255) / 256, 1u << 20)); }

void sync(const char* what) {
  check_cuda(cudaGetLastError(), what);
  check_cuda(cudaDeviceSynchronize(), what);
}

class gpu_engine final : public graph_engine {
 public:
  gpu_engine(float_rows r, const graph_shape& s) : r_(r), s_(s) {
    if (s.degree > 256) throw error("GPU vector build: degree " + std::to_string(s.degree) + " (at most 256)");
    x_.reset(r.n * r.dim);
    check_cuda(cudaMemcpy(x_.p, r.x, r.n * r.dim * 4, cudaMemcpyHostToDevice), "cudaMemcpy (the vectors)");
    check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device_), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&max_smem_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_),
               "cudaDeviceGetAttribute");
  }

  void nearest(const float* pts, uint64_t n, uint32_t dim, uint64_t stride, const float* centres, uint32_t k,
               uint32_t ways, uint32_t* out) override {
    if (ways < 1 || ways > 2) throw error("GPU vector build: nearest 1 or 2 centres");
    if (n == 0) return;
    // Points inside the vectors are read there; others are copied.
    const float* dp;
    device_buffer<float> copy;
    if (pts >= r_.x && pts < r_.x + r_.n * r_.dim) {
      dp = x_.p + (pts - r_.x);
    } else {
      copy.reset((n - 1) * stride + dim);
      check_cuda(cudaMemcpy(copy.p, pts, copy.n * 4, cudaMemcpyHostToDevice), "cudaMemcpy (points)");
      dp = copy.p;
    }
    device_buffer<float> c;
    c.reset(uint64_t(k) * dim);
    check_cuda(cudaMemcpy(c.p, centres, c.n * 4, cudaMemcpyHostToDevice), "cudaMemcpy (centres)");
    device_buffer<uint32_t> o;
    o.reset(n * ways);
    nearest_kernel<<<blocks_for(n * 32), 256>>>(dp, n, dim, stride, c.p, k, ways, o.p);
    sync("GPU vector build (nearest centres)");
    check_cuda(cudaMemcpy(out, o.p, n * ways * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (nearest)");
  }

  adjacency group_graph(const std::vector<uint32_t>& near, uint32_t ways,
                        const std::vector<std::vector<uint32_t>>& members, uint32_t per) override {
    if (per == 0) return adjacency(r_.n);  // one vector: no neighbours to find
    const bool tiles = group_smem(per, r_.dim, true) <= uint64_t(max_smem_);
    const uint64_t smem = group_smem(per, r_.dim, tiles);
    if (smem > uint64_t(max_smem_))
      throw error("GPU vector build: " + std::to_string(per) + " candidates a member do not fit shared memory");
    std::vector<uint64_t> at(members.size() + 1, 0);
    std::vector<uint32_t> flat, tile_group, tile_first;
    for (size_t g = 0; g < members.size(); ++g) {
      at[g + 1] = at[g] + members[g].size();
      flat.insert(flat.end(), members[g].begin(), members[g].end());
      for (uint32_t f = 0; f < members[g].size(); f += group_tile) tile_group.push_back(uint32_t(g)), tile_first.push_back(f);
    }
    device_buffer<uint64_t> d_at, cand;
    device_buffer<uint32_t> d_flat, d_tg, d_tf, d_near;
    upload(d_at, at);
    upload(d_flat, flat);
    upload(d_tg, tile_group);
    upload(d_tf, tile_first);
    upload(d_near, near);
    cand.reset(r_.n * ways * per);
    group_params p{x_.p, r_.dim, d_at.p, d_flat.p, d_tg.p, d_tf.p, d_near.p, ways, per, cand.p};
    check_cuda(cudaFuncSetAttribute(group_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "cudaFuncSetAttribute");
    if (!tile_group.empty()) group_kernel<<<unsigned(tile_group.size()), group_tile * group_warps, smem>>>(p, tiles);
    sync("GPU vector build (the first graph)");
    device_buffer<uint32_t> ids, deg;
    ids.reset(r_.n * s_.degree);
    deg.reset(r_.n);
    sort_and_prune(cand, nullptr, ways * per, 0, r_.n, false, ids.p, deg.p);
    return download(ids, deg);
  }

  adjacency pass(const adjacency& adj, uint64_t entry) override {
    device_buffer<uint32_t> ids, deg, next_ids, next_deg;
    upload_graph(adj, ids, deg);
    next_ids.reset(r_.n * s_.degree);
    next_deg.reset(r_.n);
    const uint32_t room = s_.gpu_search_room ? s_.gpu_search_room : std::max<uint32_t>(4 * s_.list, 64);
    uint32_t slots = 1024;
    while (slots < 2ull * (1ull + uint64_t(room) * s_.degree)) slots *= 2;
    const uint32_t warp_smem = (9 * s_.list + 15) & ~15u;
    if (warp_smem > uint32_t(max_smem_)) throw error("GPU vector build: the build list does not fit shared memory");
    const uint32_t per_block = std::clamp<uint32_t>(uint32_t(max_smem_) / 2 / warp_smem, 1, 8);
    const size_t smem = size_t(per_block) * warp_smem;
    check_cuda(cudaFuncSetAttribute(pass_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "cudaFuncSetAttribute");
    const uint64_t blocks = std::max<uint64_t>(1, resident_warps(pass_kernel, uint64_t(sms_) * 64, int(per_block * 32), smem) / per_block);
    const uint64_t warps = blocks * per_block;
    device_buffer<uint64_t> seen;
    device_buffer<uint32_t> epochs, overflow;
    seen.reset(warps * slots);
    seen.zero();
    epochs.reset(warps);
    epochs.zero();
    // Nodes in chunks, so that their candidates fit beside the graph.
    const uint64_t width = room + s_.degree;
    const uint64_t chunk = std::max<uint64_t>(warps, std::min<uint64_t>(r_.n, (uint64_t(2) << 30) / (width * 8)));
    device_buffer<uint64_t> cand;
    cand.reset(std::min<uint64_t>(chunk, r_.n) * width);
    overflow.reset(1 + std::min<uint64_t>(chunk, r_.n));
    std::vector<uint32_t> redo;
    for (uint64_t first = 0; first < r_.n; first += chunk) {
      const uint64_t nodes = std::min(chunk, r_.n - first);
      overflow.zero();
      pass_params p{x_.p, r_.dim, flat_graph{ids.p, deg.p, s_.degree}, uint32_t(entry), first, nodes, s_.list, room,
                    seen.p, slots, epochs.p, cand.p, overflow.p, warp_smem};
      pass_kernel<<<unsigned(blocks), per_block * 32, smem>>>(p);
      sync("GPU vector build (a pass's searches)");
      sort_and_prune(cand, nullptr, width, first, nodes, false, next_ids.p + first * s_.degree, next_deg.p + first);
      uint32_t count = 0;
      check_cuda(cudaMemcpy(&count, overflow.p, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
      if (count) {
        std::vector<uint32_t> o(count);
        check_cuda(cudaMemcpy(o.data(), overflow.p + 1, 4ull * count, cudaMemcpyDeviceToHost), "cudaMemcpy");
        redo.insert(redo.end(), o.begin(), o.end());
      }
    }
    adjacency next = download(next_ids, next_deg);
    // Each redone node's list depends on the graph before the pass alone.
    detail::parallel_items(redo.size(), s_.threads,
                           [&](uint64_t i) { next[redo[i]] = pass_node(r_, s_, adj, entry, redo[i]); });
    redone_ += redo.size();
    return next;
  }

  uint64_t redone_nodes() const override { return redone_; }

  adjacency reverse(const adjacency& adj) override {
    device_buffer<uint32_t> ids, deg;
    upload_graph(adj, ids, deg);
    const flat_graph g{ids.p, deg.p, s_.degree};
    const uint64_t slots = r_.n * s_.degree;
    device_buffer<uint64_t> keys, sorted;
    keys.reset(slots);
    sorted.reset(slots);
    edge_keys_kernel<<<blocks_for(slots), 256>>>(g, r_.n, keys.p);
    sync("GPU vector build (edges)");
    {
      size_t temp = 0;
      check_cuda(cub::DeviceRadixSort::SortKeys(nullptr, temp, keys.p, sorted.p, int64_t(slots)), "cub sort");
      device_buffer<uint8_t> t;
      t.reset(temp);
      check_cuda(cub::DeviceRadixSort::SortKeys(t.p, temp, keys.p, sorted.p, int64_t(slots)), "cub sort");
      sync("GPU vector build (sorting the edges)");
    }
    uint64_t edges = 0;
    for (const auto& a : adj) edges += a.size();
    keys.reset(0);
    device_buffer<uint64_t> in_at, size, seg_at;
    in_at.reset(r_.n + 1);
    in_start_kernel<<<blocks_for(r_.n + 1), 256>>>(sorted.p, edges, r_.n, in_at.p);
    size.reset(r_.n + 1);
    size.zero();
    seg_size_kernel<<<blocks_for(r_.n), 256>>>(g, in_at.p, r_.n, size.p);
    seg_at.reset(r_.n + 1);
    {
      size_t temp = 0;
      check_cuda(cub::DeviceScan::ExclusiveSum(nullptr, temp, size.p, seg_at.p, int64_t(r_.n + 1)), "cub scan");
      device_buffer<uint8_t> t;
      t.reset(temp);
      check_cuda(cub::DeviceScan::ExclusiveSum(t.p, temp, size.p, seg_at.p, int64_t(r_.n + 1)), "cub scan");
      sync("GPU vector build (candidate offsets)");
    }
    uint64_t total = 0;
    check_cuda(cudaMemcpy(&total, seg_at.p + r_.n, 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
    device_buffer<uint64_t> cand;
    cand.reset(std::max<uint64_t>(total, 1));
    reverse_fill_kernel<<<blocks_for(r_.n * 32), 256>>>(x_.p, r_.dim, g, sorted.p, in_at.p, r_.n, seg_at.p, cand.p);
    sync("GPU vector build (reverse candidates)");
    sorted.reset(0);
    device_buffer<uint32_t> next_ids, next_deg;
    next_ids.reset(r_.n * s_.degree);
    next_deg.reset(r_.n);
    sort_and_prune(cand, seg_at.p, 0, 0, r_.n, true, next_ids.p, next_deg.p);
    return download(next_ids, next_deg);
  }

 private:
  template <class T>
  static void upload(device_buffer<T>& d, const std::vector<T>& h) {
    d.reset(std::max<uint64_t>(h.size(), 1));
    if (!h.empty()) check_cuda(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  // The graph between its host form (a list a node) and the device's (a
  // row of `degree` slots a node), on the build's threads: at tens of
  // millions of nodes one thread's copy is seconds a step.
  void upload_graph(const adjacency& adj, device_buffer<uint32_t>& ids, device_buffer<uint32_t>& deg) const {
    std::vector<uint32_t> flat(r_.n * s_.degree, no_neighbour), d(r_.n);
    detail::parallel_for(r_.n, s_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t i = b; i < e; ++i) {
        d[i] = uint32_t(adj[i].size());
        std::copy(adj[i].begin(), adj[i].end(), flat.begin() + i * s_.degree);
      }
    });
    upload(ids, flat);
    upload(deg, d);
  }
  adjacency download(const device_buffer<uint32_t>& ids, const device_buffer<uint32_t>& deg) const {
    std::vector<uint32_t> flat(r_.n * s_.degree), d(r_.n);
    check_cuda(cudaMemcpy(flat.data(), ids.p, flat.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (graph)");
    check_cuda(cudaMemcpy(d.data(), deg.p, d.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (graph)");
    adjacency adj(r_.n);
    detail::parallel_for(r_.n, s_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t i = b; i < e; ++i)
        adj[i].assign(flat.begin() + i * s_.degree, flat.begin() + i * s_.degree + d[i]);
    });
    return adj;
  }

  // Sorts each node's candidates (segment i: at[i] .. at[i + 1], or i *
  // width .. (i + 1) * width where `at` is null) and writes its list.
  void sort_and_prune(device_buffer<uint64_t>& cand, const uint64_t* at, uint64_t width, uint64_t first, uint64_t nodes,
                      bool keep_if_fits, uint32_t* out_ids, uint32_t* out_deg) {
    device_buffer<uint64_t> begin, end, sorted;
    begin.reset(nodes);
    end.reset(nodes);
    begin_end_kernel<<<blocks_for(nodes), 256>>>(at, nodes, width, begin.p, end.p);
    uint64_t items = 0;
    if (at) {
      check_cuda(cudaMemcpy(&items, at + nodes, 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
    } else {
      items = nodes * width;
    }
    sorted.reset(std::max<uint64_t>(items, 1));
    size_t temp = 0;
    check_cuda(cub::DeviceSegmentedSort::SortKeys(nullptr, temp, cand.p, sorted.p, int64_t(items), int64_t(nodes),
                                                  begin.p, end.p),
               "cub segmented sort");
    device_buffer<uint8_t> t;
    t.reset(std::max<size_t>(temp, 1));
    check_cuda(cub::DeviceSegmentedSort::SortKeys(t.p, temp, cand.p, sorted.p, int64_t(items), int64_t(nodes), begin.p,
                                                  end.p),
               "cub segmented sort");
    sync("GPU vector build (sorting candidates)");
    prune_params p{x_.p, r_.dim, first, nodes, begin.p, end.p, sorted.p, s_.degree, s_.alpha, keep_if_fits, out_ids,
                   out_deg};
    prune_kernel<<<blocks_for(nodes * 32), 256>>>(p);
    sync("GPU vector build (pruning)");
  }

  float_rows r_;
  graph_shape s_;
  device_buffer<float> x_;
  int device_ = 0, sms_ = 0, max_smem_ = 0;
  uint64_t redone_ = 0;
};

}  // namespace

std::unique_ptr<graph_engine> make_gpu_graph_engine(float_rows rows, const graph_shape& shape) {
  return std::make_unique<gpu_engine>(rows, shape);
}

uint64_t gpu_build_capacity(uint32_t width, uint32_t degree) {
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  // A vector's share of the engine's largest step: its row as floats, and
  // in the first graph its 2 x 2 x degree candidates (8 bytes each) sorted
  // beside their copy, with the graph's slots; a pass's candidates and the
  // sorts' scratch are bounded apart (a few GiB), kept out of the free memory.
  const uint64_t per_vector = 4ull * width + 72ull * degree + 64;
  const uint64_t fixed = uint64_t(6) << 30;
  return free_bytes > fixed ? (free_bytes - fixed) / 10 * 8 / per_vector : 0;
}

build_report build_index_on_gpu(const vector_set& data, metric m, const std::string& path, const build_options& o) {
  build_options g = o;
  if (!g.shard_vectors) {
    const uint64_t fits = gpu_build_capacity(data.dim + (m == metric::inner_product ? 1 : 0), o.degree);
    if (data.count > fits) g.shard_vectors = std::max(fits, min_shard_vectors);
  }
  return build_index_with(data, m, path, g, make_gpu_graph_engine);
}

}  // namespace deepwell::vectors
