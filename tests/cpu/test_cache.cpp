// The page cache and array_ref with CPU threads as clients: reads verified
// against the data (every 8-byte word a hash of its offset), eviction under
// pressure, one fetch per page, writes + flush + re-read through POSIX, no
// re-read before a write-back completes, errors as statuses, deadlines, and
// the warp-coalescing path on the CPU warp emulator.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "deepwell/cache/detail/access.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/views/array.hpp"
#include "cache_test_support.hpp"
#include "warp_emulator.hpp"

using namespace deepwell;
namespace sc = deepwell::nvme::sc;

namespace {

constexpr uint64_t seed = 11;

uint64_t expected(uint64_t i, uint64_t s = seed) { return test::pattern_word(i * 8, s); }

using scratch_file = test::scratch_file;

std::shared_ptr<target> pattern_memory(uint64_t bytes, bool writable, uint64_t s = seed) {
  return test::pattern_memory(bytes, writable, s);
}
using test::small_cache;

controller_config two_pollers() {
  controller_config c;
  c.pollers = 2;
  return c;
}

}  // namespace

TEST(CacheSetup, BadConfigurationsGetClearErrors) {
  controller ctl;
  auto expect_error = [](auto&& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  cache_config c = small_cache(16);
  c.page_size = 3000;
  expect_error([&] { make_host_page_cache(ctl, c); }, "3000");
  c.page_size = 256;
  expect_error([&] { make_host_page_cache(ctl, c); }, "256");
  c.page_size = 1 << 17;
  expect_error([&] { make_host_page_cache(ctl, c); }, "131072");
  c = small_cache(16);
  c.capacity_bytes = 1000;
  expect_error([&] { make_host_page_cache(ctl, c); }, "1000");
  c = small_cache(16);
  c.queue_entries = 100;
  expect_error([&] { make_host_page_cache(ctl, c); }, "100");

  // A page smaller than the dataset's blocks.
  const uint32_t big_blocks = ctl.add_namespace({pattern_memory(1 << 20, false), 8192, true});
  auto cache = make_host_page_cache(ctl, small_cache(16, 4096));
  expect_error([&] { cache->add_dataset(big_blocks); }, "8192");
  expect_error([&] { cache->add_dataset(99); }, "99");
  // Elements that would straddle pages, and a dataset not made of whole elements.
  const uint32_t ns = ctl.add_namespace({pattern_memory(4096 * 4 + 8, false), 512, true});
  struct elem24 {
    uint8_t b[24];
  };
  expect_error([&] { array<elem24> a(cache, ns); }, "24");
  struct elem16 {
    uint8_t b[16];
  };
  expect_error([&] { array<elem16> a(cache, ns); }, "16");
  // Too small for the warps that would use it.
  expect_error([&] { cache->check_capacity(1); }, "16 pages");
  EXPECT_NO_THROW(cache->check_capacity(0));
}

TEST(Cache, RandomAndSequentialReadsUnderEvictionMatchTheFile) {
  const uint64_t bytes = (64ull << 20) / (test::scale_div > 1 ? 4 : 1);
  scratch_file f(bytes, seed);  // just written: every page is in the page cache
  controller ctl(two_pollers());
  const uint32_t ns = ctl.add_namespace({open_file_target(f.path()), 4096, true});
  // Through the controller, then filled from the file's mapping (the direct
  // tier: fills race pin-free readers and evictions with no command; the
  // README example read one value wrong once on an H200 this way,
  // bench/results/2026-11-28-bece93f-h200-gather-one-wrong-value.json).
  for (auto tier : {cache_config::file_tier::never, cache_config::file_tier::resident}) {
    SCOPED_TRACE(tier == cache_config::file_tier::never ? "through the controller" : "direct tier");
    // 1% of the data (163 pages); under ThreadSanitizer a quarter of the
    // data and 128 pages, eight per thread.
    cache_config cc = small_cache(std::max<uint64_t>(bytes / 4096 / 100, 128));
    cc.direct_files = tier;
    auto cache = make_host_page_cache(ctl, cc);
    array<uint64_t> a(cache, ns);
    ASSERT_EQ(a.size(), bytes / 8);
    const auto ref = a.ref();
    // Under ThreadSanitizer 16 threads, not 64: 64 threads spinning and
    // yielding under its runtime on two cores once starved the pollers past
    // the test's time limit (a stall, not wrong data).
    const unsigned threads = test::scale_div > 1 ? 16 : 64;
    const uint64_t per_thread = 4000 / test::scale_div;
    std::atomic<uint64_t> bad{0}, failed{0};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        for (uint64_t k = 0; k < per_thread; ++k) {
          uint64_t i;
          if (t % 8 == 0)
            i = (t * per_thread + k) % ref.size();  // sequential threads
          else
            i = rng() % ref.size();
          request_status s;
          const uint64_t v = ref.try_read(i, &s);
          if (!s.ok()) ++failed;
          else if (v != expected(i)) ++bad;
        }
      });
    for (auto& th : pool) th.join();
    EXPECT_EQ(failed.load(), 0u);
    EXPECT_EQ(bad.load(), 0u);
    const cache_stats st = cache->stats();
    EXPECT_EQ(st.accesses, threads * per_thread);
    EXPECT_GT(st.misses, 0u);
    EXPECT_GT(st.evictions, 0u);
    EXPECT_EQ(st.errors, 0u);
    EXPECT_EQ(st.direct_fills, tier == cache_config::file_tier::never ? 0u : st.misses);
    EXPECT_TRUE(cache->last_error().ok());
  }
}

TEST(Cache, ConcurrentReadersOfOnePageFetchItOnce) {
  controller ctl;
  // Behind a fault target (with no rules) so the controller serves it, not the direct tier.
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(1 << 20, false)), 4096, true});
  auto cache = make_host_page_cache(ctl, small_cache(64));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  std::atomic<uint64_t> bad{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < 64; ++t)
    pool.emplace_back([&, t] {
      for (uint64_t k = 0; k < 200; ++k) {
        const uint64_t i = 5 * 512 + (t * 7 + k) % 512;  // page 5
        request_status s;
        if (ref.try_read(i, &s) != expected(i) || !s.ok()) ++bad;
      }
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(cache->stats().misses, 1u);
  EXPECT_EQ(ctl.total_counters().reads, 1u);
}

TEST(Cache, WritesFlushAndRereadThroughPosix) {
  const uint64_t bytes = 8ull << 20;
  scratch_file f(bytes, seed);
  controller ctl(two_pollers());
  file_options o;
  o.writable = true;
  const uint32_t ns = ctl.add_namespace({open_file_target(f.path(), o), 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(64));  // 256 KiB: dirty pages get evicted
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  const unsigned threads = 16;
  std::atomic<uint64_t> failed{0};
  std::vector<std::thread> pool;
  // Each thread rewrites every 3rd element of its own stripe with seed 99.
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const uint64_t per = ref.size() / threads;
      for (uint64_t i = (t * per + 2) / 3 * 3; i < (t + 1) * per; i += 3)
        if (!ref.write(i, expected(i, 99)).ok()) ++failed;
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(failed.load(), 0u);
  const request_status fl = a.flush();
  EXPECT_TRUE(fl.ok()) << describe(fl);
  const cache_stats st = cache->stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_GT(st.writebacks, 0u);
  // Byte for byte through plain POSIX reads.
  const std::vector<uint64_t> file = test::file_words(f.path(), bytes);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < file.size(); ++i) bad += file[i] != (i % 3 == 0 ? expected(i, 99) : expected(i));
  EXPECT_EQ(bad, 0u);
  // And through the cache again, after emptying it.
  ASSERT_TRUE(cache->clear().ok());
  for (uint64_t i = 0; i < ref.size(); i += 97) ASSERT_EQ(ref[i], i % 3 == 0 ? expected(i, 99) : expected(i)) << i;
}

TEST(Cache, NoReReadBeforeWriteBackCompletes) {
  controller ctl(two_pollers());
  auto mem = pattern_memory(1 << 20, true);
  auto faults = make_fault_target(mem);
  // Page 0's first two I/Os (its fill, then its write-back) take 50 ms; a
  // later read of it is fast. A cache that re-read page 0 while its
  // write-back was in flight would get the old data back first.
  fault_rule slow;
  slow.kind = fault_rule::delay;
  slow.offset = 0;
  slow.length = 4096;
  slow.delay_ns = 50'000'000;
  slow.count = 2;
  faults->add_rule(slow);
  const uint32_t ns = ctl.add_namespace({faults, 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(3));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  const uint64_t x = 0x1234567890abcdefull;
  ASSERT_TRUE(ref.write(0, x).ok());        // slot 0: page 0, dirty
  auto h1 = ref.page(512);                  // slot 1: page 1, pinned
  ASSERT_EQ(ref[2 * 512], expected(2 * 512));  // slot 2: page 2
  std::atomic<uint64_t> seen{0};
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // inside page 0's write-back
    request_status s;
    seen = ref.try_read(0, &s);
    EXPECT_TRUE(s.ok()) << describe(s);
  });
  // Page 3 needs a slot: CLOCK spares pages 0 and 2 once (use bits), skips
  // pinned page 1, then starts page 0's write-back (slow) and takes page
  // 2's slot. Page 0 stays cached, and unevictable, until its write lands.
  ASSERT_EQ(ref[3 * 512], expected(3 * 512));
  h1.release();  // the reader may need this slot if page 0 were gone
  reader.join();
  EXPECT_EQ(seen.load(), x);
  // flush() waits for the write-back in flight and has nothing more to
  // write: the page is clean once it landed.
  const request_status fl = cache->flush();
  EXPECT_TRUE(fl.ok()) << describe(fl);
  EXPECT_EQ(cache->stats().writebacks, 1u);
  EXPECT_EQ(faults->fired(), 2u);
  EXPECT_EQ(static_cast<uint64_t*>(mem->host_pointer())[0], x);
}

TEST(Cache, FaultInjectedReadErrorsReachTheReader) {
  controller ctl;
  auto faults = make_fault_target(pattern_memory(1 << 20, false));
  fault_rule r;
  r.kind = fault_rule::fail_read;
  r.offset = 3 * 4096;
  r.length = 2 * 4096;
  faults->add_rule(r);
  const uint32_t ns = ctl.add_namespace({faults, 4096, true});
  auto cache = make_host_page_cache(ctl, small_cache(16));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  request_status s;
  EXPECT_EQ(ref.try_read(3 * 512 + 1, &s), 0u);
  EXPECT_EQ(s.code, client_code::nvme_error);
  EXPECT_EQ(s.nvme, sc::unrecovered_read_error);
  EXPECT_EQ(ref.try_read(4 * 512, &s), 0u);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(ref.try_read(2 * 512, &s), expected(2 * 512));
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(cache->last_error().code, client_code::nvme_error);
  EXPECT_EQ(ref.try_read(uint64_t(1) << 40, &s), 0u);
  EXPECT_EQ(s.code, client_code::out_of_range);
  // Errors are not sticky: once the fault is gone the page reads.
  faults->clear_rules();
  EXPECT_EQ(ref.try_read(3 * 512 + 1, &s), expected(3 * 512 + 1));
  EXPECT_TRUE(s.ok()) << describe(s);
}

TEST(Cache, FailedWriteBackStaysDirtyAndFlushReportsIt) {
  controller ctl;
  auto mem = pattern_memory(1 << 20, true);
  auto faults = make_fault_target(mem);
  const uint32_t ns = ctl.add_namespace({faults, 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(16));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  ASSERT_TRUE(ref.write(10, 42).ok());
  fault_rule r;
  r.kind = fault_rule::fail_write;
  faults->add_rule(r);
  const request_status f1 = a.flush();
  EXPECT_EQ(f1.nvme, sc::write_fault) << describe(f1);
  EXPECT_EQ(ref[10], 42u);  // still cached, still dirty
  faults->clear_rules();
  const request_status f2 = a.flush();
  EXPECT_TRUE(f2.ok()) << describe(f2);
  EXPECT_EQ(static_cast<uint64_t*>(mem->host_pointer())[10], 42u);
  EXPECT_EQ(ref.write(0, 1).code, client_code::ok);
  // A read-only dataset refuses writes at once.
  const uint32_t ro = ctl.add_namespace({pattern_memory(1 << 16, false), 4096, true});
  array<uint64_t> b(cache, ro);
  EXPECT_EQ(b.ref().write(0, 1).code, client_code::read_only);
}

TEST(Cache, StoppedControllerEndsAccessesWithAStatus) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(1 << 20, false)), 4096, true});
  cache_config c = small_cache(16);
  c.timeout_ns = 5ull * 1000000000ull;
  auto cache = make_host_page_cache(ctl, c);
  array<uint64_t> a(cache, ns);
  ASSERT_EQ(a.ref()[0], expected(0));
  ctl.stop();
  const auto t0 = std::chrono::steady_clock::now();
  request_status s;
  a.ref().try_read(100 * 512, &s);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.code == client_code::controller_lost || s.nvme == sc::aborted_sq_deleted) << describe(s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  EXPECT_EQ(a.ref()[0], expected(0));  // cached pages still read
}

TEST(Cache, ExhaustedCacheEndsWithAStatusAtTheDeadline) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({pattern_memory(1 << 20, false), 4096, true});
  cache_config c = small_cache(2);
  c.timeout_ns = 200'000'000;
  auto cache = make_host_page_cache(ctl, c);
  array<uint64_t> a(cache, ns);
  auto h0 = a.ref().page(0);
  auto h1 = a.ref().page(512);
  ASSERT_TRUE(h0.ok() && h1.ok());
  request_status s;
  a.ref().try_read(2 * 512, &s);
  EXPECT_EQ(s.code, client_code::cache_exhausted);
  h0.release();
  EXPECT_EQ(a.ref().try_read(2 * 512, &s), expected(2 * 512));
  EXPECT_TRUE(s.ok());
  h1.release();
}

TEST(Cache, PageHandlesReuseOnePinAndOnlyWritesDirty) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({pattern_memory(1 << 20, true), 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(16));
  array<uint64_t> a(cache, ns);
  auto h = a.ref().page(700);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h.first(), 512u);
  EXPECT_EQ(h.count(), 512u);
  for (uint64_t i = h.first(); i < h.first() + h.count(); ++i) ASSERT_EQ(h[i], expected(i));
  h.release();
  ASSERT_TRUE(cache->flush().ok());
  EXPECT_EQ(cache->stats().writebacks, 0u);  // reading through a handle leaves the page clean
  auto w = a.ref().page(700);
  w.write(701, 5);
  w.release();
  ASSERT_TRUE(cache->flush().ok());
  EXPECT_EQ(cache->stats().writebacks, 1u);
  EXPECT_EQ(a.ref()[701], 5u);
}

TEST(Cache, CursorsLookUpOncePerPageAndReadWhatTheArrayHolds) {
  controller ctl;
  const uint64_t bytes = 1 << 20;  // 256 pages of 512 words, through 16 slots
  const uint32_t ns = ctl.add_namespace({pattern_memory(bytes, true), 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(16));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  cache->reset_stats();
  {
    array_cursor<uint64_t> c(ref);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < a.size(); ++i) bad += c.read(i) != expected(i);
    EXPECT_EQ(bad, 0u);
    // One lookup a page, however many elements the walk read from it.
    EXPECT_EQ(cache->stats().accesses, bytes / 4096);
    // Back and forth inside one page: no lookup.
    for (uint64_t i = a.size() - 1; i > a.size() - 512; --i) ASSERT_EQ(c.read(i), expected(i));
    EXPECT_EQ(cache->stats().accesses, bytes / 4096);
    // Writes: every third element of pages 10 to 13, in order.
    for (uint64_t i = 10 * 512; i < 14 * 512; i += 3) ASSERT_TRUE(c.write(i, ~i).ok());
  }  // the cursor's scope ends: its pin is dropped and the last page marked dirty
  EXPECT_EQ(detail::cache_access::check_invariants(cache->ref()), "");
  ASSERT_TRUE(cache->flush().ok());
  ASSERT_TRUE(cache->clear().ok());
  for (uint64_t i = 9 * 512; i < 15 * 512; ++i)
    ASSERT_EQ(ref[i], (i >= 10 * 512 && i < 14 * 512 && (i - 10 * 512) % 3 == 0) ? ~i : expected(i)) << i;
  // Out of range: a status and the error flag; the cursor goes on.
  array_cursor<uint64_t> c(ref);
  request_status s;
  EXPECT_EQ(c.read(a.size(), &s), 0u);
  EXPECT_EQ(s.code, client_code::out_of_range);
  EXPECT_EQ(c.write(a.size(), 1).code, client_code::out_of_range);
  EXPECT_EQ(cache->last_error().code, client_code::out_of_range);
  EXPECT_EQ(c.read(5, &s), expected(5));
  EXPECT_TRUE(s.ok());
  c.release();
  // A read-only array refuses a cursor's writes.
  const uint32_t ro = ctl.add_namespace({pattern_memory(1 << 16, false), 4096, true});
  array<uint64_t> b(cache, ro);
  array_cursor<uint64_t> rc(b.ref());
  EXPECT_EQ(rc.write(0, 1).code, client_code::read_only);
  EXPECT_EQ(rc.read(0), expected(0));
  rc.release();
  EXPECT_EQ(detail::cache_access::check_invariants(cache->ref()), "");
}

TEST(Cache, ACursorHoldsItsPageUntilItMovesOrIsReleased) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({pattern_memory(1 << 20, false), 4096, true});
  cache_config cfg = small_cache(2);
  cfg.timeout_ns = 200'000'000;
  auto cache = make_host_page_cache(ctl, cfg);
  array<uint64_t> a(cache, ns);
  array_cursor<uint64_t> c(a.ref());
  ASSERT_EQ(c.read(3), expected(3));  // page 0 pinned by the cursor
  auto h = a.ref().page(512);          // page 1 pinned by a handle
  ASSERT_TRUE(h.ok());
  request_status s;
  a.ref().try_read(2 * 512, &s);  // no slot left: the cursor's pin counts
  EXPECT_EQ(s.code, client_code::cache_exhausted);
  ASSERT_EQ(c.read(5 * 512 + 1), expected(5 * 512 + 1));  // moving frees page 0's slot for page 5
  h.release();
  c.release();
  EXPECT_EQ(a.ref().try_read(2 * 512, &s), expected(2 * 512));
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(detail::cache_access::check_invariants(cache->ref()), "");
}

TEST(Cache, CursorsOfManyThreadsReadAndWriteUnderEviction) {
  controller ctl(two_pollers());
  const uint64_t words = (4 << 20) / 8;  // 1024 pages through 32 slots
  const uint32_t ns = ctl.add_namespace({pattern_memory(words * 8, true), 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(32));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  constexpr int threads = 6;
  std::atomic<uint64_t> bad{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      array_cursor<uint64_t> c(ref);
      // Thread t owns a slice of the array (slices share their boundary
      // pages, not words): it walks runs of it, checks every word and
      // rewrites every other one, while the others evict its pages.
      const uint64_t first = words * t / threads, last = words * (t + 1) / threads;
      const uint64_t mark = (t + 1) * 0x9E3779B97F4A7C15ull;
      for (int round = 0; round < 40; ++round) {
        const uint64_t begin = first + rng() % (last - first - 2048);
        for (uint64_t i = begin; i < begin + 2048; ++i) {
          request_status s;
          const uint64_t v = c.read(i, &s);
          if (!s.ok() || (v != expected(i) && v != (expected(i) ^ mark))) ++bad;
          if (i % 2 == 0 && !c.write(i, expected(i) ^ mark).ok()) ++bad;
        }
      }
      c.release();
      for (uint64_t i = first; i < last; ++i) {  // every word: untouched, or rewritten (even ones only)
        const uint64_t v = ref[i];
        if (v != expected(i) && (i % 2 != 0 || v != (expected(i) ^ mark))) ++bad;
      }
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(detail::cache_access::check_invariants(cache->ref()), "");
  EXPECT_GT(cache->stats().evictions, 0u);
  ASSERT_TRUE(cache->flush().ok());
}

// Element reads of cached pages take no pin (page_cache_ref::read_hit):
// each checks the slot's generation after the data. Eight slots refilled
// from host memory (the direct tier, a copy, so a slot can change hands
// many times while a reader is between its two reads of the state word),
// threads reading words of random pages and also words that rewriters keep
// changing: every value read must belong to the word asked for.
TEST(Cache, ElementReadsWithNoPinNeverSeeAnotherPagesBytes) {
  controller ctl(two_pollers());
  const uint64_t words = (1 << 20) / 8;  // 256 pages through 8 slots
  const uint32_t ns = ctl.add_namespace({pattern_memory(words * 8, true), 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(8));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  const unsigned threads = test::scale_div > 1 ? 4 : 8;
  const uint64_t per_thread = 20000 / test::scale_div;
  constexpr uint64_t mark = 0x5A5A5A5A00000000ull;
  std::atomic<uint64_t> bad{0}, failed{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(t + 100);
      uint64_t base = 0;
      for (uint64_t k = 0; k < per_thread; ++k) {
        // Runs of a few words of one page (hits) between jumps (misses).
        if (k % 4 == 0) base = rng() % words;
        const uint64_t i = (base + rng() % 8) % words;
        if (t == 0 && i % 512 == 1) {  // the first thread also rewrites word 1 of pages
          if (!ref.write(i, expected(i) ^ mark).ok()) ++failed;
          continue;
        }
        request_status s;
        const uint64_t v = ref.try_read(i, &s);
        if (!s.ok()) ++failed;
        else if (v != expected(i) && v != (expected(i) ^ mark)) ++bad;
      }
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_EQ(bad.load(), 0u) << "reads that returned another word's or another page's bytes";
  EXPECT_EQ(detail::cache_access::check_invariants(cache->ref()), "");
  const cache_stats st = cache->stats();
  EXPECT_GT(st.evictions, 1000u / test::scale_div);
  EXPECT_GT(st.hits, 0u);
  ASSERT_TRUE(cache->flush().ok());
}

// A slot's generation rises when its page leaves, so a reader that read
// the page before can tell; a read that hits leaves no pin behind.
TEST(Cache, AnEvictedSlotChangesGenerationAndHitsLeaveNoPin) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({pattern_memory(1 << 20, false), 4096, true});
  auto cache = make_host_page_cache(ctl, small_cache(4));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  ASSERT_EQ(ref[3], expected(3));  // page 0 in
  ASSERT_EQ(ref[5], expected(5));  // a hit
  const uint32_t slot = detail::cache_access::slot_holding(cache->ref(), make_key(ref.dataset, 0));
  ASSERT_NE(slot, ~0u);
  const slot_word before = detail::cache_access::slot_state(cache->ref(), slot);
  EXPECT_TRUE(before & slot_state::valid);
  EXPECT_EQ(before & slot_state::ref_mask, 0u) << "a read left a pin";
  uint64_t out = 0;
  EXPECT_TRUE(cache->ref().read_hit(make_key(ref.dataset, 0), 8 * 7, out));
  EXPECT_EQ(out, expected(7));
  EXPECT_FALSE(cache->ref().read_hit(make_key(ref.dataset, 9), 0, out)) << "page 9 is not cached";
  for (uint64_t p = 1; p < 64; ++p) ASSERT_EQ(ref[p * 512], expected(p * 512));  // evicts page 0
  const slot_word after = detail::cache_access::slot_state(cache->ref(), slot);
  EXPECT_NE(slot_state::gen(after), slot_state::gen(before));
  EXPECT_EQ(detail::cache_access::check_invariants(cache->ref()), "");
}

// A fill leaves its page's hint (slot and generation); a read follows a
// hint only where the slot still holds that page at that generation, and
// otherwise finds the page through the directory: a hint another page
// took over, one forged to name another page's slot, one from before the
// slot was refilled, or one naming no slot at all never returns wrong bytes.
TEST(Cache, PageHintsAreFollowedOnlyWhileTheirSlotHoldsThePage) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({pattern_memory(1 << 20, false), 4096, true});
  auto cache = make_host_page_cache(ctl, small_cache(4));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  const page_cache_ref& c = cache->ref();
  const uint32_t n = detail::cache_access::hint_entries(c);
  ASSERT_GE(n, 2 * cache->slots());
  auto slot_of = [&](uint64_t page) { return detail::cache_access::slot_holding(c, make_key(ref.dataset, page)); };
  const uint64_t k0 = make_key(ref.dataset, 0), kn = make_key(ref.dataset, n);  // one entry for both
  ASSERT_EQ(&detail::cache_access::hint_entry(c, k0), &detail::cache_access::hint_entry(c, kn));
  ASSERT_EQ(ref[1], expected(1));
  const uint32_t s0 = slot_of(0);
  ASSERT_NE(s0, ~0u);
  uint64_t& h = detail::cache_access::hint_entry(c, k0);
  EXPECT_EQ(h, make_hint(s0, slot_state::gen(detail::cache_access::slot_state(c, s0))));
  uint64_t out = 0;
  EXPECT_TRUE(c.read_hit(k0, 8 * 2, out));
  EXPECT_EQ(out, expected(2));

  // Page n takes the entry over; page 0 is still found, through the directory.
  ASSERT_EQ(ref[n * 512 + 3], expected(n * 512 + 3));
  const uint32_t sn = slot_of(n);
  ASSERT_NE(sn, ~0u);
  EXPECT_EQ(hint_slot(h), sn);
  EXPECT_TRUE(c.read_hit(k0, 8 * 4, out));
  EXPECT_EQ(out, expected(4));
  EXPECT_TRUE(c.read_hit(kn, 8 * 5, out));
  EXPECT_EQ(out, expected(n * 512 + 5));

  // Forged hints for page 0: another page's slot at its right generation,
  // a slot past the end, and nothing. Each read still returns page 0's word.
  for (const uint64_t forged :
       {make_hint(sn, slot_state::gen(detail::cache_access::slot_state(c, sn))), make_hint(1u << 30, 0), uint64_t{0}}) {
    h = forged;
    out = 0;
    EXPECT_TRUE(c.read_hit(k0, 8 * 6, out));
    EXPECT_EQ(out, expected(6));
  }

  // Page 0's own hint kept from before its slot was refilled: refused.
  const uint64_t old = make_hint(s0, slot_state::gen(detail::cache_access::slot_state(c, s0)));
  for (uint64_t p = 100; p < 120; ++p) ASSERT_EQ(ref[p * 512], expected(p * 512));  // evicts pages 0 and n
  ASSERT_EQ(slot_of(0), ~0u);
  h = old;
  EXPECT_FALSE(c.read_hit(k0, 8 * 7, out)) << "a hint from before the slot was refilled was followed";
  EXPECT_EQ(ref[7], expected(7));  // the pinned path brings page 0 back and leaves a fresh hint
  EXPECT_EQ(hint_slot(h), slot_of(0));
  EXPECT_EQ(detail::cache_access::check_invariants(c), "");
}

TEST(Cache, PrefetchedPagesAreFoundOrAdoptedByTheClock) {
  controller ctl(two_pollers());
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(4 << 20, false)), 4096, true});
  auto cache = make_host_page_cache(ctl, small_cache(8));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  for (uint64_t p = 0; p < 4; ++p) ref.prefetch(p * 512);
  EXPECT_EQ(cache->stats().misses, 4u);
  for (uint64_t p = 0; p < 4; ++p) ASSERT_EQ(ref[p * 512 + 3], expected(p * 512 + 3));
  EXPECT_EQ(cache->stats().misses, 4u);  // no page fetched twice
  // Prefetches nobody reads: the clock finishes and evicts them.
  for (uint64_t p = 100; p < 108; ++p) ref.prefetch(p * 512);
  for (uint64_t p = 200; p < 260; ++p) ASSERT_EQ(ref[p * 512], expected(p * 512));
  EXPECT_TRUE(cache->last_error().ok());
  EXPECT_TRUE(cache->clear().ok());
}

TEST(Cache, DirectTierReadsHostMemoryWithoutTheController) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({pattern_memory(4 << 20, false), 4096, true});
  auto cache = make_host_page_cache(ctl, small_cache(32));
  array<uint64_t> a(cache, ns);
  for (uint64_t i = 0; i < a.size(); i += 61) ASSERT_EQ(a.ref()[i], expected(i));
  const cache_stats st = cache->stats();
  EXPECT_GT(st.misses, 0u);
  EXPECT_EQ(st.direct_fills, st.misses);
  EXPECT_EQ(ctl.total_counters().reads, 0u);
}

TEST(Cache, DirectTierReadsResidentFilesThroughAMapping) {
  scratch_file f((4 << 20) + 1000, seed);  // just written: every page is in the page cache
  controller ctl;
  file_options o;
  o.offset = 1000;  // a header before the data: the mapping starts on the page below
  const uint32_t ns = ctl.add_namespace({open_file_target(f.path(), o), 512, true});
  for (auto tier : {cache_config::file_tier::resident, cache_config::file_tier::never}) {
    cache_config cc = small_cache(64);
    cc.direct_files = tier;
    auto cache = make_host_page_cache(ctl, cc);
    array<uint64_t> a(cache, ns);
    ASSERT_EQ(a.size(), (4u << 20) / 8);
    for (uint64_t i = 0; i < a.size(); i += 37) ASSERT_EQ(a.ref()[i], test::pattern_word(1000 + i * 8, seed)) << i;
    const cache_stats st = cache->stats();
    if (tier == cache_config::file_tier::resident) {
      EXPECT_EQ(st.direct_fills, st.misses);
      EXPECT_EQ(ctl.total_counters().reads, 0u);
    } else {
      EXPECT_EQ(st.direct_fills, 0u);
      EXPECT_EQ(ctl.total_counters().reads, st.misses);
    }
  }
}

TEST(Cache, SeveralArraysShareOneCacheAndTheLastPageMayBePartial) {
  controller ctl;
  scratch_file f(10000, 5);  // 10000 bytes: the last 4 KiB page holds 1808
  const uint32_t a_ns = ctl.add_namespace({open_file_target(f.path()), 512, true});
  const uint32_t b_ns = ctl.add_namespace({make_fault_target(pattern_memory(1 << 20, false, 6)), 4096, true});
  auto cache = make_host_page_cache(ctl, small_cache(8));
  array<uint64_t> a(cache, a_ns);
  array<uint32_t> b(cache, b_ns);
  ASSERT_EQ(a.size(), 1250u);
  for (uint64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.ref()[i], expected(i, 5)) << i;
  for (uint64_t i = 0; i < b.size(); i += 37) {
    const uint64_t w = test::pattern_word(i * 4 / 8 * 8, 6);
    ASSERT_EQ(b.ref()[i], uint32_t(i % 2 ? w >> 32 : w)) << i;
  }
}

// ---- the warp path, on the CPU warp emulator ----

namespace {

struct warp_case {
  const char* name;
  unsigned mask;
  unsigned lanes_per_page;  // 0: every lane its own random page
};

class CacheWarp : public ::testing::TestWithParam<warp_case> {};

std::string warp_case_name(const ::testing::TestParamInfo<warp_case>& i) { return i.param.name; }

}  // namespace

TEST_P(CacheWarp, CoalescedReadsMatchAndFetchEachPageOnce) {
  const warp_case wc = GetParam();
  controller ctl(two_pollers());
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(8 << 20, false)), 4096, true});
  auto cache = make_host_page_cache(ctl, small_cache(4096));  // all of it: first touches are the misses
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  std::atomic<uint64_t> bad{0};
  std::vector<uint64_t> pages_seen(2048, 0);
  const unsigned rounds = 40 / unsigned(test::scale_div) + 2;
  test::run_warp(wc.mask, 0, [&](test::emulated_warp w) {
    std::mt19937_64 rng(w.lane());
    for (unsigned r = 0; r < rounds; ++r) {
      uint64_t page;
      if (wc.lanes_per_page == 0) page = rng() % 2048;
      else page = (r * 32 + w.lane() / wc.lanes_per_page) % 2048;
      const uint64_t i = page * 512 + rng() % 512;
      request_status s;
      const uint64_t v = ref.read(w, i, &s);
      if (!s.ok() || v != expected(i)) ++bad;
      __atomic_store_n(&pages_seen[page], 1, __ATOMIC_RELAXED);
    }
  });
  EXPECT_EQ(bad.load(), 0u);
  uint64_t distinct = 0;
  for (auto p : pages_seen) distinct += p;
  const cache_stats st = cache->stats();
  EXPECT_EQ(st.misses, distinct);
  EXPECT_EQ(st.accesses, uint64_t(__builtin_popcount(wc.mask)) * rounds);
}

INSTANTIATE_TEST_SUITE_P(Lanes, CacheWarp,
                         ::testing::Values(warp_case{"AllLanesOnePage", 0xFFFFFFFFu, 32},
                                           warp_case{"AllLanesDifferentPages", 0xFFFFFFFFu, 1},
                                           warp_case{"FourLanesPerPage", 0xFFFFFFFFu, 4},
                                           warp_case{"RandomPages", 0xFFFFFFFFu, 0},
                                           warp_case{"OneLane", 0x00000100u, 1},
                                           warp_case{"SevenLanes", 0x80421805u, 2}),
                         warp_case_name);

TEST(CacheWarpPressure, FourWarpsOnATightCacheReadAndWriteCorrectly) {
  controller ctl(two_pollers());
  auto mem = pattern_memory(4 << 20, true);
  const uint32_t ns = ctl.add_namespace({make_fault_target(mem), 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(4 * 32 + 8));  // barely above 4 warps x 32 pages
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  std::atomic<uint64_t> bad{0};
  const unsigned rounds = 30 / unsigned(test::scale_div) + 2;
  std::vector<std::thread> warps;
  for (uint32_t wid = 0; wid < 4; ++wid)
    warps.emplace_back([&, wid] {
      test::run_warp(0xFFFFFFFFu, wid, [&](test::emulated_warp w) {
        std::mt19937_64 rng(wid * 32 + w.lane());
        for (unsigned r = 0; r < rounds; ++r) {
          // Reads anywhere; writes only to this lane's own elements (i % 128 == wid * 32 + lane).
          const uint64_t i = (rng() % (a.size() / 128)) * 128 + wid * 32 + w.lane();
          request_status s;
          const uint64_t v = ref.read(w, i, &s);
          if (!s.ok() || (v != expected(i) && v != expected(i, 77))) ++bad;
          if (!ref.write(w, i, expected(i, 77)).ok()) ++bad;
        }
      });
    });
  for (auto& t : warps) t.join();
  EXPECT_EQ(bad.load(), 0u);
  ASSERT_TRUE(cache->flush().ok());
  EXPECT_GT(cache->stats().evictions, 0u);
  // Every element is either untouched or rewritten, none torn or misplaced.
  const auto* m = static_cast<const uint64_t*>(mem->host_pointer());
  uint64_t wrong = 0, rewritten = 0;
  for (uint64_t i = 0; i < a.size(); ++i) {
    rewritten += m[i] == expected(i, 77);
    wrong += m[i] != expected(i) && m[i] != expected(i, 77);
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(rewritten, 0u);
}

TEST(CacheWarpRange, BulkCopiesAndPageHandlesAcrossPages) {
  controller ctl(two_pollers());
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(2 << 20, true)), 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(64));
  array<uint32_t> a(cache, ns);
  const auto ref = a.ref();
  auto word = [](uint64_t i) {
    const uint64_t w = test::pattern_word(i / 2 * 8, seed);
    return uint32_t(i % 2 ? w >> 32 : w);
  };
  const uint64_t begin = 1000, count = 1024 * 40 + 3;  // unaligned, 41 pages
  std::vector<uint32_t> out(count, 0);
  std::atomic<uint64_t> bad{0};
  test::run_warp(0xFFFFFFFFu, 0, [&](test::emulated_warp w) {
    if (!ref.read_range(w, out.data(), begin, count).ok()) ++bad;
    auto h = ref.page(w, begin + w.lane() * 1024);
    if (!h.ok()) ++bad;
    else
      for (uint64_t i = h.first(); i < h.first() + h.count(); i += 101)
        if (h[i] != word(i)) ++bad;
    h.release();
  });
  EXPECT_EQ(bad.load(), 0u);
  for (uint64_t k = 0; k < count; ++k) ASSERT_EQ(out[k], word(begin + k)) << k;
  EXPECT_EQ(ref.read_range(out.data(), a.size() - 2, 3).code, client_code::out_of_range);
  // And back: write a range, read it through the cache and the target.
  std::vector<uint32_t> in(5000);
  for (uint64_t k = 0; k < in.size(); ++k) in[k] = uint32_t(k * 2654435761u);
  test::run_warp(0x0000FFFFu, 1, [&](test::emulated_warp w) {
    if (!ref.write_range(w, in.data(), 3001, in.size()).ok()) ++bad;
  });
  EXPECT_EQ(bad.load(), 0u);
  ASSERT_TRUE(cache->flush().ok());
  for (uint64_t k = 0; k < in.size(); ++k) ASSERT_EQ(ref[3001 + k], in[k]) << k;
  EXPECT_EQ(ref[3000], word(3000));
  EXPECT_EQ(ref[3001 + in.size()], word(3001 + in.size()));
}

// A bulk write that covers whole pages does not read them first (their
// slots are zeroed, then written); pages it covers in part are read, so
// their other bytes survive. The last page of a dataset counts as whole
// when the write covers its bytes in the dataset.
TEST(CacheWarpRange, WholePagesWrittenAreNotReadFirst) {
  controller ctl(two_pollers());
  const uint64_t bytes = 64 * 4096 + 1536;  // 64 pages and a short one of 3 blocks
  auto mem = pattern_memory(bytes, true);
  const uint32_t ns = ctl.add_namespace({mem, 512, false});
  auto cache = make_host_page_cache(ctl, small_cache(32));
  array<uint8_t> a(cache, ns);
  const auto ref = a.ref();
  const auto* disk = static_cast<const uint8_t*>(mem->host_pointer());
  const std::vector<uint8_t> before(disk, disk + bytes);
  std::vector<uint8_t> in(bytes);
  for (uint64_t k = 0; k < bytes; ++k) in[k] = uint8_t(k * 131 + 7);
  auto write = [&](uint64_t begin, uint64_t count) {
    std::atomic<uint64_t> bad{0};
    test::run_warp(0xFFFFFFFFu, 0, [&](test::emulated_warp w) {
      if (!ref.write_range(w, in.data() + begin, begin, count).ok()) ++bad;
    });
    EXPECT_EQ(bad.load(), 0u);
  };
  // Pages 2-9 whole, page 10 in part (read: 4096 bytes).
  write(2 * 4096, 8 * 4096 + 100);
  EXPECT_EQ(cache->stats().bytes_read, 4096u);
  // Page 20 from byte 8 (read), pages 21-39 whole: more than the cache
  // holds, so pages are evicted and written back meanwhile.
  write(20 * 4096 + 8, 20 * 4096 - 8);
  EXPECT_EQ(cache->stats().bytes_read, 2 * 4096u);
  // The short last page, whole: not read.
  write(64 * 4096, 1536);
  EXPECT_EQ(cache->stats().bytes_read, 2 * 4096u);
  ASSERT_TRUE(cache->flush().ok());
  auto written = [](uint64_t k) {
    return (k >= 2 * 4096 && k < 10 * 4096 + 100) || (k >= 20 * 4096 + 8 && k < 40 * 4096) || k >= 64 * 4096;
  };
  uint64_t wrong = 0;
  for (uint64_t k = 0; k < bytes; ++k) wrong += disk[k] != (written(k) ? in[k] : before[k]);
  EXPECT_EQ(wrong, 0u);
}
