// The standing integrity test (CPU clients; tests/gpu/test_gpu_integrity.cu
// runs the same rounds on GPU warps): a dataset whose every word is a hash
// of its index, a cache of about 5% of it, rounds of random reads and writes
// from many threads checked as they go, then flush, a re-read of the whole
// file with plain pread, and a re-read through the cache after clear():
// zero wrong words. Buffered and O_DIRECT files, 512 B and 4 KiB pages, two
// arrays over one namespace, a fault target that delays writes past the
// deadline, stripes whose requests split over 2 and 3 member files, mirrors
// (every member file re-read; one member made to fail after the first
// round, reads served on and the member reported), and in-place gathers
// after scatters (through the C ABI).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "../common/integrity.hpp"
#include "deepwell/c/deepwell.h"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/views/array.hpp"
#include "test_util.hpp"

using namespace deepwell;
using namespace std::chrono_literals;

namespace {

class Integrity : public testing::TestWithParam<test::integrity_case> {};

}  // namespace

TEST_P(Integrity, RandomReadsAndWritesLoseNothing) {
  const test::integrity_case& c = GetParam();
  const uint64_t bytes = test::integrity_bytes(c, (8ull << 20) / (test::scale_div > 1 ? 4 : 1));
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
  // 5%; at least 128 pages (under ThreadSanitizer the data is a quarter
  // and everything far slower: 25 pages for 8 threads starved some of them)
  cc.capacity_bytes = std::max<uint64_t>(bytes / 20, 128ull * c.page);
  cc.queue_pairs = 4;
  cc.queue_entries = 64;
  cc.timeout_ns = test::integrity_timeout_ns(c);
  cc.direct_files = cache_config::file_tier::never;
  auto cache = make_host_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  array<uint64_t> b(cache, ns);
  const array_ref<uint64_t> ra = a.ref();
  const array_ref<uint64_t> rb = c.two_arrays ? b.ref() : a.ref();
  std::vector<uint32_t> written((words + 31) / 32, 0);
  test::integrity_counts counts{};
  // 8 threads: enough to race, few enough that a loaded 2-core CI machine
  // still schedules the pollers.
  const unsigned threads = 8;
  const uint32_t ops = uint32_t(5000 / test::scale_div);
#if defined(DEEPWELL_TSAN_BUILD)
  const bool disjoint_words = true;  // see integrity_round
#else
  const bool disjoint_words = false;
#endif
  auto flush = [&] { return cache->flush(); };
  for (uint32_t round = 0; round < 3; ++round) {
    std::vector<std::thread> pool;
    for (unsigned th = 0; th < threads; ++th)
      pool.emplace_back([&, th] {
        test::integrity_round(one_lane{}, ra, rb, round * 1000 + th, ops, 33, written.data(), &counts,
                              disjoint_words ? threads : 1, th);
      });
    for (auto& th : pool) th.join();
    if (round == 0) t.fail_member();
    if (round == 1) {  // a flush between rounds: later writes dirty flushed pages again
      const request_status r = test::until_no_timeout(flush);
      ASSERT_TRUE(r.ok()) << describe(r);
    }
  }
  EXPECT_EQ(counts.wrong, 0u) << "first wrong word " << counts.first_wrong;
  if (!c.slow_writes) {
    EXPECT_EQ(counts.failed, 0u) << describe(cache->last_error()) << "\n" << cache->dump();
  }
  EXPECT_GT(counts.writes, 0u);
  EXPECT_GT(counts.reads, 0u);
  const request_status r = test::until_no_timeout(flush);
  ASSERT_TRUE(r.ok()) << describe(r);
  if (t.faults) EXPECT_GT(t.faults->fired(), 0u);
  EXPECT_EQ(test::array_report_problem(c, t), "");

  // Storage, word for word, through plain POSIX reads.
  uint64_t first = 0;
  EXPECT_EQ(test::wrong_words_on_storage(c, t, f.path(), bytes, written.data(), first), 0u)
      << "first wrong word on storage: " << first;

  // And through the cache again, from empty.
  const request_status cl = test::until_no_timeout([&] { return cache->clear(); });
  ASSERT_TRUE(cl.ok()) << describe(cl);
  std::atomic<uint64_t> cache_bad{0}, cache_failed{0};
  std::vector<std::thread> pool;
  const uint64_t chunk = words / threads;
  for (unsigned th = 0; th < threads; ++th)
    pool.emplace_back([&, th] {
      std::vector<uint64_t> buf(8192);
      for (uint64_t i = th * chunk; i < (th + 1) * chunk; i += buf.size()) {
        const uint64_t n = std::min<uint64_t>(buf.size(), (th + 1) * chunk - i);
        if (!ra.read_range(one_lane{}, buf.data(), i, n).ok()) ++cache_failed;
        for (uint64_t k = 0; k < n; ++k)
          if (buf[k] != test::final_word(written.data(), i + k)) ++cache_bad;
      }
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(cache_failed.load(), 0u);
  EXPECT_EQ(cache_bad.load(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Cases, Integrity, testing::ValuesIn(test::integrity_cases),
                         [](const testing::TestParamInfo<test::integrity_case>& i) { return std::string(i.param.name); });

// In-place gathers after scatters, through the C ABI as Python uses it: a
// writable host-memory array with cache_reads off must still read back
// every row scattered into it.
TEST(IntegrityRows, InPlaceGathersSeeScatters) {
  dw_array_options o;
  dw_array_options_init(&o);
  const uint32_t row = 256;
  const uint64_t rows = 16384;
  o.host_bytes = rows * row;
  o.row_bytes = row;
  o.writable = 1;
  o.cache.device = -1;
  o.cache_reads = 0;
  o.cache.cache_bytes = 256 << 10;  // 6% of the rows: scattered rows get evicted too
  o.cache.cpu_threads = 4;
  dw_array* a = nullptr;
  ASSERT_EQ(dw_array_open(&o, &a), DW_OK) << dw_last_error();
  std::vector<int64_t> idx(rows / 2);
  for (uint64_t k = 0; k < idx.size(); ++k) idx[k] = int64_t((k * 7919) % rows);
  std::vector<uint8_t> src(idx.size() * row);
  for (uint64_t k = 0; k < idx.size(); ++k) std::memset(src.data() + k * row, int(0x40 + idx[k] % 64), row);
  ASSERT_EQ(dw_array_scatter(a, idx.data(), 64, 1, idx.size(), src.data(), 0), DW_OK) << dw_last_error();
  std::vector<int64_t> all(rows);
  for (uint64_t r = 0; r < rows; ++r) all[r] = int64_t(r);
  std::vector<uint8_t> out(rows * row);
  ASSERT_EQ(dw_array_gather(a, all.data(), 64, 1, rows, out.data(), 0), DW_OK) << dw_last_error();
  std::vector<bool> scattered(rows);
  for (int64_t r : idx) scattered[r] = true;
  uint64_t bad = 0;
  for (uint64_t r = 0; r < rows; ++r)
    for (uint32_t k = 0; k < row; ++k) bad += out[r * row + k] != (scattered[r] ? uint8_t(0x40 + r % 64) : 0);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(dw_array_close(a), DW_OK) << dw_last_error();
}
