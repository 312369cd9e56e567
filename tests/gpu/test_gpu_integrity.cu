// The standing integrity test on GPU warps (tests/cpu/test_integrity.cpp is
// the CPU twin; both use tests/common/integrity.hpp): a dataset whose every
// word is a hash of its index, a cache of about 5% of it, rounds of random
// reads and writes from many warps (every lane its own word, so warps
// coalesce, fetch and write back together) checked as they go, then flush,
// a plain pread of the whole file, and a re-read through the cache after
// clear(): zero wrong words. Buffered and O_DIRECT files, 512 B and 4 KiB
// pages, two arrays over one namespace, writes delayed past the deadline.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "../common/integrity.hpp"
#include "deepwell/gpu_launch.hpp"
#include "deepwell/page_cache.hpp"

using namespace deepwell;
using namespace std::chrono_literals;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

struct integrity_case {
  const char* name;
  bool odirect;
  uint32_t page;
  bool two_arrays;
  bool slow_writes;
};

void PrintTo(const integrity_case& c, std::ostream* os) { *os << c.name; }

class integrity_file {
 public:
  explicit integrity_file(uint64_t bytes) {
    std::string tmpl = "/var/tmp/deepwell-gpu-integrity-XXXXXX";
    const int fd = mkstemp(tmpl.data());
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    path_ = tmpl;
    std::vector<uint64_t> buf(1 << 17);
    for (uint64_t w0 = 0; w0 < bytes / 8; w0 += buf.size()) {
      const uint64_t n = std::min<uint64_t>(buf.size(), bytes / 8 - w0);
      for (uint64_t k = 0; k < n; ++k) buf[k] = test::original_word(w0 + k);
      if (pwrite(fd, buf.data(), n * 8, off_t(w0 * 8)) != ssize_t(n * 8)) throw std::runtime_error("pwrite failed");
    }
    ::close(fd);
  }
  ~integrity_file() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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

request_status flush_until_done(page_cache& cache) {
  request_status r;
  for (int i = 0; i < 50; ++i) {
    r = cache.flush();
    if (r.code != client_code::timeout) return r;
    std::this_thread::sleep_for(100ms);
  }
  return r;
}

class GpuIntegrity : public testing::TestWithParam<integrity_case> {};

}  // namespace

TEST_P(GpuIntegrity, RandomReadsAndWritesLoseNothing) {
  const integrity_case& c = GetParam();
  const uint64_t bytes = 128ull << 20;
  const uint64_t words = bytes / 8;
  integrity_file f(bytes);
  controller_config ctl_cfg;
  ctl_cfg.pollers = 2;
  controller ctl(ctl_cfg);
  file_options o;
  o.writable = true;
  o.direct = c.odirect;
  std::shared_ptr<target> t;
  try {
    t = open_file_target(f.path(), o);
  } catch (const error& e) {
    GTEST_SKIP() << e.what();
  }
  const uint32_t block = std::max<uint32_t>(512, t->io_alignment());
  if (block > c.page) GTEST_SKIP() << "O_DIRECT here needs " << block << "-byte blocks, more than a page";
  std::shared_ptr<fault_target> faults;
  if (c.slow_writes) {
    faults = make_fault_target(t);
    fault_rule slow;
    slow.kind = fault_rule::delay_write;
    slow.offset = bytes / 3;
    slow.length = bytes / 64;
    slow.delay_ns = 500'000'000;  // past the 200 ms deadline below
    slow.count = 6;
    faults->add_rule(slow);
    t = faults;
  }
  const uint32_t ns = ctl.add_namespace({t, block, false});
  cache_config cc;
  cc.page_size = c.page;
  cc.capacity_bytes = bytes / 20;  // 5%
  cc.timeout_ns = c.slow_writes ? 200'000'000ull : 20'000'000'000ull;
  cc.direct_files = cache_config::file_tier::never;
  auto cache = make_gpu_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  array<uint64_t> b(cache, ns);
  const array_ref<uint64_t> rb = c.two_arrays ? b.ref() : a.ref();
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
  // machine's disk is slow), however many warps the page size allows.
  const uint64_t per_round = c.odirect ? (384ull << 10) : (1536ull << 10);
  const uint32_t ops = uint32_t(std::max<uint64_t>(16, per_round / (uint64_t(blocks) * block_threads)));
  for (uint32_t round = 0; round < 3; ++round) {
    rounds_kernel<<<blocks, block_threads>>>(a.ref(), rb, round, ops, 33, written, counts);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    if (round == 1) {
      const request_status r = flush_until_done(*cache);
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
  const request_status r = flush_until_done(*cache);
  ASSERT_TRUE(r.ok()) << describe(r);
  if (faults) EXPECT_GT(faults->fired(), 0u);
  const cache_stats st = cache->stats();
  std::printf("integrity %s: %llu reads, %llu writes, %llu failed; %llu misses, %llu write-backs (%llu by the cleaner), "
              "%llu orphans reaped\n",
              c.name, rc.reads, rc.writes, rc.failed, (unsigned long long)st.misses,
              (unsigned long long)st.writebacks, (unsigned long long)st.cleans, (unsigned long long)st.reaped);

  std::vector<uint64_t> file(words);
  const int fd = ::open(f.path().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pread(fd, file.data(), bytes, 0), ssize_t(bytes));
  ::close(fd);
  uint64_t bad = 0, first = 0;
  for (uint64_t i = 0; i < words; ++i)
    if (file[i] != test::final_word(written, i) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << "first wrong word on storage: " << first;

  ASSERT_TRUE(cache->clear().ok());
  CUDA_OK(cudaMemset(counts, 0, sizeof(*counts)));
  reread_kernel<<<blocks, block_threads>>>(a.ref(), written, counts);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(counts->wrong, 0u);
  EXPECT_EQ(counts->failed, 0u);
  cudaFree(written);
  cudaFree(counts);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GpuIntegrity,
    testing::Values(integrity_case{"buffered_4k", false, 4096, false, false},
                    integrity_case{"odirect_4k", true, 4096, false, false},
                    integrity_case{"buffered_512", false, 512, false, false},
                    integrity_case{"odirect_512", true, 512, false, false},
                    integrity_case{"two_arrays", false, 4096, true, false},
                    integrity_case{"slow_writes", false, 4096, false, true}),
    [](const testing::TestParamInfo<integrity_case>& i) { return std::string(i.param.name); });
