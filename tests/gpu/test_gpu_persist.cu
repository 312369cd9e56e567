// persist from GPU kernels, checked against a disk with a volatile write
// cache (crash_target.hpp) cut off after the kernel: what each thread
// persisted is durable, what it did not is not; warps persisting at once
// share flushes; writes racing a persist of their page are not lost; a
// page handle's writes; a failed flush reaches the threads.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/targets/crash_target.hpp"
#include "deepwell/views/array.hpp"

using namespace deepwell;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

struct rig {
  controller ctl;
  std::shared_ptr<volatile_cache_target> disk;
  std::shared_ptr<fault_target> faults;
  uint32_t ns;
  std::shared_ptr<page_cache> cache;
  rig(uint64_t bytes, uint64_t cache_pages, uint64_t timeout_s = 20)
      : disk(make_volatile_cache_target(bytes)), faults(make_fault_target(disk)) {
    ns = ctl.add_namespace({faults, 512, false});
    cache_config c;
    c.page_size = 4096;
    c.capacity_bytes = cache_pages * 4096;
    c.timeout_ns = timeout_s * 1000000000ull;
    cache = make_gpu_page_cache(ctl, c);
  }
  std::vector<uint8_t> cut() {
    disk->cut({});
    return disk->durable_image();
  }
};

uint64_t word(const std::vector<uint8_t>& img, uint64_t i) {
  uint64_t v;
  std::memcpy(&v, img.data() + i * 8, 8);
  return v;
}

struct tallies {
  unsigned long long failed;
  unsigned int last;
};

__device__ void note(tallies* t, request_status s) {
  if (!s.ok()) {
    atomicAdd(&t->failed, 1ull);
    t->last = s.pack();
  }
}

// Each thread writes its own words; even threads persist them, odd ones do not.
__global__ void write_then_persist_evens(array_ref<uint64_t> a, uint32_t per_thread, tallies* t) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t first = tid * per_thread;
  for (uint32_t k = 0; k < per_thread; ++k) note(t, a.write(first + k, first + k + 1));
  const bool even = (tid & 1) == 0;
  // Every lane calls persist together; odd lanes pass an empty range.
  note(t, a.persist(first, even ? per_thread : 0));
}

// Threads of all warps write words of shared pages and persist everything
// they wrote, round after round; each records the last round it persisted.
__global__ void racing_persists(array_ref<uint64_t> a, uint64_t words, uint32_t rounds, uint32_t* last, tallies* t) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t threads = uint64_t(gridDim.x) * blockDim.x;
  for (uint32_t r = 1; r <= rounds; ++r) {
    for (uint64_t i = tid; i < words; i += threads) note(t, a.write(i, uint64_t(r) << 32 | tid));
    if (r % 2 == 0) {
      const request_status s = a.persist(0, words);
      note(t, s);
      if (s.ok()) last[tid] = r;
    }
  }
}

__global__ void handle_persist(array_ref<uint64_t> a, tallies* t) {
  const uint64_t i = uint64_t(threadIdx.x) * 1000;
  auto h = a.page(i);
  note(t, h.status());
  if (h.ok()) h.write(i, 7000 + threadIdx.x);
  note(t, h.persist());
  if (h.ok()) h.write(i + 1, 1);  // after the persist: not durable
  h.release();
}

__global__ void write_only(array_ref<uint64_t> a, uint64_t i, tallies* t) { note(t, a.write(i, 77)); }

__global__ void persist_one(array_ref<uint64_t> a, uint64_t i, tallies* t) {
  note(t, a.write(i, 99));
  note(t, a.persist(i, 1));
}

struct device_tallies {
  tallies* d = nullptr;
  device_tallies() {
    check_cuda(cudaMalloc(&d, sizeof(tallies)), "cudaMalloc");
    check_cuda(cudaMemset(d, 0, sizeof(tallies)), "cudaMemset");
  }
  ~device_tallies() { cudaFree(d); }
  tallies get() const {
    tallies h{};
    check_cuda(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return h;
  }
};

// Waits for the work on stream st; past `seconds` prints the cache's state
// and ends the process (a hung kernel cannot be cancelled, and a test that
// waits for it forever tells nothing).
void await_or_die(cudaStream_t st, double seconds, const page_cache& c, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(st);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
      std::fflush(stderr);
      std::_Exit(3);
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      std::fprintf(stderr, "%s: still running after %.0f s (hung)\n%s\n", what, seconds, c.dump().c_str());
      std::fflush(stderr);
      std::_Exit(4);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// racing_persists in one shape, under a watchdog; returns the words whose
// durable value is older than the last round their writer persisted.
uint64_t race(uint32_t blocks, uint32_t threads_per_block, uint32_t rounds, uint64_t cache_pages, uint64_t& failed) {
  rig r(16 << 20, cache_pages);
  array<uint64_t> a(r.cache, r.ns);
  device_tallies t;
  const uint64_t words = 512 * 32;  // 32 pages shared by every thread
  const uint32_t threads = blocks * threads_per_block;
  uint32_t* last = nullptr;
  check_cuda(cudaMalloc(&last, threads * 4), "cudaMalloc");
  check_cuda(cudaMemset(last, 0, threads * 4), "cudaMemset");
  cudaStream_t st;
  check_cuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
  const auto t0 = std::chrono::steady_clock::now();
  racing_persists<<<blocks, threads_per_block, 0, st>>>(a.ref(), words, rounds, last, t.d);
  char what[96];
  std::snprintf(what, sizeof what, "racing_persists<<<%u, %u>>> rounds %u cache %llu pages", blocks, threads_per_block,
                rounds, (unsigned long long)cache_pages);
  await_or_die(st, 30, *r.cache, what);
  check_cuda(cudaStreamDestroy(st), "cudaStreamDestroy");
  std::printf("%s: %.1f ms, %llu flushes\n", what,
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
              (unsigned long long)r.disk->flushes());
  failed = t.get().failed;
  if (failed) std::printf("  %llu failed: %s\n%s\n", (unsigned long long)failed,
                          describe(request_status::unpack(t.get().last)).c_str(), r.cache->dump().c_str());
  std::vector<uint32_t> h(threads);
  check_cuda(cudaMemcpy(h.data(), last, threads * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(last);
  const auto img = r.cut();
  uint64_t behind = 0;
  for (uint64_t i = 0; i < words; ++i) {
    const uint64_t v = word(img, i);
    const uint32_t writer = uint32_t(i % threads);
    behind += (v >> 32) < h[writer] || (h[writer] && uint32_t(v) != writer);
  }
  return behind;
}

}  // namespace

TEST(GpuPersist, WhatEachThreadPersistsIsDurable) {
  rig r(64 << 20, 4096);  // 16 MiB cache over a 64 MiB disk
  array<uint64_t> a(r.cache, r.ns);
  device_tallies t;
  const uint32_t per = 64;  // 512 bytes a thread
  write_then_persist_evens<<<64, 256>>>(a.ref(), per, t.d);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(t.get().failed, 0u) << describe(request_status::unpack(t.get().last)) << "\n" << r.cache->dump();
  const uint64_t flushes = r.disk->flushes();
  EXPECT_GE(flushes, 1u);
  EXPECT_LT(flushes, 64u * 8u);  // 512 warps persisted: group commit shares flushes
  std::printf("512 warps' persists took %llu flushes\n", (unsigned long long)flushes);
  const auto img = r.cut();
  uint64_t lost = 0, leaked = 0;
  for (uint64_t tid = 0; tid < 64 * 256; ++tid)
    for (uint32_t k = 0; k < per; ++k) {
      const uint64_t i = tid * per + k;
      if (tid % 2 == 0) lost += word(img, i) != i + 1;
      else leaked += word(img, i) != 0;
    }
  EXPECT_EQ(lost, 0u);
  // Odd threads share pages with even ones (a page holds 8 threads' words)
  // and go out with them: only count, do not expect, their absence.
  std::printf("%llu words of unpersisted threads were durable with their pages\n", (unsigned long long)leaked);
}

TEST(GpuPersist, UnpersistedPagesAreNotDurable) {
  rig r(16 << 20, 1024);
  array<uint64_t> a(r.cache, r.ns);
  device_tallies t;
  persist_one<<<1, 1>>>(a.ref(), 5, t.d);
  write_only<<<1, 1>>>(a.ref(), 512 * 100, t.d);  // another page, never persisted
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(t.get().failed, 0u);
  const auto img = r.cut();
  EXPECT_EQ(word(img, 5), 99u);
  EXPECT_EQ(word(img, 4), 0u);
  EXPECT_EQ(word(img, 512 * 100), 0u);
}

TEST(GpuPersist, WritesRacingPersistsOfTheirPagesAreNotLost) {
  uint64_t failed = 0;
  EXPECT_EQ(race(8, 128, 8, 64, failed), 0u);  // a small cache: evictions write pages back meanwhile
  EXPECT_EQ(failed, 0u);
}

// The same race from one warp up, so that a failure names the smallest shape.
TEST(GpuPersist, RacingShapesSmallToLarge) {
  const struct { uint32_t blocks, threads, rounds; uint64_t cache_pages; } shapes[] = {
      {1, 32, 2, 1024}, {1, 32, 8, 64}, {1, 128, 8, 64}, {2, 128, 8, 64}, {8, 128, 2, 1024}, {8, 128, 8, 1024}};
  for (const auto& sh : shapes) {
    uint64_t failed = 0;
    EXPECT_EQ(race(sh.blocks, sh.threads, sh.rounds, sh.cache_pages, failed), 0u) << sh.blocks << "x" << sh.threads;
    EXPECT_EQ(failed, 0u) << sh.blocks << "x" << sh.threads;
  }
}

TEST(GpuPersist, PageHandlesPersistTheirWrites) {
  rig r(16 << 20, 1024);
  array<uint64_t> a(r.cache, r.ns);
  device_tallies t;
  handle_persist<<<1, 64>>>(a.ref(), t.d);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(t.get().failed, 0u) << describe(request_status::unpack(t.get().last));
  const auto img = r.cut();
  // Word l*1000 + 1 was written after the persists; it is durable only if
  // another lane's persist of the same page came later, so it is not checked.
  for (uint64_t l = 0; l < 64; ++l) EXPECT_EQ(word(img, l * 1000), 7000 + l) << l;
}

TEST(GpuPersist, AFailedFlushReachesTheThreads) {
  rig r(16 << 20, 1024);
  array<uint64_t> a(r.cache, r.ns);
  fault_rule f;
  f.kind = fault_rule::fail_flush;
  f.count = 1;
  r.faults->add_rule(f);
  device_tallies t;
  persist_one<<<1, 1>>>(a.ref(), 9, t.d);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(t.get().failed, 1u);
  EXPECT_EQ(request_status::unpack(t.get().last).code, client_code::nvme_error);
  device_tallies t2;
  persist_one<<<1, 1>>>(a.ref(), 9, t2.d);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(t2.get().failed, 0u);
  const auto img = r.cut();
  EXPECT_EQ(word(img, 9), 99u);
}

TEST(GpuPersist, HostPersistOfARange) {
  rig r(16 << 20, 1024);
  array<uint64_t> a(r.cache, r.ns);
  device_tallies t;
  write_then_persist_evens<<<4, 128>>>(a.ref(), 8, t.d);  // evens persisted by the kernel
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(a.persist(0, 4 * 128 * 8).ok());  // the odds too, from the host
  const auto img = r.cut();
  for (uint64_t i = 0; i < 4 * 128 * 8; ++i) ASSERT_EQ(word(img, i), i + 1) << i;
}

// 1, 8 and 64 blocks of 256 threads persisting: each
// lane its own range, or the whole warp one range (a 3 s deadline). Lanes with
// their own ranges once hung: internals re-read __activemask() after a
// lane's CAS loop and split the warp (warp.hpp).
__global__ void persist_shape(array_ref<uint64_t> a, uint32_t per, bool uniform, tallies* t) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t first = tid * per;
  for (uint32_t k = 0; k < per; ++k) note(t, a.write(first + k, first + k + 1));
  const uint64_t wfirst = (tid & ~31ull) * per;
  note(t, uniform ? a.persist(wfirst, 32 * per) : a.persist(first, per));
}

TEST(GpuPersist, WarpsOfLanesWithTheirOwnRangesOrOneShared) {
  uint64_t bad = 0;
  for (const bool uniform : {true, false})
    for (const unsigned blocks : {1u, 8u, 64u}) {
      rig r(64 << 20, 4096, 3);
      array<uint64_t> a(r.cache, r.ns);
      device_tallies t;
      const auto t0 = std::chrono::steady_clock::now();
      persist_shape<<<blocks, 256>>>(a.ref(), 64, uniform, t.d);
      CUDA_OK(cudaDeviceSynchronize());
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const tallies h = t.get();
      std::printf("uniform %d blocks %u: %.1f ms, %llu failed (%s), %llu flushes\n", int(uniform), blocks, ms, h.failed,
                  describe(request_status::unpack(h.last)).c_str(), (unsigned long long)r.disk->flushes());
      bad += h.failed;
    }
  EXPECT_EQ(bad, 0u);
}

// The host's persist of a range has each warp write back 32 adjacent pages
// through one queue (persist_run; a poller merges them into one write
// call): with fewer command ids in a queue than lanes in a warp, a run's
// lanes take ids over several turns. A kernel writes 2,048 pages (a page a
// thread, then half of them again); the host persists them all through 2
// queues of 8 entries.
__global__ void write_pages(array_ref<uint64_t> a, uint64_t salt, tallies* t) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (salt && tid % 2) return;
  for (uint64_t k = 0; k < 512; ++k) note(t, a.write(tid * 512 + k, tid * 512 + k + 1 + salt));
}

TEST(GpuPersist, HostRunsThroughOneQueueWithFewerIdsThanLanes) {
  const unsigned blocks = 16, threads = 128;
  const uint64_t pages = uint64_t(blocks) * threads;
  controller ctl;
  auto disk = make_volatile_cache_target(pages * 4096);
  const uint32_t ns = ctl.add_namespace({disk, 512, false});
  cache_config c;
  c.page_size = 4096;
  c.capacity_bytes = 2 * pages * 4096;
  c.queue_pairs = 2;
  c.queue_entries = 8;
  c.timeout_ns = 20000000000ull;
  auto cache = make_gpu_page_cache(ctl, c);
  array<uint64_t> a(cache, ns);
  device_tallies t;
  write_pages<<<blocks, threads>>>(a.ref(), 0, t.d);
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(a.persist(0, pages * 512).ok());
  write_pages<<<blocks, threads>>>(a.ref(), 1000, t.d);  // the even pages again
  CUDA_OK(cudaDeviceSynchronize());
  const request_status p = a.persist(0, pages * 512);
  EXPECT_TRUE(p.ok()) << describe(p);
  EXPECT_EQ(t.get().failed, 0u) << describe(request_status::unpack(t.get().last)) << "\n" << cache->dump();
  disk->cut({});
  const std::vector<uint8_t> img = disk->durable_image();
  uint64_t lost = 0;
  for (uint64_t i = 0; i < pages * 512; ++i) lost += word(img, i) != i + 1 + ((i / 512) % 2 ? 0 : 1000);
  EXPECT_EQ(lost, 0u);
}
