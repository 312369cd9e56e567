// array_ref through the GPU page cache, measured beside the machine's
// ceilings in the same run:
//   hit-elem   all-hit random 8-byte reads a[i] (the dataset fits in the cache)
//   hit-page   all-hit random whole pages through page handles (16-byte loads)
//   miss       all-miss: every page read once per pass (a permutation), the
//              cache emptied between passes; one element per page read with
//              a[i], so each warp fetches 32 pages together. Run both
//              direct (warps read the host-memory dataset, no controller)
//              and through the controller, for a host-memory dataset and
//              for a file in the page cache (direct: a registered read-only
//              mapping of the file).
// Ceilings: HBM read (warps reading random 4 KiB blocks of device memory
// with 16-byte loads; bytes counted = blocks x 4096) and cudaMemcpy
// host-to-device (pinned, 1 GiB). Prints a line per measurement and appends
// one JSON line per measurement.
#if DEEPWELL_SEPARATE_MISS_PATH
#include "deepwell/cache/miss_path.hpp"  // first: the miss path comes from deepwell_miss_path (gpu_array_bench_split)
#endif
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <map>
#include <vector>

#include "bench_common.cuh"
#include "deepwell/cache/detail/access.hpp"
#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/memcpy_ceiling.hpp"
#include "deepwell/views/array.hpp"

#if DW_CACHE_PHASE_TIMING
// The cache's fill-phase hook (detail/cache/phase_timing.hpp): totals per phase.
__device__ unsigned long long dw_fill_phase_ns[5];
__device__ void dw_cache_phase_add(int phase, unsigned long long ns) { atomicAdd(&dw_fill_phase_ns[phase], ns); }
#endif

using namespace deepwell;
using deepwell::bench::mix;
using deepwell::bench::timer;
using json = nlohmann::json;

namespace {

// The lookup is inlined into each kernel and costs about 165 registers: one
// block of 256 threads per SM. The _lb variants cap registers at 128
// (__launch_bounds__(256, 2)) to measure what occupancy buys.
__device__ __forceinline__ void hit_elem_body(array_ref<uint64_t> a, unsigned per_thread, unsigned long long* sink,
                                              unsigned long long* failed) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t sum = 0, bad = 0;
  for (unsigned k = 0; k < per_thread; ++k) {
    const uint64_t i = mix(tid * per_thread + k) % a.size();
    request_status s;
    sum += a.try_read(i, &s);
    bad += !s.ok();
  }
  if (sum == 42) atomicAdd(sink, 1ull);
  if (bad) atomicAdd(failed, bad);
}
__global__ void hit_elem_kernel(array_ref<uint64_t> a, unsigned per_thread, unsigned long long* sink,
                                unsigned long long* failed) {
  hit_elem_body(a, per_thread, sink, failed);
}
__global__ void __launch_bounds__(256, 2) hit_elem_kernel_lb(array_ref<uint64_t> a, unsigned per_thread,
                                                             unsigned long long* sink, unsigned long long* failed) {
  hit_elem_body(a, per_thread, sink, failed);
}

// Each lane pins a random page; the warp then reads each of the 32 pages
// with 16-byte loads.
__global__ void hit_page_kernel(array_ref<uint64_t> a, unsigned per_thread, unsigned long long* sink,
                                unsigned long long* failed) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const unsigned lane = threadIdx.x & 31;
  const uint64_t per_page = a.cache.page_size() / 8, pages = a.size() / per_page;
  uint4 acc = make_uint4(0, 0, 0, 0);
  uint64_t bad = 0;
  for (unsigned k = 0; k < per_thread; ++k) {
    page_handle<uint64_t> h = a.page((mix(tid * per_thread + k) % pages) * per_page);
    bad += !h.ok();
    const uint4* mine = reinterpret_cast<const uint4*>(h.data());
    for (unsigned l = 0; l < 32; ++l) {
      const uint4* p = reinterpret_cast<const uint4*>(__shfl_sync(0xFFFFFFFFu, uint64_t(mine), l));
      if (!p) continue;
      for (unsigned v = lane; v < a.cache.page_size() / 16; v += 32) {
        const uint4 x = p[v];
        acc.x ^= x.x;
        acc.y ^= x.y;
        acc.z ^= x.z;
        acc.w ^= x.w;
      }
    }
    __syncwarp();
    h.release();
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 42) atomicAdd(sink, 1ull);
  if (bad) atomicAdd(failed, bad);
}

// One element of each of `count` pages, in a permuted order (pages is a
// power of two; the multiplier is odd).
__device__ __forceinline__ void miss_body(array_ref<uint64_t> a, uint64_t first, uint64_t count, uint64_t pages,
                                          unsigned long long* sink, unsigned long long* failed) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid >= count) return;
  const uint64_t page = ((first + tid) * 0x9E3779B97F4A7C15ull) & (pages - 1);
  const uint64_t per_page = a.cache.page_size() / 8;
  request_status s;
  const uint64_t v = a.try_read(page * per_page + (tid % per_page), &s);
  if (!s.ok()) atomicAdd(failed, 1ull);
  if (v == 42) atomicAdd(sink, 1ull);
}
__global__ void miss_kernel(array_ref<uint64_t> a, uint64_t first, uint64_t count, uint64_t pages,
                            unsigned long long* sink, unsigned long long* failed) {
  miss_body(a, first, count, pages, sink, failed);
}
__global__ void __launch_bounds__(256, 2) miss_kernel_lb(array_ref<uint64_t> a, uint64_t first, uint64_t count,
                                                         uint64_t pages, unsigned long long* sink,
                                                         unsigned long long* failed) {
  miss_body(a, first, count, pages, sink, failed);
}

// Warps reading random blocks of `block_bytes` (a multiple of 512) with
// 16-byte loads: from device memory (the HBM ceiling) or from pinned host
// memory (zero-copy, EMOGI's way).
__global__ void block_read_kernel(const uint4* data, uint64_t blocks, uint32_t block_bytes, unsigned per_warp,
                                  unsigned long long* sink) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x & 31;
  const uint32_t vecs = block_bytes / 16;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (unsigned k = 0; k < per_warp; ++k) {
    const uint4* b = data + (mix(warp * per_warp + k) % blocks) * vecs;
    for (unsigned v = lane; v < vecs; v += 32) {
      const uint4 x = b[v];
      acc.x ^= x.x;
      acc.y ^= x.y;
      acc.z ^= x.z;
      acc.w ^= x.w;
    }
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 42) atomicAdd(sink, 1ull);
}

// Random block reads of `bytes` at `data`: best of three, GB/s counted as
// blocks x block_bytes.
double block_read_gbps(const void* data, uint64_t bytes, uint32_t block_bytes, unsigned grid, unsigned tpb) {
  unsigned long long* sink;
  check_cuda(cudaMalloc(&sink, 8), "cudaMalloc");
  const uint64_t warps = uint64_t(grid) * tpb / 32;
  const unsigned per_warp = unsigned(std::max<uint64_t>(1, (1ull << 30) / (warps * block_bytes)));
  timer t;
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    t.start();
    block_read_kernel<<<grid, tpb>>>(static_cast<const uint4*>(data), bytes / block_bytes, block_bytes, per_warp, sink);
    best = std::min(best, t.stop());
  }
  cudaFree(sink);
  return double(warps) * per_warp * block_bytes / best / 1e9;
}

double hbm_read_gbps(unsigned grid, unsigned tpb) {
  const uint64_t bytes = 4ull << 30;
  void* d;
  check_cuda(cudaMalloc(&d, bytes), "cudaMalloc");
  cudaMemset(d, 1, bytes);
  const double g = block_read_gbps(d, bytes, 4096, grid, tpb);
  cudaFree(d);
  return g;
}

// Elements of 4 to 64 bytes for the all-hit per-element runs.
template <int N>
struct elem {
  uint4 v[N / 16];
};
template <class T>
__device__ __forceinline__ uint64_t fold(const T& x) {
  if constexpr (sizeof(T) <= 8) {
    return uint64_t(x);
  } else {
    uint64_t f = 0;
    for (int i = 0; i < int(sizeof(T) / 16); ++i) f ^= uint64_t(x.v[i].x) ^ x.v[i].w;
    return f;
  }
}

// MinBlocks > 1: the same kernel capped in registers (__launch_bounds__(256,
// MinBlocks)) so that MinBlocks blocks fit on an SM; the lookup's rare
// paths (acquire_rest) spill, its hit path should not.
template <class T, int MinBlocks = 1>
__global__ void __launch_bounds__(256, MinBlocks) hit_elem_sized_kernel(array_ref<T> a, unsigned per_thread,
                                                                        unsigned long long* sink,
                                                                        unsigned long long* failed) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t sum = 0, bad = 0;
  for (unsigned k = 0; k < per_thread; ++k) {
    request_status s;
    sum += fold(a.try_read(mix(tid * per_thread + k) % a.size(), &s));
    bad += !s.ok();
  }
  if (sum == 42) atomicAdd(sink, 1ull);
  if (bad) atomicAdd(failed, bad);
}
// The hit path taken apart (an experiment; all-hit, no eviction runs, so
// skipping the pin is safe here and nowhere else). Per thread, no warp
// collectives: Parts 3 = lookup (keys and slots), pin, key check, data,
// unpin; 2 = the same without pin and unpin; 1 = lookup and data only;
// 4-7: validated reads with no pin (the state with acquire, key and data,
// the state again), the second state read ordered after the data by a
// fence (4), by an acquire load of the data (5), by a dependency on it (6),
// and none (7, with a per-warp ballot and statistics atomic as a[i] has).
template <int Parts>
__global__ void __launch_bounds__(256, 2) hit_parts_kernel(detail::cache_access::lookup_arrays c, uint32_t dataset,
                                                           uint64_t n, unsigned per_thread, unsigned long long* sink,
                                                           unsigned long long* failed) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t sum = 0, bad = 0;
  for (unsigned k = 0; k < per_thread; ++k) {
    const uint64_t i = mix(tid * per_thread + k) % n;
    const uint64_t key = make_key(dataset, (i * 8) >> c.page_shift);
    uint32_t s;
    if (!c.dir.find_slot(key, c.dir.bucket_of(key), s) || s == dir_pending) {
      ++bad;
      continue;
    }
    const uint64_t* at =
        reinterpret_cast<const uint64_t*>(c.data + (uint64_t(s) << c.page_shift) + ((i * 8) & ((1u << c.page_shift) - 1)));
    if (Parts >= 4) {
      // Validated with no pin: the state read with acquire, the key and
      // the data after it, then the state again once the data is in.
      client_atomic<uint64_t> st(c.state[s]);
      const slot_word s1 = st.load(memory_order_acquire);
      const uint64_t k = client_atomic<uint64_t>(const_cast<uint64_t&>(c.slot_key[s])).load(memory_order_relaxed);
      uint64_t v;
      if (Parts == 5) {
        v = client_atomic<uint64_t>(*const_cast<uint64_t*>(at)).load(memory_order_acquire);
      } else {
        v = *at;
      }
      slot_word s2;
      if (Parts == 4) {
        __threadfence();
        s2 = st.load(memory_order_relaxed);
      } else if (Parts == 6) {
        // ordered by a dependency on the data (what read_hit uses)
        s2 = client_atomic<uint64_t>(c.state[s + zero_after_loads(v, c.opaque_zero)]).load(memory_order_relaxed);
      } else {
        s2 = st.load(memory_order_relaxed);
      }
      const bool ok = (s1 & slot_state::valid) && !(s1 & (slot_state::evict | slot_state::busy)) && k == key && s1 == s2;
      bad += !ok;
      sum += v;
      if (Parts == 7) {
        const unsigned m = __activemask();
        const unsigned fails = __ballot_sync(m, !ok);
        if (fails) atomicAdd(failed, 0ull);
        if ((threadIdx.x & 31) == unsigned(__ffs(m) - 1)) atomicAdd(sink + 1 + (blockIdx.x & 15), static_cast<unsigned long long>(__popc(m)));
      }
      continue;
    }
    if (Parts == 3) client_atomic<uint64_t>(c.state[s]).fetch_add(1, memory_order_acquire);
    if (Parts >= 2 && client_atomic<uint64_t>(const_cast<uint64_t&>(c.slot_key[s])).load(memory_order_relaxed) != key) ++bad;
    sum += *at;
    if (Parts == 3) client_atomic<uint64_t>(c.state[s]).fetch_sub(1, memory_order_release);
  }
  if (sum == 42) atomicAdd(sink, 1ull);
  if (bad) atomicAdd(failed, bad);
}

// A read through the cache's page hint (read_hit's first path, taken
// apart): the hint with acquire, then the slot key and the data, then the
// state word ordered after both; kept if the key matches and the state is
// valid at the hint's generation. Stats adds a[i]'s per-warp ballot, miss
// branch and statistics atomic.
template <bool Stats>
__global__ void __launch_bounds__(256, 2) hint_parts_kernel(detail::cache_access::lookup_arrays c, uint32_t dataset, uint64_t n, unsigned per_thread,
                                                            unsigned long long* sink, unsigned long long* failed) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t sum = 0, bad = 0;
  for (unsigned k = 0; k < per_thread; ++k) {
    const uint64_t i = mix(tid * per_thread + k) % n;
    const uint64_t key = make_key(dataset, (i * 8) >> c.page_shift);
    const uint64_t h = client_atomic<uint64_t>(c.hints[hint_position(key) & c.hint_mask]).load(memory_order_acquire);
    const uint32_t s = hint_slot(h);
    const bool have = uint32_t(h) != 0;
    uint64_t v = 0, kk = 0;
    slot_word s2 = 0;
    if (have) {
      v = *reinterpret_cast<const uint64_t*>(c.data + (uint64_t(s) << c.page_shift) + ((i * 8) & ((1u << c.page_shift) - 1)));
      kk = client_atomic<uint64_t>(const_cast<uint64_t&>(c.slot_key[s])).load(memory_order_relaxed);
      s2 = client_atomic<uint64_t>(c.state[s + (zero_after_loads(v, c.opaque_zero) | zero_after_loads(kk, c.opaque_zero))]).load(memory_order_relaxed);
    }
    const bool ok = have && kk == key && (s2 & slot_state::valid) && slot_state::gen(s2) == uint32_t(h >> 32);
    sum += v;
    if (Stats) {
      const unsigned m = __activemask();
      const unsigned hits = __ballot_sync(m, ok);
      if ((threadIdx.x & 31) == unsigned(__ffs(m) - 1))
        atomicAdd(sink + 1 + (blockIdx.x & 15), static_cast<unsigned long long>(__popc(hits)));
      if (__ballot_sync(m, !ok)) {  // a[i]'s miss path: these lanes go through acquire
        if (!ok) atomicAdd(failed, 1ull);
      }
    } else {
      bad += !ok;
    }
  }
  if (sum == 42) atomicAdd(sink, 1ull);
  if (bad) atomicAdd(failed, bad);
}

// The same random element reads straight from device memory: the HBM
// ceiling for reads of that size (each costs at least a 32-byte sector).
template <class T>
__global__ void hbm_elem_kernel(const T* d, uint64_t n, unsigned per_thread, unsigned long long* sink) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t sum = 0;
  for (unsigned k = 0; k < per_thread; ++k) sum += fold(d[mix(tid * per_thread + k) % n]);
  if (sum == 42) atomicAdd(sink, 1ull);
}

struct elem_result {
  double cache_reads_per_s, hbm_reads_per_s, hit_rate;
  unsigned long long failed;
};

// A cache of 4 KiB pages for the all-hit runs: it holds the whole dataset,
// so few queues (only the warm-up misses).
std::shared_ptr<page_cache> make_hit_cache(controller& ctl, uint64_t cache_bytes) {
  cache_config cfg;
  cfg.page_size = 4096;
  cfg.capacity_bytes = cache_bytes;
  cfg.queue_pairs = 16;
  return make_gpu_page_cache(ctl, cfg);
}

// All-hit random reads of T-sized elements through a fresh cache holding
// the whole dataset, and the same reads from device memory.
// An experiment on where all-hit reads lose their time: with `l2_window`,
// the lookup's metadata (detail::cache_access::lookup_metadata) is made a
// persisting access-policy window of the kernel's stream, with L2 set aside
// for it, so that the random data sectors do not evict it. What the window
// held is reported in `window_bytes` and `window_hit_ratio`.
struct l2_window_info {
  uint64_t window_bytes = 0;
  double hit_ratio = 0;
};

template <class T, int MinBlocks = 1>
elem_result hit_elem_sized(controller& ctl, uint32_t ns, uint64_t data_bytes, uint64_t cache_bytes, unsigned grid,
                           unsigned tpb, unsigned long long* sink, unsigned long long* failed,
                           l2_window_info* l2_window = nullptr) {
  auto cache = make_hit_cache(ctl, cache_bytes);
  array<T> a(cache, ns);
  check_launch(*cache, hit_elem_sized_kernel<T, MinBlocks>, grid, tpb);
  const unsigned per_thread = 64;
  cudaStream_t st = nullptr;  // blocking: the timer's events on stream 0 bracket it
  if (l2_window) {
    check_cuda(cudaStreamCreate(&st), "cudaStreamCreate");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    uint64_t bytes = 0;
    const void* meta = detail::cache_access::lookup_metadata(a.ref().cache, bytes);
    bytes = std::min<uint64_t>(bytes, uint64_t(prop.accessPolicyMaxWindowSize));
    const uint64_t aside = std::min<uint64_t>(bytes, uint64_t(prop.persistingL2CacheMaxSize));
    check_cuda(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, aside), "cudaDeviceSetLimit(persisting L2)");
    cudaStreamAttrValue v{};
    v.accessPolicyWindow.base_ptr = const_cast<void*>(meta);
    v.accessPolicyWindow.num_bytes = bytes;
    v.accessPolicyWindow.hitRatio = bytes ? float(std::min(1.0, double(aside) / double(bytes))) : 0.0f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    check_cuda(cudaStreamSetAttribute(st, cudaStreamAttributeAccessPolicyWindow, &v), "cudaStreamSetAttribute");
    l2_window->window_bytes = bytes;
    l2_window->hit_ratio = v.accessPolicyWindow.hitRatio;
  }
  // Warm: every page in, then measure.
  hit_elem_sized_kernel<T, MinBlocks><<<grid, tpb, 0, st>>>(a.ref(), per_thread, sink, failed);
  check_cuda(cudaDeviceSynchronize(), "warm-up");
  cudaMemset(failed, 0, 8);
  cache->reset_stats();
  timer t;
  t.start();
  hit_elem_sized_kernel<T, MinBlocks><<<grid, tpb, 0, st>>>(a.ref(), per_thread, sink, failed);
  const double s1 = t.stop();
  if (l2_window) {
    cudaStreamAttrValue off{};
    off.accessPolicyWindow.num_bytes = 0;
    cudaStreamSetAttribute(st, cudaStreamAttributeAccessPolicyWindow, &off);
    cudaCtxResetPersistingL2Cache();
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);
    cudaStreamDestroy(st);
  }
  elem_result r{};
  r.hit_rate = cache->stats().hit_rate();
  cudaMemcpy(&r.failed, failed, 8, cudaMemcpyDeviceToHost);
  void* d;
  check_cuda(cudaMalloc(&d, data_bytes), "cudaMalloc");
  cudaMemset(d, 1, data_bytes);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    t.start();
    hbm_elem_kernel<T><<<grid, tpb>>>(static_cast<const T*>(d), data_bytes / sizeof(T), per_thread, sink);
    best = std::min(best, t.stop());
  }
  cudaFree(d);
  const double n = double(grid) * tpb * per_thread;
  r.cache_reads_per_s = n / s1;
  r.hbm_reads_per_s = n / best;
  return r;
}

// Each warp overwrites whole pages (a permutation of `count` pages) with
// write_range from a per-warp pattern; the pages then go back with flush().
__global__ void write_pages_kernel(array_ref<uint64_t> a, uint64_t count, uint64_t pages, unsigned long long* failed) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  const uint64_t per_page = a.cache.page_size() / 8;
  __shared__ uint64_t src[8][512];  // one 4 KiB page per warp of a 256-thread block
  uint64_t* mine = src[(threadIdx.x / 32) & 7];
  for (uint64_t w = threadIdx.x & 31; w < per_page; w += 32) mine[w] = ~w;
  __syncwarp();
  for (uint64_t k = warp; k < count; k += warps) {
    const uint64_t page = (k * 0x9E3779B97F4A7C15ull) & (pages - 1);
    if (!a.write_range(gpu_warp{}, mine, page * per_page, per_page).ok() && (threadIdx.x & 31) == 0)
      atomicAdd(failed, 1ull);
  }
}

// Unified memory's answer to the all-miss pattern: the same pages, one
// element each, from managed memory moved back to the host before each
// pass. Only where the data fits in GPU memory.
__global__ void uvm_miss_kernel(const uint64_t* d, uint64_t first, uint64_t count, uint64_t pages, uint32_t page,
                                unsigned long long* sink) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid >= count) return;
  const uint64_t pg = ((first + tid) * 0x9E3779B97F4A7C15ull) & (pages - 1);
  if (d[pg * (page / 8) + tid % (page / 8)] == 42) atomicAdd(sink, 1ull);
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit = "unknown", file_path = "/var/tmp/deepwell-array-bench.dat";
  unsigned pollers = 12, queues = 128, entries = 512, blocks_per_sm = 8, tpb = 256;
  uint64_t hit_data = 1ull << 30, miss_data = 4ull << 30, cache_bytes = 2ull << 30;
  std::vector<uint32_t> page_sizes{4096, 512, 65536};
  std::vector<std::string> paths{"direct", "controller"};
  bool skip_hit = false, skip_write = false, write_first = false, with_null = false, bounded = false, only_hit = false;
  CLI::App app{"deepwell array_ref benchmark (GPU page cache)"};
  app.add_option("--pollers", pollers, "controller poller threads");
  app.add_option("--queues", queues, "cache queue pairs");
  app.add_option("--queue-entries", entries, "entries per queue");
  app.add_option("--blocks-per-sm", blocks_per_sm, "thread blocks per SM");
  app.add_option("--hit-data", hit_data, "dataset bytes for all-hit runs (must fit in the cache)");
  app.add_option("--miss-data", miss_data, "dataset bytes for all-miss runs (a power of two)");
  app.add_option("--cache", cache_bytes, "cache bytes");
  app.add_option("--page-sizes", page_sizes, "page sizes for the miss runs");
  app.add_option("--paths", paths, "miss paths to run: direct, controller");
  app.add_flag("--skip-hit", skip_hit, "skip the all-hit runs");
  app.add_flag("--only-hit", only_hit, "run the all-hit runs only");
  app.add_flag("--skip-write", skip_write, "skip the write + flush runs");
  app.add_flag("--write-first", write_first, "run the write + flush runs before the all-miss runs");
  app.add_flag("--null", with_null, "also run the controller path over a null target (no data copy)");
  app.add_flag("--launch-bounds", bounded, "use the kernels capped at 128 registers (2 blocks of 256 per SM)");
  app.add_option("--file", file_path, "file for the page-cache runs (written if smaller than --miss-data; '' skips them)");
  app.add_option("--json", json_path, "append results as JSON lines");
  app.add_option("--commit", commit, "commit hash to record");
  CLI11_PARSE(app, argc, argv);
  try {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const unsigned grid = prop.multiProcessorCount * blocks_per_sm;
    const double link = measure_h2d_gbps();
    const double hbm = hbm_read_gbps(grid, tpb);
    const double d2h = measure_d2h_gbps();
    std::printf("ceilings: cudaMemcpy H2D %.1f GB/s, HBM random 4 KiB reads %.1f GB/s\n", link, hbm);
    unsigned long long *sink, *failed;
    check_cuda(cudaMalloc(&sink, 256), "cudaMalloc");
    check_cuda(cudaMalloc(&failed, 8), "cudaMalloc");
    std::vector<json> out;
    auto emit = [&](json j) {
      j["benchmark"] = "array";
      j["commit"] = commit;
      j["device"] = prop.name;
      j["staging_stores"] = bench::staging_stores_name();
#if DEEPWELL_SEPARATE_MISS_PATH
      j["miss_path"] = "separate";  // deepwell_miss_path, linked (gpu_array_bench_split)
#else
      j["miss_path"] = "inline";
#endif
      j["env"] = bench::deepwell_env();
      j["ceilings"] = {{"h2d_memcpy_gbps", link}, {"hbm_random_4k_read_gbps", hbm}};
      if (!json_path.empty()) std::ofstream(json_path, std::ios::app) << j.dump() << "\n";
    };

    // ---- all-hit ----
    if (!skip_hit) {
      controller_config cc;
      cc.pollers = 2;
      controller ctl(cc);
      auto data = make_host_memory_target(hit_data, false);
      const uint32_t ns = ctl.add_namespace({data, 4096, true});
      auto cache = make_hit_cache(ctl, cache_bytes);
      array<uint64_t> a(cache, ns);
      check_launch(*cache, bounded ? hit_elem_kernel_lb : hit_elem_kernel, grid, tpb);
      const uint64_t pages = hit_data / 4096;
      miss_kernel<<<unsigned((pages + 255) / 256), 256>>>(a.ref(), 0, pages, pages, sink, failed);  // warm: all in
      check_cuda(cudaDeviceSynchronize(), "warm-up");
      cudaMemset(failed, 0, 8);
      timer t;
      const unsigned per_thread = 64;
      cache->reset_stats();
      t.start();
      if (bounded)
        hit_elem_kernel_lb<<<grid, tpb>>>(a.ref(), per_thread, sink, failed);
      else
        hit_elem_kernel<<<grid, tpb>>>(a.ref(), per_thread, sink, failed);
      const double s1 = t.stop();
      const cache_stats st1 = cache->stats();
      const double elems = double(grid) * tpb * per_thread;
      const double elem_gbps = elems * 8 / s1 / 1e9;
      cache->reset_stats();
      const unsigned pages_per_thread = 4;
      t.start();
      hit_page_kernel<<<grid, tpb>>>(a.ref(), pages_per_thread, sink, failed);
      const double s2 = t.stop();
      const cache_stats st2 = cache->stats();
      const double page_gbps = double(grid) * tpb * pages_per_thread * 4096 / s2 / 1e9;
      unsigned long long f = 0;
      cudaMemcpy(&f, failed, 8, cudaMemcpyDeviceToHost);
      std::printf("all-hit: a[i] 8 B random %.0f M/s = %.1f GB/s (%.3f of HBM), page handles %.1f GB/s (%.3f of HBM), "
                  "hit rates %.4f / %.4f, failed %llu\n",
                  elems / s1 / 1e6, elem_gbps, elem_gbps / hbm, page_gbps, page_gbps / hbm, st1.hit_rate(),
                  st2.hit_rate(), f);
      json j;
      j["config"] = {{"mode", "all-hit"}, {"launch_bounds_256_2", bounded}, {"page_size", 4096}, {"elem_bytes", 8}, {"data_bytes", hit_data},
                     {"cache_bytes", cache_bytes}, {"grid", grid}, {"block", tpb}, {"per_thread", per_thread},
                     {"pages_per_thread", pages_per_thread}, {"location", "hostmem"}};
      j["metrics"] = {{"elem_reads_per_s", elems / s1}, {"elem_gbps", elem_gbps}, {"page_gbps", page_gbps},
                      {"hit_rate_elem", st1.hit_rate()}, {"hit_rate_page", st2.hit_rate()}, {"failed", f}};
      j["ratios"] = {{"hit_elem_vs_hbm_read", elem_gbps / hbm}, {"hit_page_vs_hbm_read", page_gbps / hbm}};
      emit(j);

      // Element sizes 4 to 64 bytes, each against the same random reads of
      // device memory (a ceiling per size, beside the 4 KiB-block one).
      auto sized = [&](auto tag, unsigned bytes, auto min_blocks, bool window = false) {
        using T = decltype(tag);
        constexpr int MinBlocks = decltype(min_blocks)::value;
        l2_window_info w;
        const elem_result r =
            hit_elem_sized<T, MinBlocks>(ctl, ns, hit_data, cache_bytes, grid, tpb, sink, failed, window ? &w : nullptr);
        const double gbps = r.cache_reads_per_s * bytes / 1e9;
        std::printf("all-hit: a[i] %2u B random %.0f M/s = %.1f GB/s (%.3f of HBM blocks; HBM %u B reads %.0f M/s, "
                    "ratio %.3f), hit rate %.4f, failed %llu, min blocks %d\n",
                    bytes, r.cache_reads_per_s / 1e6, gbps, gbps / hbm, bytes, r.hbm_reads_per_s / 1e6,
                    r.cache_reads_per_s / r.hbm_reads_per_s, r.hit_rate, r.failed, MinBlocks);
        json e;
        e["config"] = {{"mode", "all-hit-elem"}, {"page_size", 4096}, {"elem_bytes", bytes}, {"data_bytes", hit_data},
                       {"cache_bytes", cache_bytes}, {"grid", grid}, {"block", tpb}, {"per_thread", 64},
                       {"location", "hostmem"}, {"min_blocks_per_sm", MinBlocks}, {"l2_window", window}};
        if (window) e["config"]["l2_window_bytes"] = w.window_bytes, e["config"]["l2_window_hit_ratio"] = w.hit_ratio;
        e["metrics"] = {{"elem_reads_per_s", r.cache_reads_per_s}, {"elem_gbps", gbps}, {"hit_rate", r.hit_rate},
                        {"failed", r.failed}};
        e["baselines"] = {{"hbm_elem_reads_per_s", r.hbm_reads_per_s}};
        e["ratios"] = {{"vs_hbm_read", gbps / hbm}, {"vs_hbm_elem_reads", r.cache_reads_per_s / r.hbm_reads_per_s}};
        emit(e);
      };
      // The hit path taken apart (hit_parts_kernel), beside a[i] itself
      // capped the same way, over one warm cache.
      {
        auto cache = make_hit_cache(ctl, cache_bytes);
        array<uint64_t> a(cache, ns);
        const uint64_t pages = hit_data / 4096;
        miss_kernel<<<unsigned((pages + 255) / 256), 256>>>(a.ref(), 0, pages, pages, sink, failed);  // warm: all in
        check_cuda(cudaDeviceSynchronize(), "warm-up");
        const auto parts = detail::cache_access::lookup_parts(a.ref().cache);
        const unsigned per_thread = 64;
        auto run = [&](const char* name, auto launch) {
          cudaMemset(failed, 0, 8);
          launch();  // once to settle
          check_cuda(cudaDeviceSynchronize(), name);
          timer t;
          t.start();
          launch();
          const double s = t.stop();
          unsigned long long f = 0;
          cudaMemcpy(&f, failed, 8, cudaMemcpyDeviceToHost);
          const double rate = double(grid) * tpb * per_thread / s;
          std::printf("hit parts: %-28s %.0f M/s, lookups that failed %llu\n", name, rate / 1e6, f);
          json e;
          e["config"] = {{"mode", "hit-parts"}, {"parts", name}, {"elem_bytes", 8}, {"data_bytes", hit_data},
                         {"cache_bytes", cache_bytes}, {"grid", grid}, {"block", tpb}, {"per_thread", per_thread},
                         {"min_blocks_per_sm", 2}};
          e["metrics"] = {{"elem_reads_per_s", rate}, {"failed", f}};
          emit(e);
        };
        const uint64_t n = a.size();
        const uint32_t ds = a.ref().dataset;
        run("array_ref try_read", [&] { hit_elem_sized_kernel<uint64_t, 2><<<grid, tpb>>>(a.ref(), per_thread, sink, failed); });
        run("lookup pin key data unpin", [&] { hit_parts_kernel<3><<<grid, tpb>>>(parts, ds, n, per_thread, sink, failed); });
        run("lookup key data", [&] { hit_parts_kernel<2><<<grid, tpb>>>(parts, ds, n, per_thread, sink, failed); });
        run("lookup data", [&] { hit_parts_kernel<1><<<grid, tpb>>>(parts, ds, n, per_thread, sink, failed); });
        run("validated, fence", [&] { hit_parts_kernel<4><<<grid, tpb>>>(parts, ds, n, per_thread, sink, failed); });
        run("validated, acquire data", [&] { hit_parts_kernel<5><<<grid, tpb>>>(parts, ds, n, per_thread, sink, failed); });
        run("validated, dependency", [&] { hit_parts_kernel<6><<<grid, tpb>>>(parts, ds, n, per_thread, sink, failed); });
        run("validated, ballot stats", [&] { hit_parts_kernel<7><<<grid, tpb>>>(parts, ds, n, per_thread, sink, failed); });
        run("hint, key data, state", [&] { hint_parts_kernel<false><<<grid, tpb>>>(parts, ds, n, per_thread, sink, failed); });
        run("hint ... ballot miss", [&] { hint_parts_kernel<true><<<grid, tpb>>>(parts, ds, n, per_thread, sink, failed); });
      }
      // Capped in registers first, 2 and 4 blocks of 256 an SM (the
      // summary takes the last line of a size: the uncapped one).
      using one = std::integral_constant<int, 1>;
      sized(uint64_t{}, 8, one{}, true);
      sized(uint64_t{}, 8, std::integral_constant<int, 2>{}, true);
      sized(uint64_t{}, 8, std::integral_constant<int, 2>{});
      sized(uint64_t{}, 8, std::integral_constant<int, 4>{});
      sized(uint32_t{}, 4, one{});
      sized(uint64_t{}, 8, one{});
      sized(elem<16>{}, 16, one{});
      sized(elem<32>{}, 32, one{});
      sized(elem<64>{}, 64, one{});
    }

    // ---- writes: whole pages overwritten in the cache, then flush() ----
    // (after the miss runs by default: in one run the miss runs that came
    // after this section measured lower; --write-first keeps that order)
    auto run_writes = [&] {
      const uint64_t wdata = 1ull << 30, pages = wdata / 4096;
      controller_config wc;
      wc.pollers = pollers;
      controller wctl(wc);
      auto wt = make_host_memory_target(wdata, true);
      const uint32_t wns = wctl.add_namespace({wt, 512, false});
      for (bool direct : {true, false}) {
        cache_config cfg;
        cfg.page_size = 4096;
        cfg.capacity_bytes = cache_bytes;  // holds every page: write-back happens in flush()
        cfg.queue_pairs = queues;
        cfg.queue_entries = entries;
        cfg.direct_tier = direct;
        auto cache = make_gpu_page_cache(wctl, cfg);
        array<uint64_t> a(cache, wns);
        cudaMemset(failed, 0, 8);
        double secs = 0, kernel_secs = 0;
        for (int pass = 0; pass < 3; ++pass) {
          if (!cache->clear().ok()) throw error("clear failed");
          cache->reset_stats();
          timer t;
          const auto t0 = std::chrono::steady_clock::now();
          t.start();
          write_pages_kernel<<<grid, tpb>>>(a.ref(), pages, pages, failed);
          const double k = t.stop();
          const request_status fs = cache->flush();
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (!fs.ok()) throw error("flush failed: " + describe(fs));
          if (pass > 0) {
            secs += s / 2;
            kernel_secs += k / 2;
          }
        }
        unsigned long long f = 0;
        cudaMemcpy(&f, failed, 8, cudaMemcpyDeviceToHost);
        // Check what reached host memory: page p holds ~w at word w.
        uint64_t wrong = 0;
        const auto* h = static_cast<const uint64_t*>(wt->host_pointer());
        for (uint64_t i = 0; i < wdata / 8; i += 4099) wrong += h[i] != ~(i % 512);
        const double gbps = double(wdata) / secs / 1e9;
        const char* path = direct ? "direct" : "controller";
        std::printf("write+flush hostmem 4096 B pages, reads %s: %.1f GB/s of pages written back (%.3f of D2H %.1f), "
                    "kernel alone %.1f GB/s, failed %llu, wrong words %llu\n",
                    path, gbps, gbps / d2h, d2h, wdata / kernel_secs / 1e9, f, (unsigned long long)wrong);
        json j;
        j["config"] = {{"mode", "write-flush"}, {"page_size", 4096}, {"data_bytes", wdata}, {"cache_bytes", cache_bytes},
                       {"path", path}, {"location", "hostmem"}, {"pollers", pollers}, {"queues", queues}};
        j["metrics"] = {{"gbps", gbps}, {"kernel_gbps", wdata / kernel_secs / 1e9}, {"failed", f}, {"wrong", wrong}};
        j["ceilings_extra"] = {{"d2h_memcpy_gbps", d2h}};
        j["ratios"] = {{"vs_d2h", gbps / d2h}};
        emit(j);
      }
    };
    if (only_hit) return 0;
    if (!skip_write && write_first) run_writes();

    // ---- all-miss, direct and through the controller ----
    controller_config cc;
    cc.pollers = pollers;
    controller ctl(cc);
    auto data = make_host_memory_target(miss_data, false);
    {
      auto* p = static_cast<uint64_t*>(data->host_pointer());
      for (uint64_t i = 0; i < miss_data / 8; i += 512) p[i] = i;  // touch every page
    }
    // Baselines on the same host memory, same page sizes: zero-copy warp
    // reads of random pages (EMOGI), and unified memory where it fits.
    std::map<uint32_t, double> zero_copy_gbps;
    {
      bench::zero_copy_view v(data->host_pointer(), miss_data);
      for (uint32_t page : page_sizes) {
        zero_copy_gbps[page] = block_read_gbps(v.device(), miss_data, page, grid, tpb);
        std::printf("baseline: zero-copy random %u B reads of pinned host memory %.2f M/s = %.1f GB/s (%.3f of H2D)\n",
                    page, zero_copy_gbps[page] * 1e9 / page / 1e6, zero_copy_gbps[page], zero_copy_gbps[page] / link);
        json j;
        j["config"] = {{"mode", "all-miss-baseline"}, {"method", "zero_copy"}, {"page_size", page},
                       {"data_bytes", miss_data}, {"grid", grid}, {"block", tpb}, {"location", "hostmem"}};
        j["metrics"] = {{"gbps", zero_copy_gbps[page]}, {"miops", zero_copy_gbps[page] * 1e3 / page}};
        j["ratios"] = {{"vs_h2d", zero_copy_gbps[page] / link}};
        emit(j);
      }
    }
    size_t free_mem = 0, total_mem = 0;
    cudaMemGetInfo(&free_mem, &total_mem);
    if (miss_data < free_mem / 2) {
      const uint32_t page = 4096;
      uint64_t* um;
      check_cuda(cudaMallocManaged(&um, miss_data), "cudaMallocManaged");
      bench::fill_pattern(um, miss_data);
      cudaMemLocation host_loc{};
      host_loc.type = cudaMemLocationTypeHost;
      const uint64_t pages = miss_data / page, per_pass = std::min<uint64_t>(pages / 4, 1u << 19);
      double secs = 0;
      for (int pass = 0; pass < 4; ++pass) {
        check_cuda(cudaMemPrefetchAsync(um, miss_data, host_loc, 0, 0), "cudaMemPrefetchAsync");
        check_cuda(cudaDeviceSynchronize(), "prefetch to host");
        timer t;
        t.start();
        uvm_miss_kernel<<<unsigned((per_pass + 255) / 256), 256>>>(um, uint64_t(pass) * per_pass, per_pass, pages,
                                                                   page, sink);
        const double s = t.stop();
        if (pass > 0) secs += s;
      }
      cudaFree(um);
      const double miops = 3.0 * per_pass / secs / 1e6, gbps = miops * page / 1e3;
      std::printf("baseline: unified memory, one element of each of %llu random 4 KiB pages per pass: %.2f M pages/s "
                  "= %.1f GB/s of pages (%.3f of H2D)\n",
                  (unsigned long long)per_pass, miops, gbps, gbps / link);
      json j;
      j["config"] = {{"mode", "all-miss-baseline"}, {"method", "unified_memory"}, {"page_size", page},
                     {"data_bytes", miss_data}, {"pages_per_pass", per_pass}, {"passes", 3}, {"location", "hostmem"}};
      j["metrics"] = {{"gbps", gbps}, {"miops", miops}};
      j["ratios"] = {{"vs_h2d", gbps / link}};
      emit(j);
    }

    struct location {
      const char* name;
      uint32_t nsid;
    };
    std::vector<location> locations{{"hostmem", ctl.add_namespace({data, 512, true})}};
    // The null target moves no data: the controller path's cost without the
    // copy into staging (pages hold garbage; the miss kernel does not check).
    if (with_null) locations.push_back({"null", ctl.add_namespace({make_null_target(miss_data), 512, true})});
    if (!file_path.empty()) {
      bench::ensure_pattern_file(file_path, miss_data);
      file_options fo;
      fo.length = miss_data;
      locations.push_back({"pagecache", ctl.add_namespace({open_file_target(file_path, fo), 512, true})});
    }
    for (const location& loc : locations)
    for (uint32_t page : page_sizes) {
      if (std::string(loc.name) != "hostmem" && page != 4096) continue;
      for (bool direct : {true, false}) {
        if (direct && std::string(loc.name) == "null") continue;
        if (std::find(paths.begin(), paths.end(), direct ? "direct" : "controller") == paths.end()) continue;
        cache_config cfg;
        cfg.page_size = page;
        cfg.capacity_bytes = std::min<uint64_t>(cache_bytes, uint64_t(page) * (1u << 20));
        cfg.queue_pairs = queues;
        cfg.queue_entries = entries;
        cfg.direct_tier = direct;
        cfg.direct_files = cache_config::file_tier::always;  // the file was just written: it is resident
        auto cache = make_gpu_page_cache(ctl, cfg);
        array<uint64_t> a(cache, loc.nsid);
        if (direct && cache->dataset(0).source.mapped() == nullptr) throw error(std::string("no direct tier for ") + loc.name);
        const uint64_t pages = miss_data / page;
        const uint64_t per_pass = std::min<uint64_t>(cache->slots() / 2, pages);
        cudaMemset(failed, 0, 8);
        // Warm-up pass, then measured passes with the cache emptied before each.
        double secs = 0, cpu = 0;
        uint64_t misses = 0;
#if DW_CACHE_PHASE_TIMING
        unsigned long long phases[5] = {0, 0, 0, 0, 0};
#endif
        for (int pass = 0; pass < 4; ++pass) {
          if (!cache->clear().ok()) throw error("clear failed");
          cache->reset_stats();
#if DW_CACHE_PHASE_TIMING
          if (pass == 1) check_cuda(cudaMemcpyToSymbol(dw_fill_phase_ns, phases, sizeof(phases)), "phase timers");
#endif
          const double c0 = ctl.poller_cpu_seconds();
          timer t;
          t.start();
          if (bounded)
            miss_kernel_lb<<<unsigned((per_pass + 255) / 256), 256>>>(a.ref(), uint64_t(pass) * per_pass, per_pass,
                                                                      pages, sink, failed);
          else
            miss_kernel<<<unsigned((per_pass + 255) / 256), 256>>>(a.ref(), uint64_t(pass) * per_pass, per_pass,
                                                                   pages, sink, failed);
          const double s = t.stop();
          if (pass == 0) continue;
          secs += s;
          cpu += ctl.poller_cpu_seconds() - c0;
          misses += cache->stats().misses;
        }
        unsigned long long f = 0;
        cudaMemcpy(&f, failed, 8, cudaMemcpyDeviceToHost);
#if DW_CACHE_PHASE_TIMING
        check_cuda(cudaMemcpyFromSymbol(phases, dw_fill_phase_ns, sizeof(phases)), "phase timers");
        const double nfills = phases[4] ? double(phases[4]) : 1.0;
        if (!direct)
          std::printf("  fill phases (mean us over %llu controller fills): command id %.1f, submit %.1f, "
                      "completion %.1f, copy-in %.1f\n",
                      phases[4], phases[0] / nfills / 1e3, phases[1] / nfills / 1e3, phases[2] / nfills / 1e3,
                      phases[3] / nfills / 1e3);
#endif
        const double gbps = double(misses) * page / secs / 1e9, miops = misses / secs / 1e6;
        const char* path = direct ? "direct" : "controller";
        std::printf("all-miss %s %u B pages, %s: %.2f M pages/s = %.1f GB/s (%.3f of H2D), controller %.2f cores, "
                    "failed %llu\n",
                    loc.name, page, path, miops, gbps, gbps / link, cpu / secs, f);
        json j;
        j["config"] = {{"mode", "all-miss"}, {"launch_bounds_256_2", bounded}, {"page_size", page}, {"data_bytes", miss_data},
                       {"cache_bytes", cfg.capacity_bytes}, {"pages_per_pass", per_pass}, {"passes", 3},
                       {"path", path}, {"location", loc.name}, {"pollers", pollers}, {"queues", queues},
                       {"queue_entries", entries}};
        j["metrics"] = {{"misses", misses},  {"seconds", secs},       {"miops", miops},  {"gbps", gbps},
                        {"failed", f},       {"controller_cores", cpu / secs},
                        {"controller_cores_per_10gbps", gbps > 0 ? cpu / secs / (gbps / 10) : 0.0}};
#if DW_CACHE_PHASE_TIMING
        if (!direct)
          j["fill_phases_mean_us"] = {{"command_id", phases[0] / nfills / 1e3},
                                      {"submit", phases[1] / nfills / 1e3},
                                      {"completion", phases[2] / nfills / 1e3},
                                      {"copy_in", phases[3] / nfills / 1e3},
                                      {"fills", phases[4]}};
#endif
        const std::string key = std::string("miss") + (page == 4096 ? "4k" : std::to_string(page)) + "_" + loc.name +
                                "_" + (direct ? "direct" : "ctrl") + "_vs_h2d";
        j["ratios"] = {{key, gbps / link}};
        if (std::string(loc.name) == "hostmem" && zero_copy_gbps.count(page))
          j["ratios"]["vs_zero_copy"] = gbps / zero_copy_gbps[page];
        emit(j);
      }
    }
    if (!skip_write && !write_first) run_writes();
    cudaFree(sink);
    cudaFree(failed);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_array_bench: %s\n", e.what());
    return 2;
  }
}
