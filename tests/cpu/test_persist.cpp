// persist: what it makes durable, told apart from what it does not by a
// disk with a volatile write cache (crash_target.hpp) cut off after the
// call. CPU threads and emulated warps run the same code the GPU's warps do.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/targets/crash_target.hpp"
#include "deepwell/views/array.hpp"
#include "cache_test_support.hpp"
#include "warp_emulator.hpp"

using namespace deepwell;

namespace {

constexpr uint64_t disk_bytes = 1 << 20;  // 256 pages of 4 KiB

uint64_t durable_word(const std::vector<uint8_t>& img, uint64_t i) {
  uint64_t v;
  std::memcpy(&v, img.data() + i * 8, 8);
  return v;
}

struct rig {
  controller ctl;
  std::shared_ptr<volatile_cache_target> disk = make_volatile_cache_target(disk_bytes);
  std::shared_ptr<fault_target> faults = make_fault_target(disk);  // for flush failures
  uint32_t ns;
  std::shared_ptr<page_cache> cache;
  explicit rig(uint64_t slots = 64) {
    ns = ctl.add_namespace({faults, 512, false});
    cache = make_host_page_cache(ctl, test::small_cache(slots));
  }
  std::vector<uint8_t> cut() {
    disk->cut({});
    return disk->durable_image();
  }
};

}  // namespace

// Only the persisted range is durable: the rest stays dirty in the cache.
TEST(Persist, MakesTheRangeDurableAndNothingElse) {
  rig r;
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  for (uint64_t i = 0; i < 4096; ++i) ASSERT_TRUE(ref.write(i, 1000 + i).ok());  // pages 0-7
  const uint64_t flushes_before = r.disk->flushes();
  const request_status p = ref.persist(512, 1024);  // pages 1 and 2
  ASSERT_TRUE(p.ok()) << describe(p);
  EXPECT_EQ(r.disk->flushes(), flushes_before + 1);
  const auto img = r.cut();
  for (uint64_t i = 512; i < 1536; ++i) ASSERT_EQ(durable_word(img, i), 1000 + i) << i;
  for (uint64_t i : {0ull, 511ull, 1536ull, 4095ull}) EXPECT_EQ(durable_word(img, i), 0u) << i;
}

// Without a persist (or flush), a power cut loses the writes even once they
// are written back: eviction alone does not make data durable.
TEST(Persist, WriteBackWithoutFlushIsNotDurable) {
  rig r(4);
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  for (uint64_t i = 0; i < 131072; i += 64) ASSERT_TRUE(ref.write(i, i + 1).ok());  // 256 pages through 4 slots
  EXPECT_GT(r.cache->stats().writebacks, 200u);
  EXPECT_GT(r.disk->unflushed_writes(), 200u);
  const auto img = r.cut();
  uint64_t kept = 0;
  for (uint64_t i = 0; i < 131072; i += 64) kept += durable_word(img, i) == i + 1;
  EXPECT_EQ(kept, 0u);
}

// Pages written back by evictions (asynchronously, perhaps still in
// flight) are waited for: after persist of the whole range every write is
// durable.
TEST(Persist, WaitsForWriteBacksAlreadyInFlight) {
  rig r(4);
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  for (uint64_t i = 0; i < 131072; i += 64) ASSERT_TRUE(ref.write(i, i + 7).ok());
  const request_status p = ref.persist(0, ref.size());
  ASSERT_TRUE(p.ok()) << describe(p);
  const auto img = r.cut();
  for (uint64_t i = 0; i < 131072; i += 64) ASSERT_EQ(durable_word(img, i), i + 7) << i;
}

// Many threads persisting at once share flushes (group commit), and each
// one's writes are durable when its call returns.
TEST(Persist, ConcurrentPersistsShareFlushes) {
  rig r;
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  constexpr int threads = 16, rounds = 20;
  std::atomic<int> failures{0};
  std::vector<std::atomic<uint64_t>> done(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int k = 1; k <= rounds; ++k) {
        const uint64_t i = uint64_t(t) * 512 + uint64_t(k);  // thread t's own page
        if (!ref.write(i, uint64_t(k)).ok() || !ref.persist(i, 1).ok()) ++failures;
        done[t].store(uint64_t(k));
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(r.disk->flushes(), uint64_t(threads * rounds));  // shared
  EXPECT_EQ(r.cache->stats().flushes, r.disk->flushes());
  const auto img = r.cut();
  for (int t = 0; t < threads; ++t)
    for (int k = 1; k <= rounds; ++k) ASSERT_EQ(durable_word(img, uint64_t(t) * 512 + k), uint64_t(k));
}

// Writers sharing pages with a persisting thread: whatever a thread wrote
// before its own persist returned is durable, even when another thread
// was copying the same page to write it back at that moment (the page is
// re-marked dirty by an atomic that the copy either follows or precedes).
TEST(Persist, WritesRacingAPersistOfTheirPageAreNotLost) {
#if defined(DEEPWELL_TSAN_BUILD)
  // The persist copies pages while other threads write other words of them:
  // a race by design (the page stays dirty when the copy misses a write),
  // which ThreadSanitizer reports as such. The plain build and the GPU
  // suite (GpuPersist.WritesRacingPersistsOfTheirPagesAreNotLost) run it.
  GTEST_SKIP() << "a race by design under ThreadSanitizer";
#endif
  rig r(16);
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  constexpr int threads = 8;
  constexpr uint64_t words = 4 * 512;  // 4 pages, shared by all threads
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<uint64_t> last(words, 0);  // per word: the last value its writer persisted
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      uint64_t v = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        ++v;
        for (uint64_t i = uint64_t(t); i < words; i += threads)
          if (!ref.write(i, v).ok()) ++failures;
        if (v % 3 == 0) {  // persist everything written so far
          if (!ref.persist(0, words).ok()) ++failures;
          for (uint64_t i = uint64_t(t); i < words; i += threads) last[i] = v;
        }
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  const auto img = r.cut();
  uint64_t behind = 0, persisted = 0;
  for (uint64_t i = 0; i < words; ++i) {
    behind += durable_word(img, i) < last[i];
    persisted += last[i] > 0;
  }
  EXPECT_EQ(behind, 0u);
  EXPECT_EQ(persisted, words);
}

// A warp whose lanes each persist their own range: one call, every range durable.
TEST(Persist, AWarpsLanesPersistTheirOwnRanges) {
  rig r;
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  test::warp_group g(0xFFFFFFFFu, 0);
  std::vector<std::thread> lanes;
  std::atomic<int> failures{0};
  for (unsigned l = 0; l < 32; ++l)
    lanes.emplace_back([&, l] {
      const test::emulated_warp w{&g, l};
      const uint64_t i = uint64_t(l) * 700;  // lanes' pages differ, some share one
      if (!ref.write(w, i, 5000 + l).ok()) ++failures;
      if (!ref.persist(w, i, 1).ok()) ++failures;
    });
  for (auto& t : lanes) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(r.disk->flushes(), 1u);  // one flush for the whole warp
  const auto img = r.cut();
  for (unsigned l = 0; l < 32; ++l) EXPECT_EQ(durable_word(img, uint64_t(l) * 700), 5000u + l) << l;
}

// A page handle's writes, persisted while it is held.
TEST(Persist, APageHandlePersistsItsWrites) {
  rig r;
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  auto h = ref.page(1000);
  ASSERT_TRUE(h.ok());
  h.write(1000, 42);
  h.write(1001, 43);
  const request_status p = h.persist();
  ASSERT_TRUE(p.ok()) << describe(p);
  h.write(1002, 44);  // after the persist: not durable
  const auto img = r.cut();
  EXPECT_EQ(durable_word(img, 1000), 42u);
  EXPECT_EQ(durable_word(img, 1001), 43u);
  EXPECT_EQ(durable_word(img, 1002), 0u);
  h.release();
}

// A failed flush reaches the persisting thread and the cache's error flag;
// the data is written again by a later persist.
TEST(Persist, AFailedFlushIsReported) {
  rig r;
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  ASSERT_TRUE(ref.write(3, 33).ok());
  fault_rule f;
  f.kind = fault_rule::fail_flush;
  f.count = 1;
  r.faults->add_rule(f);
  const request_status p1 = ref.persist(3, 1);
  EXPECT_EQ(p1.code, client_code::nvme_error) << describe(p1);
  EXPECT_FALSE(r.cache->last_error().ok());
  ASSERT_TRUE(ref.write(3, 34).ok());
  const request_status p2 = ref.persist(3, 1);
  EXPECT_TRUE(p2.ok()) << describe(p2);
  const auto img = r.cut();
  EXPECT_EQ(durable_word(img, 3), 34u);
}

// Bad arguments: a range outside the array is refused, a read-only array
// has nothing to persist, the host call names the range.
TEST(Persist, BadRangesAndReadOnlyArrays) {
  rig r;
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  EXPECT_EQ(ref.persist(ref.size(), 1).code, client_code::out_of_range);
  EXPECT_EQ(ref.persist(1, ref.size()).code, client_code::out_of_range);
  EXPECT_TRUE(ref.persist(ref.size(), 0).ok());
  EXPECT_THROW(a.persist(ref.size() - 1, 2), error);
  controller ctl;
  const uint32_t ro = ctl.add_namespace({make_host_memory_target(1 << 16, false), 512, true});
  auto cache = make_host_page_cache(ctl, test::small_cache(8));
  array<uint64_t> b(cache, ro);
  EXPECT_TRUE(b.ref().persist(0, 10).ok());
  EXPECT_EQ(ctl.total_counters().flushes, 0u);
}

// The host-side calls: array<T>::persist and persist_all.
TEST(Persist, HostCalls) {
  rig r;
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  for (uint64_t i = 0; i < 2048; ++i) ASSERT_TRUE(ref.write(i, ~i).ok());
  ASSERT_TRUE(a.persist(0, 512).ok());
  auto img = r.disk->durable_image();
  EXPECT_EQ(durable_word(img, 511), ~511ull);
  EXPECT_EQ(durable_word(img, 512), 0u);
  ASSERT_TRUE(a.persist_all().ok());
  img = r.cut();
  for (uint64_t i = 0; i < 2048; ++i) ASSERT_EQ(durable_word(img, i), ~i) << i;
}

// Several emulated warps, each lane persisting its own words (even lanes)
// or nothing (odd lanes), as GpuPersist.WhatEachThreadPersistsIsDurable.
TEST(Persist, ManyWarpsEachLaneItsOwnRange) {
  rig r(512);
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  constexpr unsigned warps = 4;
  constexpr uint32_t per = 64;
  std::vector<std::unique_ptr<test::warp_group>> groups;
  for (unsigned g = 0; g < warps; ++g) groups.push_back(std::make_unique<test::warp_group>(0xFFFFFFFFu, g));
  std::vector<std::thread> lanes;
  std::atomic<int> failures{0};
  for (unsigned g = 0; g < warps; ++g)
    for (unsigned l = 0; l < 32; ++l)
      lanes.emplace_back([&, g, l] {
        const test::emulated_warp w{groups[g].get(), l};
        const uint64_t first = (uint64_t(g) * 32 + l) * per;
        for (uint32_t k = 0; k < per; ++k)
          if (!ref.write(w, first + k, first + k + 1).ok()) ++failures;
        if (!ref.persist(w, first, l % 2 == 0 ? per : 0).ok()) ++failures;
      });
  for (auto& t : lanes) t.join();
  EXPECT_EQ(failures.load(), 0);
  const auto img = r.cut();
  for (unsigned t = 0; t < warps * 32; t += 2)
    for (uint32_t k = 0; k < per; ++k) ASSERT_EQ(durable_word(img, uint64_t(t) * per + k), uint64_t(t) * per + k + 1);
}

// GpuPersist.WritesRacingPersistsOfTheirPagesAreNotLost on emulated warps:
// every lane of every warp writes its words of 32 shared pages, round
// after round, and the whole warp persists all of them every other round.
TEST(Persist, EmulatedWarpsRacingPersistsOfSharedPages) {
#if defined(DEEPWELL_TSAN_BUILD)
  GTEST_SKIP() << "a race by design under ThreadSanitizer (see WritesRacingAPersistOfTheirPageAreNotLost)";
#endif
  rig r(64);
  array<uint64_t> a(r.cache, r.ns);
  const auto ref = a.ref();
  constexpr unsigned warps = 8;
  constexpr uint32_t rounds = 8;
  constexpr uint64_t words = 32 * 512;
  constexpr unsigned threads = warps * 32;
  std::vector<std::unique_ptr<test::warp_group>> groups;
  for (unsigned g = 0; g < warps; ++g) groups.push_back(std::make_unique<test::warp_group>(0xFFFFFFFFu, g));
  std::vector<std::thread> lanes;
  std::atomic<int> failures{0};
  std::vector<uint32_t> last(threads, 0);
  for (unsigned g = 0; g < warps; ++g)
    for (unsigned l = 0; l < 32; ++l)
      lanes.emplace_back([&, g, l] {
        const test::emulated_warp w{groups[g].get(), l};
        const unsigned tid = g * 32 + l;
        for (uint32_t round = 1; round <= rounds; ++round) {
          for (uint64_t i = tid; i < words; i += threads)
            if (!ref.write(w, i, uint64_t(round) << 32 | tid).ok()) ++failures;
          if (round % 2 == 0) {
            if (ref.persist(w, 0, words).ok()) last[tid] = round;
            else ++failures;
          }
        }
      });
  for (auto& t : lanes) t.join();
  EXPECT_EQ(failures.load(), 0) << r.cache->dump();
  const auto img = r.cut();
  uint64_t behind = 0;
  for (uint64_t i = 0; i < words; ++i) {
    const uint64_t v = durable_word(img, i);
    const unsigned writer = unsigned(i % threads);
    behind += (v >> 32) < last[writer] || unsigned(v) != writer;
  }
  EXPECT_EQ(behind, 0u);
}
