// Kernels built the way deepwell/cache/miss_path.hpp describes (relocatable
// device code, the miss path linked from deepwell_miss_path under its
// register cap) read through the cache exactly as the ordinary build does:
// random reads verified word by word under eviction, through the controller
// and through the direct tier. Writes: the same executable runs the
// standing integrity test (tests/gpu/test_gpu_integrity.cu) built this way.
#include "deepwell/cache/miss_path.hpp"  // first: before anything instantiates the miss path

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "../common/pattern.hpp"
#include "../common/scratch_file.hpp"  // pattern_memory
#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/views/array.hpp"

using namespace deepwell;

namespace {

constexpr uint64_t seed = 33;
DW_HD uint64_t expected(uint64_t i) { return test::pattern_word(i * 8, seed); }

struct counts {
  unsigned long long ok, bad, failed;
};

__device__ void tally(counts* c, request_status s, bool good) {
  atomicAdd(!s.ok() ? &c->failed : good ? &c->ok : &c->bad, 1ull);
}

__global__ void read_kernel(array_ref<uint64_t> a, unsigned per_thread, counts* c) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t x = tid * 0x9E3779B97F4A7C15ull + 1;
  for (unsigned k = 0; k < per_thread; ++k) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const uint64_t i = x % a.size();
    request_status s;
    const uint64_t v = a.try_read(i, &s);
    tally(c, s, v == expected(i));
  }
}

cache_config small_cache(uint64_t bytes) {
  cache_config c;
  c.page_size = 4096;
  c.capacity_bytes = bytes;
  c.queue_pairs = 32;
  c.queue_entries = 256;
  c.timeout_ns = 60ull * 1000000000ull;
  return c;
}

// Room for every resident warp's 32 pins (the launch check): at 64
// registers four blocks of 256 fit an SM, 4224 warps on an H200 (at 255,
// one block), and the cache must hold 32 pages for each, about 530 MiB.
// Still a third of the data: reads evict.
constexpr uint64_t cache_bytes = 704ull << 20;

counts run_reads(const std::shared_ptr<page_cache>& cache, uint32_t ns, unsigned blocks, unsigned per_thread) {
  array<uint64_t> a(cache, ns);
  counts* d = nullptr;
  check_cuda(cudaMalloc(&d, sizeof(counts)), "cudaMalloc");
  check_cuda(cudaMemset(d, 0, sizeof(counts)), "cudaMemset");
  check_launch(*cache, read_kernel, blocks, 256);
  read_kernel<<<blocks, 256>>>(a.ref(), per_thread, d);
  check_cuda(cudaGetLastError(), "launch");
  check_cuda(cudaDeviceSynchronize(), "read_kernel");
  counts c{};
  check_cuda(cudaMemcpy(&c, d, sizeof(c), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(d);
  return c;
}

}  // namespace

TEST(GpuMissPath, RandomReadsThroughTheControllerUnderEviction) {
  controller_config cc;
  cc.pollers = 4;
  controller ctl(cc);
  const uint64_t bytes = 2ull << 30;
  // A fault target with no rules: served by the controller, not the direct tier.
  const uint32_t ns = ctl.add_namespace({make_fault_target(test::pattern_memory(bytes, false, seed)), 4096, true});
  auto cache = make_gpu_page_cache(ctl, small_cache(cache_bytes));
  const counts r = run_reads(cache, ns, 2048, 8);
  EXPECT_EQ(r.ok, 8ull * 2048 * 256);
  EXPECT_EQ(r.bad, 0u);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_GT(cache->stats().evictions, 0u);
  EXPECT_EQ(cache->stats().direct_fills, 0u);
}

TEST(GpuMissPath, RandomReadsThroughTheDirectTier) {
  controller_config cc;
  cc.pollers = 2;
  controller ctl(cc);
  const uint64_t bytes = 2ull << 30;
  const uint32_t ns = ctl.add_namespace({test::pattern_memory(bytes, false, seed), 4096, true});
  auto cache = make_gpu_page_cache(ctl, small_cache(cache_bytes));
  const counts r = run_reads(cache, ns, 2048, 8);
  EXPECT_EQ(r.ok, 8ull * 2048 * 256);
  EXPECT_EQ(r.bad + r.failed, 0u);
  const cache_stats st = cache->stats();
  EXPECT_GT(st.direct_fills, 0u);
  EXPECT_EQ(st.direct_fills, st.misses);
}
