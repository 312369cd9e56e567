// The standing integrity test (CPU clients; tests/gpu/test_gpu_integrity.cu
// runs the same rounds on GPU warps): a dataset whose every word is a hash
// of its index, a cache of about 5% of it, rounds of random reads and writes
// from many threads checked as they go, then flush, a re-read of the whole
// file with plain pread, and a re-read through the cache after clear():
// zero wrong words. Buffered and O_DIRECT files, 512 B and 4 KiB pages, two
// arrays over one namespace, a fault target that delays writes past the
// deadline, and in-place gathers after scatters (through the C ABI).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "../common/integrity.hpp"
#include "deepwell/c/deepwell.h"
#include "deepwell/page_cache.hpp"
#include "test_util.hpp"

using namespace deepwell;
using namespace std::chrono_literals;

namespace {

struct integrity_case {
  const char* name;
  bool odirect;
  uint32_t page;
  bool two_arrays;
  bool slow_writes;  // some writes held back past the deadline
};

void PrintTo(const integrity_case& c, std::ostream* os) { *os << c.name; }

class integrity_file {
 public:
  explicit integrity_file(uint64_t bytes) {
    std::string tmpl = std::string(access("/var/tmp", W_OK) == 0 ? "/var/tmp" : ".") + "/deepwell-integrity-XXXXXX";
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

// flush() until it succeeds: writes held back past the deadline make it
// report a timeout until they have landed.
request_status flush_until_done(page_cache& cache) {
  request_status r;
  for (int i = 0; i < 50; ++i) {
    r = cache.flush();
    if (r.code != client_code::timeout) return r;
    std::this_thread::sleep_for(100ms);
  }
  return r;
}

class Integrity : public testing::TestWithParam<integrity_case> {};

}  // namespace

TEST_P(Integrity, RandomReadsAndWritesLoseNothing) {
  const integrity_case& c = GetParam();
  const uint64_t bytes = (8ull << 20) / (test::scale_div > 1 ? 4 : 1);
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
  cc.queue_pairs = 4;
  cc.queue_entries = 64;
  cc.timeout_ns = c.slow_writes ? 200'000'000ull : 20'000'000'000ull;
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
  const uint32_t ops = uint32_t(8000 / test::scale_div);
  for (uint32_t round = 0; round < 3; ++round) {
    std::vector<std::thread> pool;
    for (unsigned th = 0; th < threads; ++th)
      pool.emplace_back([&, th] {
        test::integrity_round(one_lane{}, ra, rb, round * 1000 + th, ops, 33, written.data(), &counts);
      });
    for (auto& th : pool) th.join();
    if (round == 1) {  // a flush between rounds: later writes dirty flushed pages again
      const request_status r = flush_until_done(*cache);
      ASSERT_TRUE(r.ok()) << describe(r);
    }
  }
  EXPECT_EQ(counts.wrong, 0u) << "first wrong word " << counts.first_wrong;
  if (!c.slow_writes) {
    EXPECT_EQ(counts.failed, 0u) << describe(cache->last_error()) << "\n" << cache->dump();
  }
  EXPECT_GT(counts.writes, 0u);
  EXPECT_GT(counts.reads, 0u);
  const request_status r = flush_until_done(*cache);
  ASSERT_TRUE(r.ok()) << describe(r);
  if (faults) EXPECT_GT(faults->fired(), 0u);

  // Storage, word for word, through plain POSIX reads.
  std::vector<uint64_t> file(words);
  const int fd = ::open(f.path().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pread(fd, file.data(), bytes, 0), ssize_t(bytes));
  ::close(fd);
  uint64_t bad = 0, first = 0;
  for (uint64_t i = 0; i < words; ++i)
    if (file[i] != test::final_word(written.data(), i) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << "first wrong word on storage: " << first;

  // And through the cache again, from empty.
  request_status cl = cache->clear();
  for (int i = 0; i < 20 && cl.code == client_code::timeout; ++i) cl = cache->clear();  // short deadlines
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

INSTANTIATE_TEST_SUITE_P(
    Cases, Integrity,
    testing::Values(integrity_case{"buffered_4k", false, 4096, false, false},
                    integrity_case{"odirect_4k", true, 4096, false, false},
                    integrity_case{"buffered_512", false, 512, false, false},
                    integrity_case{"odirect_512", true, 512, false, false},
                    integrity_case{"two_arrays", false, 4096, true, false},
                    integrity_case{"slow_writes", false, 4096, false, true}),
    [](const testing::TestParamInfo<integrity_case>& i) { return std::string(i.param.name); });

// In-place gathers after scatters, through the C ABI as Python uses it: a
// writable host-memory array with cache_reads off must still read back
// every row scattered into it.
TEST(IntegrityRows, InPlaceGathersSeeScatters) {
  dw_open_options o;
  dw_open_options_init(&o);
  const uint32_t row = 256;
  const uint64_t rows = 16384;
  o.host_bytes = rows * row;
  o.row_bytes = row;
  o.writable = 1;
  o.device = -1;
  o.cache_reads = 0;
  o.cache_bytes = 256 << 10;  // 6% of the rows: scattered rows get evicted too
  o.cpu_threads = 4;
  dw_array* a = nullptr;
  ASSERT_EQ(dw_open(&o, &a), DW_OK) << dw_last_error();
  std::vector<int64_t> idx(rows / 2);
  for (uint64_t k = 0; k < idx.size(); ++k) idx[k] = int64_t((k * 7919) % rows);
  std::vector<uint8_t> src(idx.size() * row);
  for (uint64_t k = 0; k < idx.size(); ++k) std::memset(src.data() + k * row, int(0x40 + idx[k] % 64), row);
  ASSERT_EQ(dw_scatter(a, idx.data(), 64, 1, idx.size(), src.data(), 0), DW_OK) << dw_last_error();
  std::vector<int64_t> all(rows);
  for (uint64_t r = 0; r < rows; ++r) all[r] = int64_t(r);
  std::vector<uint8_t> out(rows * row);
  ASSERT_EQ(dw_gather(a, all.data(), 64, 1, rows, out.data(), 0), DW_OK) << dw_last_error();
  std::vector<bool> scattered(rows);
  for (int64_t r : idx) scattered[r] = true;
  uint64_t bad = 0;
  for (uint64_t r = 0; r < rows; ++r)
    for (uint32_t k = 0; k < row; ++k) bad += out[r * row + k] != (scattered[r] ? uint8_t(0x40 + r % 64) : 0);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(dw_close(a), DW_OK) << dw_last_error();
}
