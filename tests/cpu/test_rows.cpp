// rows_ref on an emulated 32-lane warp (the GPU's coalescing path, in CI and
// under ThreadSanitizer): gathers through the cache with a row per lane,
// rows spanning pages, rows straddling pages, in-place reads, scatters, and
// out-of-range indices; every byte checked against the pattern.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/views/rows.hpp"
#include "test_util.hpp"
#include "warp_emulator.hpp"

using namespace deepwell;

namespace {

constexpr uint64_t seed = 5;

struct rows_fixture {
  controller ctl;
  std::shared_ptr<target> mem;
  std::shared_ptr<page_cache> cache;
  std::unique_ptr<array<uint8_t>> bytes;
  row_report report{};
  rows_ref rows{};

  rows_fixture(uint64_t nrows, uint32_t row_bytes, uint64_t cache_pages, bool direct, bool writable = false) {
    mem = test::pattern_memory(nrows * row_bytes, true, seed);
    const uint32_t ns = ctl.add_namespace({mem, 512, !writable});
    cache_config c;
    c.capacity_bytes = cache_pages * 4096;
    c.direct_tier = direct;
    cache = make_host_page_cache(ctl, c);
    bytes = std::make_unique<array<uint8_t>>(cache, ns);
    rows = rows_ref{bytes->ref(), nrows, row_bytes, &report};
  }
  const uint8_t* data() const { return static_cast<const uint8_t*>(mem->host_pointer()); }
};

// Gathers `count` random rows (some repeated) with one emulated warp and
// checks every byte; returns the rows' indices.
std::vector<int64_t> gather_and_check(rows_fixture& f, uint64_t count, unsigned per_step) {
  std::mt19937_64 rng(count * 7 + per_step);
  std::vector<int64_t> idx(count);
  for (auto& i : idx) i = int64_t(rng() % f.rows.rows);
  idx[count / 2] = idx[0];  // a repeat: two lanes on the same page
  std::vector<uint8_t> out(count * f.rows.row_bytes, 0xEE);
  std::atomic<int> failed{0};
  test::run_warp(0xFFFFFFFFu, 0, [&](test::emulated_warp w) {
    for (uint64_t b = 0; b < count; b += per_step)
      if (!f.rows.gather(w, idx.data() + b, std::min<uint64_t>(per_step, count - b), out.data() + b * f.rows.row_bytes)
               .ok())
        ++failed;
  });
  EXPECT_EQ(failed.load(), 0);
  for (uint64_t j = 0; j < count; ++j)
    EXPECT_EQ(std::memcmp(out.data() + j * f.rows.row_bytes, f.data() + idx[j] * f.rows.row_bytes, f.rows.row_bytes), 0)
        << "row " << idx[j] << " (position " << j << ")";
  return idx;
}

}  // namespace

TEST(Rows, PackedRowsALanePerRowThroughASmallCache) {
  rows_fixture f(4096, 256, 64, false);  // 1 MiB of rows, 256 KiB of cache: evictions
  ASSERT_TRUE(f.rows.packed());
  gather_and_check(f, 500, 32);
  const cache_stats s = f.cache->stats();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(f.ctl.total_counters().reads, 0u);  // through the controller
}

TEST(Rows, RowsSpanningAndStraddlingPages) {
  rows_fixture big(200, 3 * 4096, 64, true);  // three pages a row
  EXPECT_FALSE(big.rows.packed());
  gather_and_check(big, 60, 1);
  rows_fixture odd(3000, 3000, 64, false);  // rows straddle page boundaries
  EXPECT_FALSE(odd.rows.packed());
  gather_and_check(odd, 100, 1);
}

TEST(Rows, InPlaceReadsSkipTheCache) {
  rows_fixture f(4096, 256, 64, true);
  f.rows.in_place = f.data();
  gather_and_check(f, 300, 32);
  EXPECT_EQ(f.cache->stats().accesses, 0u);
}

TEST(Rows, OutOfRangeIndicesAreCountedAndReadAsZeros) {
  rows_fixture f(100, 256, 64, false);
  const std::vector<int64_t> idx = {3, 100, -1, 7};
  std::vector<uint8_t> out(idx.size() * 256, 0xEE);
  test::run_warp(0xFFFFFFFFu, 0, [&](test::emulated_warp w) { f.rows.gather(w, idx.data(), idx.size(), out.data()); });
  EXPECT_EQ(f.report.bad, 2u);
  EXPECT_TRUE(f.report.example == 100u || f.report.example == ~0ull);
  EXPECT_EQ(std::memcmp(out.data(), f.data() + 3 * 256, 256), 0);
  for (unsigned j = 1; j <= 2; ++j)
    for (unsigned b = 0; b < 256; ++b) ASSERT_EQ(out[j * 256 + b], 0) << "row " << j;
  EXPECT_EQ(f.report.failure, 0u);  // a bad index is not a failed transfer
}

TEST(Rows, ScattersLandAfterFlushAndReadOnlyIsRefused) {
  rows_fixture f(2048, 512, 40, false, true);  // 1 MiB through 160 KiB: write-backs on eviction
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < 2048; i += 7) idx.push_back(i);
  std::vector<uint8_t> src(idx.size() * 512);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 13 + 1);
  std::atomic<int> failed{0};
  test::run_warp(0xFFFFFFFFu, 0, [&](test::emulated_warp w) {
    for (uint64_t b = 0; b < idx.size(); b += 32)
      if (!f.rows.scatter(w, idx.data() + b, std::min<uint64_t>(32, idx.size() - b), src.data() + b * 512).ok())
        ++failed;
  });
  EXPECT_EQ(failed.load(), 0);
  ASSERT_TRUE(f.cache->flush().ok());
  for (size_t j = 0; j < idx.size(); ++j)
    ASSERT_EQ(std::memcmp(f.data() + idx[j] * 512, src.data() + j * 512, 512), 0) << "row " << idx[j];

  rows_fixture ro(64, 512, 16, false);
  const int64_t one = 1;
  EXPECT_EQ(ro.rows.scatter(one_lane{}, &one, 1, src.data()).code, client_code::read_only);
  EXPECT_EQ(ro.report.failure, request_status::client(client_code::read_only).pack());
}
