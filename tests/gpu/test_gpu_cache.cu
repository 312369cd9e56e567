// The page cache and array_ref from GPU kernels: the CPU suite's scenarios
// (random and sequential reads verified against the data under eviction,
// writes + flush + POSIX re-read, fault-injected errors as statuses, a
// controller stopped under a running kernel), warp cases (all lanes one page,
// all different, mixed; 1, 7 and 32 active lanes), page handles, bulk copies,
// prefetch, staging reuse with a tiny queue, and the launch-size check.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "../common/pattern.hpp"
#include "../common/scratch_file.hpp"
#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/views/array.hpp"
#include "targets/host_tier.hpp"
#include "deepwell/cache/page_cache.hpp"

using namespace deepwell;
namespace sc = deepwell::nvme::sc;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

constexpr uint64_t seed = 21;

DW_HD uint64_t expected(uint64_t i, uint64_t s = seed) { return test::pattern_word(i * 8, s); }

std::shared_ptr<target> pattern_memory(uint64_t bytes, bool writable, uint64_t s = seed) {
  return test::pattern_memory(bytes, writable, s);
}

using scratch_file = test::scratch_file;

struct counts {
  unsigned long long ok, bad, failed;
  unsigned int last_status;
};

struct device_counts {
  counts* d = nullptr;
  device_counts() {
    check_cuda(cudaMalloc(&d, sizeof(counts)), "cudaMalloc");
    check_cuda(cudaMemset(d, 0, sizeof(counts)), "cudaMemset");
  }
  ~device_counts() { cudaFree(d); }
  counts get() const {
    counts c{};
    check_cuda(cudaMemcpy(&c, d, sizeof(c), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return c;
  }
};

__device__ void tally(counts* c, request_status s, bool good) {
  if (!s.ok()) {
    atomicAdd(&c->failed, 1ull);
    c->last_status = s.pack();
  } else {
    atomicAdd(good ? &c->ok : &c->bad, 1ull);
  }
}

__device__ uint64_t xorshift(uint64_t& x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

// Random reads (or, with `sequential`, consecutive elements per thread).
__global__ void read_kernel(array_ref<uint64_t> a, unsigned per_thread, bool sequential, counts* c) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t x = tid * 0x9E3779B97F4A7C15ull + 1;
  for (unsigned k = 0; k < per_thread; ++k) {
    const uint64_t i = sequential ? (tid * per_thread + k) % a.size() : xorshift(x) % a.size();
    request_status s;
    const uint64_t v = a.try_read(i, &s);
    tally(c, s, v == expected(i));
  }
}

cache_config gpu_cache(uint64_t bytes, uint32_t page = 4096) {
  cache_config c;
  c.page_size = page;
  c.capacity_bytes = bytes;
  c.queue_pairs = 32;
  c.queue_entries = 256;
  c.timeout_ns = 60ull * 1000000000ull;
  return c;
}

controller_config pollers(unsigned n) {
  controller_config c;
  c.pollers = n;
  return c;
}

}  // namespace

TEST(GpuCache, MillionThreadsRandomReadsThroughTheController) {
  controller ctl(pollers(4));
  const uint64_t bytes = 1ull << 30;
  // A fault target with no rules: served by the controller, not the direct tier.
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(bytes, false)), 4096, true});
  // A million threads keep about 3000 warps resident: 32 pages each.
  auto cache = make_gpu_page_cache(ctl, gpu_cache(448ull << 20));
  array<uint64_t> a(cache, ns);
  device_counts c;
  const unsigned threads = 1u << 20;
  check_launch(*cache, read_kernel, threads / 256, 256);
  read_kernel<<<threads / 256, 256>>>(a.ref(), 4, false, c.d);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const counts r = c.get();
  EXPECT_EQ(r.ok, 4ull * threads);
  EXPECT_EQ(r.bad, 0u);
  EXPECT_EQ(r.failed, 0u) << describe(request_status::unpack(r.last_status));
  const cache_stats st = cache->stats();
  EXPECT_EQ(st.accesses, 4ull * threads);
  EXPECT_GT(st.evictions, 0u);
  EXPECT_EQ(st.direct_fills, 0u);
  EXPECT_TRUE(cache->last_error().ok());
}

TEST(GpuCache, DirectTierRandomAndSequentialReads) {
  controller ctl(pollers(2));
  const uint64_t bytes = 1ull << 30;
  const uint32_t ns = ctl.add_namespace({pattern_memory(bytes, false), 4096, true});
  auto cache = make_gpu_page_cache(ctl, gpu_cache(448ull << 20));
  array<uint64_t> a(cache, ns);
  check_launch(*cache, read_kernel, 2048, 256);
  for (bool seq : {false, true}) {
    device_counts c;
    read_kernel<<<2048, 256>>>(a.ref(), 8, seq, c.d);
    CUDA_OK(cudaDeviceSynchronize());
    const counts r = c.get();
    EXPECT_EQ(r.ok, 8ull * 2048 * 256) << "sequential=" << seq;
    EXPECT_EQ(r.bad + r.failed, 0u);
  }
  const cache_stats st = cache->stats();
  EXPECT_EQ(st.direct_fills, st.misses);
  EXPECT_EQ(ctl.total_counters().reads, 0u);
}

// Runs of eight words of one page (reads that hit, with no pin) between
// random jumps (misses that evict), so that slots change hands while other
// lanes read them.
__global__ void churn_read_kernel(array_ref<uint64_t> a, unsigned per_thread, counts* c) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t x = tid * 0x9E3779B97F4A7C15ull + 7, base = 0;
  for (unsigned k = 0; k < per_thread; ++k) {
    if (k % 4 == 0) base = xorshift(x) % a.size();
    const uint64_t i = (base + xorshift(x) % 8) % a.size();
    request_status s;
    const uint64_t v = a.try_read(i, &s);
    tally(c, s, v == expected(i));
  }
}

// Element reads of cached pages take no pin (page_cache_ref::read_hit) and
// check the slot's generation after the data: a cache of 64 MiB for 1 GiB,
// refilled from host memory by copies (fast, so slots turn over while
// readers are mid-read); every value must be the word asked for.
TEST(GpuCache, PinFreeHitsUnderChurnReadOnlyTheirOwnWords) {
  controller ctl(pollers(2));
  const uint64_t bytes = 1ull << 30;
  const uint32_t ns = ctl.add_namespace({pattern_memory(bytes, false), 4096, true});
  auto cache = make_gpu_page_cache(ctl, gpu_cache(64ull << 20));
  array<uint64_t> a(cache, ns);
  const unsigned blocks = 48, per_thread = 256;
  check_launch(*cache, churn_read_kernel, blocks, 256);
  device_counts c;
  churn_read_kernel<<<blocks, 256>>>(a.ref(), per_thread, c.d);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const counts r = c.get();
  EXPECT_EQ(r.ok, uint64_t(per_thread) * blocks * 256);
  EXPECT_EQ(r.bad, 0u) << "reads that returned another word's or page's bytes";
  EXPECT_EQ(r.failed, 0u) << describe(request_status::unpack(r.last_status));
  const cache_stats st = cache->stats();
  EXPECT_EQ(st.accesses, uint64_t(per_thread) * blocks * 256);
  EXPECT_GT(st.evictions, 10000u);
  EXPECT_GT(st.hits, st.misses) << "runs of a page should mostly hit";
}

TEST(GpuCache, DirectTierReadsAResidentFileThroughARegisteredMapping) {
  const uint64_t bytes = 256ull << 20;
  scratch_file f(bytes, seed);  // just written: resident in the page cache
  controller ctl(pollers(2));
  const uint32_t ns = ctl.add_namespace({open_file_target(f.path()), 4096, true});
  auto cache = make_gpu_page_cache(ctl, gpu_cache(64ull << 20));
  array<uint64_t> a(cache, ns);
  device_counts c;
  check_launch(*cache, read_kernel, 64, 128);  // 256 warps x 32 pages = half the cache
  read_kernel<<<64, 128>>>(a.ref(), 32, false, c.d);
  CUDA_OK(cudaDeviceSynchronize());
  const counts r = c.get();
  EXPECT_EQ(r.ok, 32ull * 64 * 128);
  EXPECT_EQ(r.bad + r.failed, 0u);
  const cache_stats st = cache->stats();
  EXPECT_GT(st.misses, 0u);
  EXPECT_EQ(st.direct_fills, st.misses);
  EXPECT_EQ(ctl.total_counters().reads, 0u);
}

// The server's host tier as the GPU reads it (the direct tier across
// processes, here in one): a GPU cache copies resident pages from the
// dataset's arena with no command; every word is checked.
TEST(GpuCache, HostTierArenaPagesAreCopiedWithoutCommands) {
  const uint64_t bytes = 256ull << 20;
  auto tier = host_tier::make(bytes);
  controller ctl(pollers(2));
  // A fault target with no rules: no host pointer, so no embedded direct tier.
  const uint32_t ns = ctl.add_namespace({tier->wrap(make_fault_target(pattern_memory(bytes, false))), 4096, true});
  {
    cache_config first = gpu_cache(64ull << 20);
    first.direct_tier = false;  // through the controller: installs every page in the arena
    auto cache = make_gpu_page_cache(ctl, first);
    array<uint64_t> a(cache, ns);
    device_counts c;
    check_launch(*cache, read_kernel, 64, 256);
    read_kernel<<<64, 256>>>(a.ref(), uint32_t(bytes / 8 / (64 * 256)), true, c.d);
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(c.get().bad + c.get().failed, 0u);
  }
  ASSERT_EQ(tier->stats().resident_pages, bytes / 4096);
  const uint64_t reads = ctl.total_counters().reads;
  // 160 MiB: room for the pins of every warp resident at once (2048 blocks
  // run 1056 warps at a time on an H100, 32 pages each).
  auto cache = make_gpu_page_cache(ctl, gpu_cache(160ull << 20));
  array<uint64_t> a(cache, ns);
  ASSERT_EQ(cache->dataset(a.ref().dataset).source.kind, page_source_kind::shared_tier);
  device_counts c;
  check_launch(*cache, read_kernel, 2048, 256);
  read_kernel<<<2048, 256>>>(a.ref(), 8, false, c.d);
  CUDA_OK(cudaDeviceSynchronize());
  const counts r = c.get();
  EXPECT_EQ(r.ok, 8ull * 2048 * 256);
  EXPECT_EQ(r.bad + r.failed, 0u) << describe(request_status::unpack(r.last_status));
  const cache_stats st = cache->stats();
  EXPECT_GT(st.misses, 0u);
  EXPECT_EQ(st.tier_fills + st.tier_retries, st.misses);
  EXPECT_EQ(st.tier_retries, 0u) << "nothing changed the arena";
  EXPECT_EQ(ctl.total_counters().reads, reads) << "no command reached the controller";
}

// The same while CPU threads churn a small arena (installs evict, frames
// are reused for other pages): a copy the server changed underneath is
// never kept, so every word the GPU reads is right.
TEST(GpuCache, HostTierArenaUnderChurnNeverGivesATornPage) {
  const uint64_t bytes = 64ull << 20;
  auto tier = host_tier::make(4ull << 20);  // 1024 frames over 16384 pages
  controller ctl(pollers(2));
  const uint32_t ns = ctl.add_namespace({tier->wrap(make_fault_target(pattern_memory(bytes, false))), 4096, true});
  // 24 blocks of 128: 96 warps pin at most 3072 of the 4096 pages. Checked
  // before the churning threads start, so a throw cannot leave them running.
  const unsigned blocks = 24, threads = 128;
  auto cache = make_gpu_page_cache(ctl, gpu_cache(16ull << 20));
  array<uint64_t> a(cache, ns);
  check_launch(*cache, read_kernel, blocks, threads);
  std::atomic<bool> stop{false};
  std::vector<std::thread> churn;
  for (unsigned t = 0; t < 4; ++t)
    churn.emplace_back([&, t] {
      host_queue_client q(ctl.create_queue_pair({64, 64, 4096}));
      std::vector<uint8_t> buf(4096);
      uint64_t x = t + 1;
      while (!stop.load()) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        if (!q.read(ns, (x >> 20) % (bytes / 4096), 1, 4096, buf.data()).ok()) break;
      }
    });
  device_counts c;
  uint64_t launches = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3)) {
    read_kernel<<<blocks, threads>>>(a.ref(), 64, false, c.d);
    CUDA_OK(cudaDeviceSynchronize());
    ++launches;
  }
  stop = true;
  for (auto& th : churn) th.join();
  const counts r = c.get();
  EXPECT_EQ(r.ok, launches * 64 * blocks * threads);
  EXPECT_EQ(r.bad, 0u) << "words from a page the server changed while the GPU copied it";
  EXPECT_EQ(r.failed, 0u) << describe(request_status::unpack(r.last_status));
  const cache_stats st = cache->stats();
  EXPECT_GT(st.tier_fills, 0u) << "the GPU never copied from the arena: the test tested nothing";
  std::printf("tier fills %llu, retries %llu, misses %llu, arena evictions %llu\n", (unsigned long long)st.tier_fills,
              (unsigned long long)st.tier_retries, (unsigned long long)st.misses,
              (unsigned long long)tier->stats().evictions);
}

TEST(GpuCache, FileAtOnePercentCacheWithATinyQueueReusingStaging) {
  const uint64_t bytes = 1ull << 30;
  scratch_file f(bytes, seed);
  controller ctl(pollers(4));
  const uint32_t ns = ctl.add_namespace({open_file_target(f.path()), 4096, true});
  cache_config cc = gpu_cache(bytes / 100);  // 2621 pages
  cc.direct_files = cache_config::file_tier::never;  // through the controller, not the file's mapping
  cc.queue_pairs = 4;
  cc.queue_entries = 8;  // 7 staging buffers per queue: reused all the time
  auto cache = make_gpu_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  device_counts c;
  const unsigned blocks = 20, threads = 128;  // 80 warps x 32 pages fit in 2621
  check_launch(*cache, read_kernel, blocks, threads);
  read_kernel<<<blocks, threads>>>(a.ref(), 200, false, c.d);
  CUDA_OK(cudaDeviceSynchronize());
  const counts r = c.get();
  EXPECT_EQ(r.ok, 200ull * blocks * threads);
  EXPECT_EQ(r.bad, 0u);
  EXPECT_EQ(r.failed, 0u) << describe(request_status::unpack(r.last_status));
  EXPECT_GT(cache->stats().evictions, 0u);
}

namespace {

// lane l of each warp reads an element of page `page_of(l)`; inactive lanes
// (not in `mask`) return before the access.
__global__ void warp_case_kernel(array_ref<uint64_t> a, unsigned mask, unsigned lanes_per_page, counts* c) {
  const unsigned lane = threadIdx.x & 31;
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (!((mask >> lane) & 1)) return;
  const uint64_t page = (warp * 32 + lane / lanes_per_page) % (a.size() / 512);
  const uint64_t i = page * 512 + (lane * 37) % 512;
  request_status s;
  const uint64_t v = a.try_read(i, &s);
  tally(c, s, v == expected(i));
}

}  // namespace

TEST(GpuCache, WarpCasesCoalesceAndFetchEachPageOnce) {
  controller ctl(pollers(2));
  const uint64_t bytes = 64ull << 20;  // 16384 pages
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(bytes, false)), 4096, true});
  struct wc {
    const char* name;
    unsigned mask, lanes_per_page;
  };
  for (const wc w : {wc{"all-one-page", 0xFFFFFFFFu, 32}, wc{"all-different", 0xFFFFFFFFu, 1},
                     wc{"mixed", 0xFFFFFFFFu, 4}, wc{"one-lane", 0x00010000u, 1}, wc{"seven-lanes", 0x80421805u, 2},
                     wc{"32-lanes-pairs", 0xFFFFFFFFu, 2}}) {
    auto cache = make_gpu_page_cache(ctl, gpu_cache(bytes));  // holds it all: every fetch is a first touch
    array<uint64_t> a(cache, ns);
    device_counts c;
    const unsigned warps = 256;
    check_launch(*cache, warp_case_kernel, warps / 4, 128);
    warp_case_kernel<<<warps / 4, 128>>>(a.ref(), w.mask, w.lanes_per_page, c.d);
    CUDA_OK(cudaDeviceSynchronize());
    const counts r = c.get();
    const unsigned active = __builtin_popcount(w.mask);
    EXPECT_EQ(r.ok, uint64_t(warps) * active) << w.name;
    EXPECT_EQ(r.bad + r.failed, 0u) << w.name;
    // Distinct pages: each warp's active lanes cover page groups lane / lanes_per_page.
    std::vector<bool> seen(bytes / 4096, false);
    for (uint64_t wi = 0; wi < warps; ++wi)
      for (unsigned l = 0; l < 32; ++l)
        if (w.mask >> l & 1) seen[(wi * 32 + l / w.lanes_per_page) % seen.size()] = true;
    uint64_t distinct = 0;
    for (bool b : seen) distinct += b;
    const cache_stats st = cache->stats();
    EXPECT_EQ(st.misses, distinct) << w.name;
    EXPECT_EQ(st.accesses, uint64_t(warps) * active) << w.name;
  }
}

namespace {

// The file read back through POSIX: every third word rewritten (seed 99),
// the others as written at the start.
void expect_every_third_word_rewritten(const std::string& path, uint64_t bytes) {
  const std::vector<uint64_t> file = test::file_words(path, bytes);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < file.size(); ++i) bad += file[i] != (i % 3 == 0 ? expected(i, 99) : expected(i));
  EXPECT_EQ(bad, 0u);
}

__global__ void write_kernel(array_ref<uint64_t> a, uint64_t stride, counts* c) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (uint64_t i = tid * stride; i < a.size(); i += uint64_t(gridDim.x) * blockDim.x * stride)
    tally(c, a.write(i, expected(i, 99)), true);
}

}  // namespace

TEST(GpuCache, WritesFlushAndRereadThroughPosix) {
  const uint64_t bytes = 64ull << 20;
  scratch_file f(bytes, seed);
  controller ctl(pollers(4));
  file_options o;
  o.writable = true;
  const uint32_t ns = ctl.add_namespace({open_file_target(f.path(), o), 4096, false});
  auto cache = make_gpu_page_cache(ctl, gpu_cache(16ull << 20));  // dirty pages get evicted
  array<uint64_t> a(cache, ns);
  device_counts c;
  check_launch(*cache, write_kernel, 32, 128);
  write_kernel<<<32, 128>>>(a.ref(), 3, c.d);
  CUDA_OK(cudaDeviceSynchronize());
  const counts r = c.get();
  EXPECT_EQ(r.failed, 0u) << describe(request_status::unpack(r.last_status));
  EXPECT_EQ(r.ok, (bytes / 8 + 2) / 3);
  const request_status fl = cache->flush();
  EXPECT_TRUE(fl.ok()) << describe(fl);
  EXPECT_GT(cache->stats().writebacks, 0u);
  expect_every_third_word_rewritten(f.path(), bytes);
}

namespace {

// Each thread walks a run of `run` consecutive elements from its own
// starting point with a cursor: lanes change pages at different moments
// (divergent), and pages are evicted under them.
__global__ void cursor_read_kernel(array_ref<uint64_t> a, uint64_t run, counts* c) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t begin = (tid * 0x9E3779B97F4A7C15ull) % (a.size() - run);
  array_cursor<uint64_t> cur(a);
  unsigned long long ok = 0;
  for (uint64_t i = begin; i < begin + run; ++i) {
    request_status s;
    const uint64_t v = cur.read(i, &s);
    if (s.ok() && v == expected(i)) {
      ++ok;
    } else {
      tally(c, s, false);
    }
  }
  atomicAdd(&c->ok, ok);
}

// Thread t rewrites every third element of its own run [t * run, (t + 1) * run).
__global__ void cursor_write_kernel(array_ref<uint64_t> a, uint64_t run, counts* c) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  array_cursor<uint64_t> cur(a);
  for (uint64_t i = tid * run; i < (tid + 1) * run && i < a.size(); ++i)
    if (i % 3 == 0) tally(c, cur.write(i, expected(i, 99)), true);
}

}  // namespace

namespace {

// Word w of page p (of `pages`) written by the thread that takes page
// (p * 7919) % pages: the pages reach the cache, and so its slots, in an
// order that is not the files'. Pages whose number is a multiple of 5 are
// written twice (the second value wins).
__global__ void scattered_write_kernel(array_ref<uint64_t> a, uint64_t pages, uint64_t s, counts* c) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  for (uint64_t k = warp; k < pages; k += warps) {
    const uint64_t p = (k * 7919) % pages;
    for (int pass = 0; pass < (p % 5 == 0 ? 2 : 1); ++pass)
      for (uint64_t w = lane; w < 512; w += 32) {
        const uint64_t i = p * 512 + w;
        tally(c, a.write(i, expected(i, pass ? s + 1 : s)), true);
      }
  }
}

}  // namespace

// flush() takes the dirty pages in key order (sorted on the GPU, a run of a
// file a warp, through one queue) and then in slot order: every page of
// two files, written in an order unrelated to theirs, reaches each file
// exactly, and a second flush finds nothing left to write.
TEST(GpuCache, FlushInKeyOrderWritesEveryPageOfEveryFile) {
  const uint64_t bytes = 32ull << 20, pages = bytes / 4096;
  scratch_file f1(bytes, seed), f2(bytes, seed + 1);
  controller ctl(pollers(4));
  file_options o;
  o.writable = true;
  const uint32_t ns1 = ctl.add_namespace({open_file_target(f1.path(), o), 4096, false});
  const uint32_t ns2 = ctl.add_namespace({open_file_target(f2.path(), o), 4096, false});
  cache_config cc = gpu_cache(3 * bytes);  // both files stay cached,
  cc.clean_threshold = 0;                  // and no cleaner writes ahead: the flush writes every page
  auto cache = make_gpu_page_cache(ctl, cc);
  array<uint64_t> a1(cache, ns1), a2(cache, ns2);
  device_counts c;
  check_launch(*cache, scattered_write_kernel, 64, 128);
  scattered_write_kernel<<<64, 128>>>(a1.ref(), pages, 40, c.d);
  scattered_write_kernel<<<64, 128>>>(a2.ref(), pages, 50, c.d);
  CUDA_OK(cudaDeviceSynchronize());
  const counts r = c.get();
  EXPECT_EQ(r.failed, 0u) << describe(request_status::unpack(r.last_status));
  const uint64_t before = cache->stats().writebacks;
  const request_status fl = cache->flush();
  EXPECT_TRUE(fl.ok()) << describe(fl);
  EXPECT_EQ(cache->stats().writebacks - before, 2 * pages) << "each dirty page written back once";
  for (auto [path, s] : {std::pair{f1.path(), uint64_t(40)}, {f2.path(), uint64_t(50)}}) {
    const std::vector<uint64_t> file = test::file_words(path, bytes);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < file.size(); ++i) bad += file[i] != expected(i, (i / 512) % 5 == 0 ? s + 1 : s);
    EXPECT_EQ(bad, 0u) << path;
  }
  const uint64_t after = cache->stats().writebacks;
  EXPECT_TRUE(cache->flush().ok());
  EXPECT_EQ(cache->stats().writebacks, after) << "a second flush has nothing to write";
}

TEST(GpuCache, CursorsWalkRunsWithALookupAPageAndWriteBackExactly) {
  const uint64_t bytes = 64ull << 20;
  scratch_file f(bytes, seed);
  controller ctl(pollers(4));
  file_options o;
  o.writable = true;
  const uint32_t ns = ctl.add_namespace({open_file_target(f.path(), o), 4096, false});
  auto cache = make_gpu_page_cache(ctl, gpu_cache(16ull << 20));  // a quarter of the file: evictions
  array<uint64_t> a(cache, ns);
  const unsigned blocks = 32, threads = 128;
  const uint64_t n = uint64_t(blocks) * threads;
  {
    device_counts c;
    const uint64_t run = 3000;  // about 6 pages a thread
    check_launch(*cache, cursor_read_kernel, blocks, threads);  // the cursor is the only access: a pin a lane
    cache->reset_stats();
    cursor_read_kernel<<<blocks, threads>>>(a.ref(), run, c.d);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const counts r = c.get();
    EXPECT_EQ(r.ok, n * run);
    EXPECT_EQ(r.bad, 0u);
    EXPECT_EQ(r.failed, 0u) << describe(request_status::unpack(r.last_status));
    // A lookup for each page a run enters, not one per element.
    const cache_stats st = cache->stats();
    EXPECT_LE(st.accesses, n * (run / 512 + 2));
    EXPECT_GE(st.accesses, n * (run / 512));
  }
  device_counts c;
  const uint64_t run = (bytes / 8 + n - 1) / n;
  check_launch(*cache, cursor_write_kernel, blocks, threads);
  cursor_write_kernel<<<blocks, threads>>>(a.ref(), run, c.d);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const counts r = c.get();
  EXPECT_EQ(r.failed, 0u) << describe(request_status::unpack(r.last_status));
  EXPECT_EQ(r.ok, (bytes / 8 + 2) / 3);
  const request_status fl = cache->flush();
  EXPECT_TRUE(fl.ok()) << describe(fl);
  EXPECT_GT(cache->stats().evictions, 0u);
  expect_every_third_word_rewritten(f.path(), bytes);
}

TEST(GpuCache, FaultInjectedErrorsReachThreadsAsStatuses) {
  controller ctl(pollers(2));
  auto faults = make_fault_target(pattern_memory(64ull << 20, false));
  fault_rule rule;
  rule.kind = fault_rule::fail_read;
  rule.offset = 0;
  rule.length = 32ull << 20;  // the first half fails
  faults->add_rule(rule);
  const uint32_t ns = ctl.add_namespace({faults, 4096, true});
  auto cache = make_gpu_page_cache(ctl, gpu_cache(32ull << 20));
  array<uint64_t> a(cache, ns);
  device_counts c;
  check_launch(*cache, read_kernel, 64, 128);
  read_kernel<<<64, 128>>>(a.ref(), 16, false, c.d);
  CUDA_OK(cudaDeviceSynchronize());
  const counts r = c.get();
  EXPECT_GT(r.failed, 0u);
  EXPECT_GT(r.ok, 0u);
  EXPECT_EQ(r.bad, 0u);
  EXPECT_EQ(r.ok + r.failed, 16ull * 64 * 128);
  const request_status e = cache->last_error();
  EXPECT_EQ(e.nvme, sc::unrecovered_read_error) << describe(e);
}

namespace {

__global__ void read_until_failure(array_ref<uint64_t> a, counts* c) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t x = tid + 12345;
  for (int k = 0; k < 100000; ++k) {
    const uint64_t i = xorshift(x) % a.size();
    request_status s;
    const uint64_t v = a.try_read(i, &s);
    tally(c, s, v == expected(i));
    if (!s.ok()) return;
  }
}

}  // namespace

TEST(GpuCache, ControllerStoppedUnderARunningKernelEndsItWithStatuses) {
  controller ctl(pollers(2));
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(256ull << 20, false)), 4096, true});
  cache_config cc = gpu_cache(40ull << 20);
  cc.timeout_ns = 10ull * 1000000000ull;
  auto cache = make_gpu_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  device_counts c;
  check_launch(*cache, read_until_failure, 64, 128);
  read_until_failure<<<64, 128>>>(a.ref(), c.d);
  CUDA_OK(cudaGetLastError());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A watchdog's dump works while the kernel runs (a non-blocking stream).
  const auto d0 = std::chrono::steady_clock::now();
  const std::string dump = cache->dump();
  EXPECT_NE(dump.find("page cache: GPU"), std::string::npos) << dump;
  EXPECT_NE(dump.find("misses"), std::string::npos) << dump;
  EXPECT_LT(std::chrono::steady_clock::now() - d0, std::chrono::seconds(2));
  EXPECT_EQ(cudaStreamQuery(0), cudaErrorNotReady);  // the kernel was still running
  const auto t0 = std::chrono::steady_clock::now();
  ctl.stop();
  CUDA_OK(cudaDeviceSynchronize());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const counts r = c.get();
  EXPECT_EQ(r.bad, 0u);
  EXPECT_GT(r.ok, 0u);
  EXPECT_EQ(r.failed, 64u * 128u);  // every thread ended with a status
  EXPECT_LT(secs, 9.0);
}

namespace {

// Each warp copies its own 3-page window (unaligned) with read_range, checks
// it, then pins a page with a handle and reads every element through it.
__global__ void range_kernel(array_ref<uint64_t> a, uint64_t* scratch, counts* c) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x & 31;
  const uint64_t begin = (warp * 1537 + 13) % (a.size() - 2000);
  uint64_t* mine = scratch + warp * 1500;
  const request_status s = a.read_range(mine, begin, 1500);
  __syncwarp();
  for (unsigned k = lane; k < 1500; k += 32) tally(c, s, mine[k] == expected(begin + k));
  page_handle<uint64_t> h = a.page(begin + lane * 40);
  bool good = h.ok();
  for (uint64_t i = h.first(); good && i < h.first() + h.count(); ++i) good = h[i] == expected(i);
  tally(c, h.status(), good);
  h.release();
  // And into shared memory: 700 elements across a page boundary.
  __shared__ uint64_t tile[4][700];
  uint64_t* t = tile[(threadIdx.x / 32) % 4];
  const uint64_t b2 = (warp * 911 + 300) % (a.size() - 700);
  const request_status s2 = a.read_range(t, b2, 700);
  __syncwarp();
  for (unsigned k = lane; k < 700; k += 32) tally(c, s2, t[k] == expected(b2 + k));
}

__global__ void prefetch_kernel(array_ref<uint64_t> a, uint64_t pages) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid < pages) a.prefetch(tid * 512);
}

}  // namespace

TEST(GpuCache, BulkCopiesPageHandlesAndPrefetch) {
  controller ctl(pollers(2));
  const uint64_t bytes = 64ull << 20;
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(bytes, false)), 4096, true});
  auto cache = make_gpu_page_cache(ctl, gpu_cache(32ull << 20));
  array<uint64_t> a(cache, ns);
  const unsigned blocks = 64, threads = 128, warps = blocks * threads / 32;
  uint64_t* scratch = nullptr;
  CUDA_OK(cudaMalloc(&scratch, sizeof(uint64_t) * 1500 * warps));
  device_counts c;
  check_launch(*cache, range_kernel, blocks, threads);
  range_kernel<<<blocks, threads>>>(a.ref(), scratch, c.d);
  CUDA_OK(cudaDeviceSynchronize());
  counts r = c.get();
  EXPECT_EQ(r.ok, uint64_t(warps) * (1500 + 700) + uint64_t(blocks) * threads);
  EXPECT_EQ(r.bad + r.failed, 0u) << describe(request_status::unpack(r.last_status));
  cudaFree(scratch);

  // Prefetch 64 pages of an emptied cache, read 8 of them: all hits. The
  // 56 never read are finished by clear().
  ASSERT_TRUE(cache->clear().ok());
  cache->reset_stats();
  prefetch_kernel<<<1, 64>>>(a.ref(), 64);
  CUDA_OK(cudaDeviceSynchronize());
  const uint64_t fetched = cache->stats().misses;
  EXPECT_GT(fetched, 0u);
  device_counts c2;
  read_kernel<<<16, 256>>>(a.ref(), 1, true, c2.d);  // thread t reads element t: pages 0..7
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(c2.get().ok, 16u * 256u);
  EXPECT_EQ(cache->stats().misses, fetched);  // nothing fetched twice
  EXPECT_TRUE(cache->clear().ok());
}

TEST(GpuCache, LaunchCheckNamesTheNumbers) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({pattern_memory(1 << 20, false), 4096, true});
  auto cache = make_gpu_page_cache(ctl, gpu_cache(64 * 4096));
  array<uint64_t> a(cache, ns);
  EXPECT_NO_THROW(check_launch(*cache, read_kernel, 1, 64));
  try {
    check_launch(*cache, read_kernel, 1000, 256);
    ADD_FAILURE() << "no error for a launch too large for the cache";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("64 pages"), std::string::npos) << e.what();
  }
}
