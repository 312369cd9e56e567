// The server's shared host-memory tier (host_tier.hpp) under a controller:
// a second read of a page comes from host memory, writes go through and are
// never hidden by an older copy, and eviction keeps whatever is read right.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "deepwell/controller.hpp"
#include "deepwell/error.hpp"
#include "deepwell/host_client.hpp"
#include "deepwell/host_tier.hpp"
#include "test_util.hpp"

using namespace deepwell;

namespace {

// Storage that counts the requests reaching it (a 1 ns delay rule fires on each).
std::shared_ptr<fault_target> counted(uint64_t bytes, uint64_t seed) {
  auto t = make_fault_target(test::pattern_memory(bytes, true, seed));
  t->add_rule({fault_rule::delay, 0, UINT64_MAX, 0, 1, 0});
  return t;
}

}  // namespace

TEST(HostTier, ASecondReadComesFromHostMemoryAndWritesGoThrough) {
  auto tier = host_tier::make(64 * 4096);
  auto storage = counted(1 << 20, 21);
  controller ctl;
  const uint32_t ns = ctl.add_namespace({tier->wrap(storage), 4096, false});
  host_queue_client a(ctl.create_queue_pair({16, 16, 8192}));
  host_queue_client b(ctl.create_queue_pair({16, 16, 8192}));
  std::vector<uint8_t> x(8192), y(8192);
  ASSERT_TRUE(a.read(ns, 4, 2, 4096, x.data()).ok());
  EXPECT_EQ(test::check_pattern(x.data(), 8192, 4 * 4096, 21), -1);
  EXPECT_EQ(storage->fired(), 1u);
  ASSERT_TRUE(b.read(ns, 4, 2, 4096, y.data()).ok());  // another client: from the tier
  EXPECT_EQ(x, y);
  EXPECT_EQ(storage->fired(), 1u) << "the second read did not reach storage";
  ASSERT_TRUE(b.read(ns, 5, 1, 4096, y.data()).ok());  // a page inside the first read
  EXPECT_EQ(storage->fired(), 1u);
  host_tier_stats s = tier->stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.resident_pages, 2u);
  // A write goes to storage and the next read sees it.
  std::vector<uint8_t> w(4096, 0x3C);
  ASSERT_TRUE(a.write(ns, 5, 1, 4096, w.data()).ok());
  EXPECT_EQ(storage->fired(), 2u);
  ASSERT_TRUE(b.read(ns, 5, 1, 4096, y.data()).ok());
  EXPECT_EQ(std::vector<uint8_t>(y.begin(), y.begin() + 4096), w);
  ASSERT_TRUE(b.read(ns, 4, 1, 4096, y.data()).ok());
  EXPECT_EQ(test::check_pattern(y.data(), 4096, 4 * 4096, 21), -1) << "the page beside the write is unchanged";
  EXPECT_GE(tier->stats().invalidations, 1u);
}

TEST(HostTier, ConcurrentWritersAlwaysReadTheirLastWriteUnderEviction) {
  // 8 pages of tier over 128 blocks, two pollers: reads install pages while
  // writes to them are in flight on the other poller; a read that began
  // before a write must never leave its older bytes in the tier.
  auto tier = host_tier::make(8 * 4096);
  controller_config cc;
  cc.pollers = 2;
  controller ctl(cc);
  // Storage that takes 50 us a request: a read issued before a write on
  // the other poller gets the old bytes while the write is in flight.
  // A file, not host memory: the reads and writes that overlap on purpose
  // here are the kernel's to order (host memory would make them a data race
  // in this process, which ThreadSanitizer rightly reports).
  test::scratch_file file(128 * 4096, 1);
  file_options fo;
  fo.writable = true;
  auto storage = make_fault_target(open_file_target(file.path(), fo));
  storage->add_rule({fault_rule::delay, 0, UINT64_MAX, 0, 50'000, 0});
  const uint32_t ns = ctl.add_namespace({tier->wrap(storage), 4096, false});
  std::vector<std::unique_ptr<host_queue_client>> qs;
  for (int i = 0; i < 4; ++i) qs.push_back(std::make_unique<host_queue_client>(ctl.create_queue_pair({32, 32, 4096})));
  std::atomic<uint64_t> failures{0}, checks{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<uint64_t> mine(32, 0);  // version of each of my blocks (blocks t, t+4, ...)
      std::vector<uint64_t> buf(512), back(512);
      for (int i = 0; i < 2000; ++i) {
        const uint64_t k = rng() % 32, block = k * 4 + t;
        // Another thread's block (t+1's), read to churn the tier and race its writes.
        const uint64_t other = (rng() % 32) * 4 + (t + 1) % 4;
        if (!qs[t]->read(ns, other, 1, 4096, back.data()).ok()) ++failures;
        if (rng() % 2) {
          ++mine[k];
          for (auto& v : buf) v = block << 32 | mine[k];
          if (!qs[t]->write(ns, block, 1, 4096, buf.data()).ok()) ++failures;
        }
        if (!qs[t]->read(ns, block, 1, 4096, back.data()).ok()) ++failures;
        if (mine[k] == 0) {
          if (test::check_pattern(back.data(), 4096, block * 4096, 1) != -1) ++failures;
        } else {
          for (uint64_t v : back)
            if (v != (block << 32 | mine[k])) {
              ++failures;
              break;
            }
        }
        ++checks;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0u) << "of " << checks.load() << " reads";
  const host_tier_stats s = tier->stats();
  EXPECT_GT(s.hits, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_LE(s.resident_pages, 8u);
}

TEST(HostTier, BadSizesAreRefused) {
  EXPECT_THROW(host_tier::make(1000), deepwell::error);
  EXPECT_THROW(host_tier::make(1 << 20, 3000), deepwell::error);
  EXPECT_THROW(host_tier::make(1 << 20)->wrap(nullptr), deepwell::error);
}
