// The write path's defects, one regression test each (every one of them
// failed before its fix): two arrays over one namespace, a timed-out
// write-back landing after a newer one, prefetches starving demand misses,
// and the controller's own: exceptions in a poller, transient errors from
// the io backend. The in-place gather after a scatter is in the Python
// package's tests (it is the C ABI's choice).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/views/array.hpp"
#include "cache_test_support.hpp"

using namespace deepwell;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t seed = 11;
uint64_t expected(uint64_t i) { return test::pattern_word(i * 8, seed); }

std::shared_ptr<target> pattern_memory(uint64_t bytes, bool writable) { return test::pattern_memory(bytes, writable, seed); }
using test::small_cache;

uint64_t word_at(const std::shared_ptr<target>& mem, uint64_t i) {
  return client_atomic<uint64_t>(static_cast<uint64_t*>(mem->host_pointer())[i]).load(memory_order_relaxed);
}

}  // namespace

// Defect 1: every array over one namespace gets the same dataset id, so a
// page lives in one slot whichever view (and element type) reaches it.
TEST(Writes, TwoArraysOverOneNamespaceShareOnePage) {
  controller ctl;
  auto mem = pattern_memory(1 << 20, true);
  auto faults = make_fault_target(mem);  // no direct pointer: through the controller
  const uint32_t ns = ctl.add_namespace({faults, 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(16));
  array<uint64_t> a(cache, ns);
  array<uint64_t> b(cache, ns);
  array<uint32_t> c(cache, ns);
  EXPECT_EQ(a.ref().dataset, b.ref().dataset);
  EXPECT_EQ(a.ref().dataset, c.ref().dataset);
  ASSERT_TRUE(a.ref().write(0, 111).ok());
  EXPECT_EQ(b.ref()[0], 111u);
  EXPECT_EQ(c.ref()[0], 111u);
  ASSERT_TRUE(b.ref().write(1, 222).ok());
  EXPECT_EQ(a.ref()[1], 222u);
  ASSERT_TRUE(c.ref().write(4, 333).ok());  // the low half of word 2
  EXPECT_EQ(cache->stats().misses, 1u);     // one page, one fetch
  const request_status f = a.flush();
  ASSERT_TRUE(f.ok()) << describe(f);
  EXPECT_EQ(word_at(mem, 0), 111u);
  EXPECT_EQ(word_at(mem, 1), 222u);
  EXPECT_EQ(uint32_t(word_at(mem, 2)), 333u);
  EXPECT_EQ(word_at(mem, 2) >> 32, expected(2) >> 32);
  EXPECT_EQ(word_at(mem, 3), expected(3));
}

// Defect 2: a write-back whose wait timed out is still queued. The page may
// not be written again (nor evicted and re-read) until that write's
// completion has arrived, and flush() may not report success before it.
TEST(Writes, ATimedOutWriteBackNeverLandsAfterANewerOne) {
  controller ctl;
  auto mem = pattern_memory(1 << 20, true);
  auto faults = make_fault_target(mem);
  fault_rule slow;
  slow.kind = fault_rule::delay_write;
  slow.offset = 0;
  slow.length = 4096;
  slow.delay_ns = 800'000'000;
  slow.count = 1;  // the first write of page 0
  faults->add_rule(slow);
  const uint32_t ns = ctl.add_namespace({faults, 4096, false});
  cache_config cc = small_cache(4);
  cc.timeout_ns = 200'000'000;
  auto cache = make_host_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  ASSERT_TRUE(ref.write(0, 111).ok());
  const request_status f1 = a.flush();
  EXPECT_EQ(f1.code, client_code::timeout) << describe(f1);
  ASSERT_TRUE(ref.write(0, 222).ok());
  // Pressure on the other three slots: page 0 must stay (its write is in
  // flight), and come back as 222, not re-read from storage.
  for (uint64_t p = 1; p < 40; ++p) ASSERT_EQ(ref[p * 512], expected(p * 512)) << p;
  EXPECT_EQ(ref[0], 222u);
  const request_status f2 = a.flush();
  if (f2.ok()) {
    EXPECT_EQ(word_at(mem, 0), 222u);  // success means the newer data is stored
  } else {
    EXPECT_EQ(f2.code, client_code::timeout) << describe(f2);
  }
  std::this_thread::sleep_for(1000ms);  // the old write has landed by now
  const request_status f3 = a.flush();
  EXPECT_TRUE(f3.ok()) << describe(f3);
  EXPECT_EQ(word_at(mem, 0), 222u);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(word_at(mem, 0), 222u);
  EXPECT_EQ(faults->fired(), 1u);
  ASSERT_TRUE(cache->clear().ok());
  EXPECT_EQ(ref[0], 222u);
}

// A write-back that fails is reported by flush() and leaves the page dirty,
// even when it was started asynchronously by an eviction.
TEST(Writes, AFailedAsynchronousWriteBackStaysDirty) {
  controller ctl;
  auto mem = pattern_memory(1 << 20, true);
  auto faults = make_fault_target(mem);
  const uint32_t ns = ctl.add_namespace({faults, 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(4));
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  fault_rule fail;
  fail.kind = fault_rule::fail_write;
  fail.offset = 0;
  fail.length = 4096;
  faults->add_rule(fail);
  ASSERT_TRUE(ref.write(5, 55).ok());
  for (uint64_t p = 1; p < 20; ++p) ASSERT_EQ(ref[p * 512], expected(p * 512));  // evictions try page 0
  EXPECT_EQ(ref[5], 55u);  // never dropped
  const request_status f1 = a.flush();
  EXPECT_EQ(f1.code, client_code::nvme_error) << describe(f1);
  faults->clear_rules();
  const request_status f2 = a.flush();
  EXPECT_TRUE(f2.ok()) << describe(f2);
  EXPECT_EQ(word_at(mem, 5), 55u);
}

// Defect 4: prefetches nobody reads hold every command id of the queue; a
// demand miss must finish them (their completions are in) rather than wait
// for its deadline.
TEST(Writes, UnreadPrefetchesDoNotStarveADemandMiss) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({make_fault_target(pattern_memory(8 << 20, false)), 4096, true});
  cache_config cc = small_cache(1024);
  cc.queue_pairs = 1;
  cc.queue_entries = 64;  // depth 63
  cc.timeout_ns = 5ull * 1000000000ull;
  auto cache = make_host_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  for (uint64_t p = 0; p < 100; ++p) ref.prefetch(p * 512);
  std::this_thread::sleep_for(50ms);  // the reads complete; nobody consumes them
  const auto t0 = std::chrono::steady_clock::now();
  request_status s;
  EXPECT_EQ(ref.try_read(1000 * 512, &s), expected(1000 * 512));
  EXPECT_TRUE(s.ok()) << describe(s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_GT(cache->stats().reaped, 0u);
  // The prefetched pages were finished, not lost: no second fetch.
  const uint64_t misses = cache->stats().misses;
  for (uint64_t p = 0; p < 100; ++p) ASSERT_EQ(ref[p * 512 + 1], expected(p * 512 + 1));
  EXPECT_LE(cache->stats().misses - misses, 100u - 63u);  // only those that never got an id
  EXPECT_TRUE(cache->clear().ok());
}

// Write-backs issued asynchronously by evictions and the cleaner land byte
// for byte, with few victims left dirty when the hand reaches them.
TEST(Writes, TheCleanerWritesAheadOfTheHand) {
  controller ctl;
  auto mem = pattern_memory(16 << 20, true);
  const uint32_t ns = ctl.add_namespace({make_fault_target(mem), 4096, false});
  cache_config cc = small_cache(256);
  cc.clean_threshold = 1.0 / 16;
  auto cache = make_host_page_cache(ctl, cc);
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  const uint64_t pages = (16 << 20) / 4096;
  for (uint64_t round = 0; round < 3; ++round)
    for (uint64_t p = 0; p < pages; ++p) ASSERT_TRUE(ref.write(p * 512 + round, p * 10 + round).ok()) << p;
  const request_status f = a.flush();
  ASSERT_TRUE(f.ok()) << describe(f);
  const cache_stats st = cache->stats();
  EXPECT_GT(st.cleans, 0u);
  for (uint64_t p = 0; p < pages; ++p)
    for (uint64_t round = 0; round < 3; ++round) ASSERT_EQ(word_at(mem, p * 512 + round), p * 10 + round) << p;
  EXPECT_EQ(word_at(mem, 3), expected(3));
}

// Defect 6: a page missing from the cache and overwritten whole
// (write_range) is not read first. Its slot was published zeroed before the
// writer copied its bytes in, so a reader racing the overwrite read zeros
// that nobody wrote (seen on an H200: the mixed benchmark's readers of whole
// pages found thousands of wrong words while writers rewrote pages with the
// bytes they already held). Readers must see the old bytes or the new.
TEST(Writes, AReaderRacingAWholePageOverwriteSeesOldOrNewBytesNeverOthers) {
#if defined(DW_UNDER_TSAN)
  // Readers and writers copy the same page's bytes at once: the race this
  // test is about, by design (api.md), which ThreadSanitizer would report.
  GTEST_SKIP() << "a deliberate race on page bytes; runs in the plain CPU suite";
#endif
  controller ctl;
  constexpr uint64_t pages = 24, words = pages * 512;
  auto mem = pattern_memory(pages * 4096, true);
  const uint32_t ns = ctl.add_namespace({make_fault_target(mem), 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(12));  // half the pages: most accesses miss
  array<uint64_t> a(cache, ns);
  const auto ref = a.ref();
  std::atomic<uint64_t> wrong{0}, failed{0}, reads{0}, writes{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      const bool writer = t % 2 == 0;
      std::vector<uint64_t> buf(512);
      uint64_t x = 0x9E3779B97F4A7C15ull * (t + 1);
      while (!stop.load(std::memory_order_relaxed)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint64_t first = x % pages * 512;
        if (writer) {
          for (uint64_t w = 0; w < 512; ++w) buf[w] = expected(first + w);  // the bytes it already holds
          (ref.write_range(buf.data(), first, 512).ok() ? writes : failed) += 1;
        } else if (ref.read_range(buf.data(), first, 512).ok()) {
          for (uint64_t w = 0; w < 512; ++w) wrong += buf[w] != expected(first + w);
          reads += 1;
        } else {
          failed += 1;
        }
      }
    });
  std::this_thread::sleep_for(1500ms);
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0u) << "words read that were neither the old nor the new bytes, in " << reads.load()
                              << " page reads beside " << writes.load() << " page writes";
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_GT(reads.load(), 1000u);
  EXPECT_GT(writes.load(), 1000u);
  ASSERT_TRUE(a.flush().ok());
  for (uint64_t i = 0; i < words; ++i) ASSERT_EQ(word_at(mem, i), expected(i)) << i;
}

// A poller that meets an exception fails its queues (clients see
// controller_lost at once) instead of terminating the process.
TEST(Writes, AnExceptionInAPollerFailsItsQueuesAndNotTheProcess) {
  controller ctl;
  auto faults = make_fault_target(pattern_memory(1 << 20, false));
  fault_rule boom;
  boom.kind = fault_rule::raise;
  boom.offset = 8 * 4096;
  boom.length = 4096;
  faults->add_rule(boom);
  const uint32_t ns = ctl.add_namespace({faults, 4096, true});
  auto cache = make_host_page_cache(ctl, small_cache(16));
  array<uint64_t> a(cache, ns);
  ASSERT_EQ(a.ref()[0], expected(0));
  const auto t0 = std::chrono::steady_clock::now();
  request_status s;
  a.ref().try_read(8 * 512, &s);
  EXPECT_EQ(s.code, client_code::controller_lost) << describe(s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_NE(ctl.dump().find("bad_alloc"), std::string::npos) << ctl.dump();
}

// -EAGAIN and -EINTR from the io backend are asked again, not final.
TEST(Writes, TransientErrorsAreRetried) {
  controller ctl;
  auto mem = pattern_memory(1 << 20, true);
  auto faults = make_fault_target(mem);
  for (int err : {EAGAIN, EINTR}) {
    fault_rule r;
    r.kind = fault_rule::fail_read;
    r.error = err;
    r.count = 2;
    faults->add_rule(r);
    r.kind = fault_rule::fail_write;
    faults->add_rule(r);
  }
  const uint32_t ns = ctl.add_namespace({faults, 4096, false});
  auto cache = make_host_page_cache(ctl, small_cache(16));
  array<uint64_t> a(cache, ns);
  request_status s;
  EXPECT_EQ(a.ref().try_read(3, &s), expected(3));
  EXPECT_TRUE(s.ok()) << describe(s);
  ASSERT_TRUE(a.ref().write(3, 7).ok());
  const request_status f = a.flush();
  EXPECT_TRUE(f.ok()) << describe(f);
  EXPECT_EQ(word_at(mem, 3), 7u);
  EXPECT_EQ(faults->fired(), 8u);
}

// A created file is made durable with its directory (checked as far as a
// test can: the file exists with its size, and creating twice is fine).
TEST(Writes, CreatedFilesGetTheirSizeAndName) {
  test::scratch_file f;
  const std::string& path = f.path();
  ::unlink(path.c_str());  // created by the target
  file_options o;
  o.writable = true;
  o.create = true;
  o.create_size = 1 << 16;
  {
    auto t = open_file_target(path, o);
    EXPECT_EQ(t->size(), uint64_t(1 << 16));
  }
  {
    auto t = open_file_target(path, o);  // exists now: opened, not recreated
    EXPECT_EQ(t->size(), uint64_t(1 << 16));
  }
}
