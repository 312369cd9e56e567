// The standing integrity test on GPU warps (tests/cpu/test_integrity.cpp is
// the CPU twin; both use tests/common/integrity.hpp): a dataset whose every
// word is a hash of its index, a cache of about 5% of it, rounds of random
// reads and writes from many warps (every lane its own word, so warps
// coalesce, fetch and write back together) checked as they go, then flush,
// a plain pread of the whole file, and a re-read through the cache after
// clear(): zero wrong words. Buffered and O_DIRECT files, 512 B and 4 KiB
// pages, two arrays over one namespace, writes delayed past the deadline,
// stripes and mirrors of files (every member re-read; a mirror's member
// failing after the first round, reported and skipped).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "../common/integrity.hpp"
#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/views/array.hpp"

using namespace deepwell;
using namespace std::chrono_literals;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

__global__ void rounds_kernel(array_ref<uint64_t> a, array_ref<uint64_t> b, uint64_t seed, uint32_t ops,
                              uint32_t write_pct, uint32_t* written, test::integrity_counts* counts) {
  const uint64_t t = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  test::integrity_round(gpu_warp{}, a, b, seed * 1000003 + t, ops, write_pct, written, counts);
}

__global__ void reread_kernel(array_ref<uint64_t> a, const uint32_t* written, test::integrity_counts* counts) {
  const uint64_t threads = uint64_t(gridDim.x) * blockDim.x;
  unsigned long long bad = 0, failed = 0;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.size(); i += threads) {
    request_status s;
    const uint64_t v = a.read(gpu_warp{}, i, &s);
    const uint64_t want = (written[i / 32] >> (i % 32)) & 1 ? test::written_word(i) : test::original_word(i);
    if (!s.ok())
      ++failed;
    else if (v != want)
      ++bad;
  }
  atomicAdd(&counts->wrong, bad);
  atomicAdd(&counts->failed, failed);
}

class GpuIntegrity : public testing::TestWithParam<test::integrity_case> {};

}  // namespace

TEST_P(GpuIntegrity, RandomReadsAndWritesLoseNothing) {
  const test::integrity_case& c = GetParam();
  const uint64_t bytes = test::integrity_bytes(c, 128ull << 20);
  const uint64_t words = bytes / 8;
  test::scratch_file f(bytes, test::original_seed);
  controller_config ctl_cfg;
  ctl_cfg.pollers = 2;
  controller ctl(ctl_cfg);
  const test::integrity_target t = test::open_integrity_target(c, f.path(), bytes);
  if (!t.why_not.empty()) GTEST_SKIP() << t.why_not;
  const uint32_t ns = ctl.add_namespace({t.t, t.block, false});
  cache_config cc;
  cc.page_size = c.page;
  cc.capacity_bytes = bytes / 20;  // 5%
  cc.timeout_ns = test::integrity_timeout_ns(c);
  cc.direct_files = cache_config::file_tier::never;
  auto cache = make_gpu_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  array<uint64_t> b(cache, ns);
  const array_ref<uint64_t> rb = c.two_arrays ? b.ref() : a.ref();
  auto flush = [&] { return cache->flush(); };
  // As many warps as the cache lets pin 32 pages each, at most 64 blocks of 128.
  const uint32_t warps = std::min<uint32_t>(cache->slots() / pages_per_warp, 64 * 4);
  const uint32_t block_threads = 128, blocks = warps / 4;
  ASSERT_GT(blocks, 0u);
  cache->check_capacity(uint64_t(blocks) * 4);
  uint32_t* written = nullptr;
  test::integrity_counts* counts = nullptr;
  CUDA_OK(cudaMallocManaged(&written, (words + 31) / 32 * 4));
  CUDA_OK(cudaMemset(written, 0, (words + 31) / 32 * 4));
  CUDA_OK(cudaMallocManaged(&counts, sizeof(*counts)));
  CUDA_OK(cudaMemset(counts, 0, sizeof(*counts)));
  // About 1.5 M accesses a round (a third of a million on O_DIRECT: the GPU
  // machine's disk is slow; and on arrays, where a stripe splits each miss
  // into a request a chunk and a mirror writes every member: on two
  // pollers, 1.5 M took minutes), however many warps the page size allows.
  const bool slow = c.odirect || c.layout != test::integrity_case::single;
  const uint64_t per_round = slow ? (384ull << 10) : (1536ull << 10);
  const uint32_t ops = uint32_t(std::max<uint64_t>(16, per_round / (uint64_t(blocks) * block_threads)));
  for (uint32_t round = 0; round < 3; ++round) {
    rounds_kernel<<<blocks, block_threads>>>(a.ref(), rb, round, ops, 33, written, counts);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    if (round == 0) t.fail_member();
    if (round == 1) {
      const request_status r = test::until_no_timeout(flush);
      ASSERT_TRUE(r.ok()) << describe(r);
    }
  }
  const test::integrity_counts rc = *counts;
  EXPECT_EQ(rc.wrong, 0u) << "first wrong word " << rc.first_wrong;
  if (!c.slow_writes) {
    EXPECT_EQ(rc.failed, 0u) << describe(cache->last_error());
  }
  EXPECT_GT(rc.writes, 0u);
  EXPECT_GT(rc.reads, 0u);
  const request_status r = test::until_no_timeout(flush);
  ASSERT_TRUE(r.ok()) << describe(r);
  if (t.faults) EXPECT_GT(t.faults->fired(), 0u);
  EXPECT_EQ(test::array_report_problem(c, t), "");
  const cache_stats st = cache->stats();
  std::printf("integrity %s: %llu reads, %llu writes, %llu failed; %llu misses, %llu write-backs (%llu by the cleaner), "
              "%llu orphans reaped\n",
              c.name, rc.reads, rc.writes, rc.failed, (unsigned long long)st.misses,
              (unsigned long long)st.writebacks, (unsigned long long)st.cleans, (unsigned long long)st.reaped);

  uint64_t first = 0;
  EXPECT_EQ(test::wrong_words_on_storage(c, t, f.path(), bytes, written, first), 0u) << "first wrong word on storage: " << first;

  const request_status cl = test::until_no_timeout([&] { return cache->clear(); });
  ASSERT_TRUE(cl.ok()) << describe(cl);
  CUDA_OK(cudaMemset(counts, 0, sizeof(*counts)));
  reread_kernel<<<blocks, block_threads>>>(a.ref(), written, counts);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(counts->wrong, 0u);
  EXPECT_EQ(counts->failed, 0u);
  cudaFree(written);
  cudaFree(counts);
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuIntegrity, testing::ValuesIn(test::integrity_cases),
                         [](const testing::TestParamInfo<test::integrity_case>& i) { return std::string(i.param.name); });
