// The file API's free-slot queue (files/slot_queue.hpp) with CPU threads as
// callers: a slot is never held twice, none is lost, waiters are served in
// order, a waiter leaves at its deadline without losing the next slot, and
// abandoned slots come back once answered. Small queues make waiters lap.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/files/client_memory.hpp"
#include "deepwell/files/slot_queue.hpp"

namespace deepwell {
namespace {

constexpr uint64_t ms = 1'000'000;

struct never_answered {
  bool operator()(uint32_t) const { return false; }
};

// A queue in host client memory, kept alive with it.
struct queue_fixture {
  std::unique_ptr<client_memory> mem = make_host_client_memory();
  slot_queue_ref q;
  explicit queue_fixture(uint32_t nslots, uint32_t cell_shift = 0) : q(make_slot_queue(*mem, nslots, cell_shift)) {}
  slot_queue_ref::taken take(uint64_t wait_ns) const { return q.take(now_ns() + wait_ns, never_answered{}); }
  void put(uint32_t s) const { q.put(s, now_ns() + 1000 * ms); }
  unsigned long long waiters_arrived() const {
    return std::atomic_ref<unsigned long long>(*q.head).load();
  }
};

// Takes every free slot it can get within a short wait.
std::set<uint32_t> drain(const queue_fixture& f) {
  std::set<uint32_t> got;
  for (;;) {
    const auto t = f.take(2 * ms);
    if (!t.ok()) return got;
    EXPECT_TRUE(got.insert(t.slot).second) << "slot " << t.slot << " handed out twice";
  }
}

TEST(SlotQueue, EverySlotIsHandedOutOnceAndThenTheQueueIsEmpty) {
  queue_fixture f(8);
  const std::set<uint32_t> got = drain(f);
  EXPECT_EQ(got.size(), 8u);
  for (uint32_t s = 0; s < 8; ++s) EXPECT_TRUE(got.count(s)) << s;
}

TEST(SlotQueue, BadSizesAreRefusedByName) {
  auto mem = make_host_client_memory();
  EXPECT_THROW(make_slot_queue(*mem, 0), error);
  EXPECT_THROW(make_slot_queue(*mem, 64, 5), error);  // 32 cells for 64 slots
}

// Threads take a slot, hold it a moment and put it back; a slot held by two
// at once, or lost, fails. 2 slots in 8 cells with 12 threads: waiters lap.
void hammer(uint32_t nslots, uint32_t cell_shift, uint32_t threads, uint32_t rounds) {
  queue_fixture f(nslots, cell_shift);
  std::vector<std::atomic<int>> holders(nslots);
  std::atomic<uint64_t> taken{0}, overlaps{0};
  std::vector<std::thread> ts;
  for (uint32_t k = 0; k < threads; ++k)
    ts.emplace_back([&] {
      for (uint32_t r = 0; r < rounds; ++r) {
        const auto t = f.take(10'000 * ms);
        ASSERT_TRUE(t.ok());
        ASSERT_LT(t.slot, nslots);
        if (holders[t.slot].fetch_add(1) != 0) overlaps.fetch_add(1);
        if (r % 7 == 0) std::this_thread::yield();
        holders[t.slot].fetch_sub(1);
        taken.fetch_add(1);
        f.put(t.slot);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(overlaps.load(), 0u);
  EXPECT_EQ(taken.load(), uint64_t(threads) * rounds);
  EXPECT_EQ(drain(f).size(), nslots) << "a slot was lost";
}

TEST(SlotQueue, ThreadsNeverHoldASlotTogetherAndNoneIsLost) { hammer(4, 0, 8, 4000); }
TEST(SlotQueue, WaitersThatLapTheCellsStillGetEverySlot) { hammer(2, 3, 12, 3000); }

TEST(SlotQueue, WaitersAreServedInTheOrderTheyCame) {
  queue_fixture f(1);
  const auto first = f.take(ms);
  ASSERT_TRUE(first.ok());
  std::vector<int> order;
  std::mutex m;
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; ++k) {
    // The k-th waiter has its ticket before the next one starts.
    ts.emplace_back([&, k] {
      const auto t = f.take(10'000 * ms);
      ASSERT_TRUE(t.ok());
      {
        std::lock_guard<std::mutex> lock(m);
        order.push_back(k);
      }
      f.put(t.slot);
    });
    while (f.waiters_arrived() < uint64_t(k) + 2) std::this_thread::yield();
  }
  f.put(first.slot);
  for (auto& t : ts) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(SlotQueue, AWaiterLeavesAtItsDeadlineAndTheNextSlotGoesToTheNextWaiter) {
  queue_fixture f(1);
  const auto held = f.take(ms);
  ASSERT_TRUE(held.ok());
  const auto t0 = std::chrono::steady_clock::now();
  const auto gone = f.take(20 * ms);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(gone.ok());
  EXPECT_GE(waited, 0.019);
  EXPECT_LT(waited, 5.0);
  // The slot put back skips the cancelled cell and reaches a later waiter.
  std::atomic<bool> got{false};
  std::thread later([&] { got = f.take(10'000 * ms).ok(); });
  while (f.waiters_arrived() < 3) std::this_thread::yield();
  f.put(held.slot);
  later.join();
  EXPECT_TRUE(got.load());
}

TEST(SlotQueue, ManyWaitersLeavingAtTheirDeadlinesLoseNoSlot) {
  // Two slots in 8 cells; threads with short deadlines come and go while
  // others hold and free slots: every slot is there at the end.
  queue_fixture f(2, 3);
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (int k = 0; k < 6; ++k)
    ts.emplace_back([&, k] {
      while (!stop.load()) {
        const auto t = f.take(uint64_t(k % 3 + 1) * 50'000);  // 50-150 us
        if (t.ok()) {
          std::this_thread::yield();
          f.put(t.slot);
        }
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (auto& t : ts) t.join();
  f.q.reclaim(now_ns() + 1000 * ms, never_answered{});  // any slot a producer left loose
  EXPECT_EQ(drain(f).size(), 2u);
}

TEST(SlotQueue, AnAbandonedSlotComesBackOnlyOnceAnswered) {
  queue_fixture f(1);
  const auto held = f.take(ms);
  ASSERT_TRUE(held.ok());
  f.q.abandon(held.slot);
  EXPECT_FALSE(f.take(5 * ms).ok()) << "an abandoned slot was handed out before its reply";
  std::atomic<bool> answered{false};
  auto is_answered = [&](uint32_t) { return answered.load(); };
  std::atomic<bool> got{false};
  std::thread waiter([&] { got = f.q.take(now_ns() + 10'000 * ms, is_answered).ok(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(got.load());
  answered = true;  // the service's reply came: the waiter reclaims it
  waiter.join();
  EXPECT_TRUE(got.load());
}

}  // namespace
}  // namespace deepwell
