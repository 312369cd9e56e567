// thread_times.hpp: the diagnostics deepwell grep reports about the host's
// threads (a named group's CPU time, where its threads sleep, the machine's
// CPU time).
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "deepwell/common/thread_times.hpp"

using namespace deepwell;

namespace {

const thread_time* group(const std::vector<thread_time>& v, const std::string& name) {
  for (const thread_time& t : v)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace

TEST(ThreadTimes, ANamedGroupsCpuTimeAndSleepsAreSeen) {
  const machine_cpu_time m0 = machine_cpu_time::now();
  const thread_clock clock;
  std::atomic<bool> stop{false};
  // Two busy threads of one group, one sleeper of another.
  auto spin = [&] {
    while (!stop.load()) {
    }
  };
  std::thread a(spin), b(spin), c([&] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  pthread_setname_np(a.native_handle(), "dwt-busy-0");
  pthread_setname_np(b.native_handle(), "dwt-busy-1");
  pthread_setname_np(c.native_handle(), "dwt-sleep-0");
  thread_sampler sampler("dwt-sleep", 200, 3, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto samples = sampler.stop();
  const std::vector<thread_time> t = clock.elapsed();
  stop.store(true);
  a.join();
  b.join();
  c.join();
  const machine_cpu_time m = machine_cpu_time::now() - m0;

  const thread_time* busy = group(t, "dwt-busy");
  if (!busy) GTEST_SKIP() << "no schedstat here";
  EXPECT_EQ(busy->threads, 2u) << "dwt-busy-0 and dwt-busy-1 are one group";
  // On a CI machine of two cores they share them with everything else.
  EXPECT_GT(busy->cpu_ns, 50'000'000u) << "two spinning threads for 300 ms";
  const thread_time* sleeper = group(t, "dwt-sleep");
  ASSERT_NE(sleeper, nullptr);
  EXPECT_LT(sleeper->cpu_ns, busy->cpu_ns) << "the sleeper sleeps";

  // The sampler saw only its group, mostly asleep in clock_nanosleep (its
  // wchan where the kernel stack needs root).
  ASSERT_FALSE(samples.empty());
  uint64_t total = 0, asleep = 0;
  for (const auto& [where, n] : samples) {
    total += n;
    if (where.rfind("S: ", 0) == 0) asleep += n;
  }
  EXPECT_GT(total, 50u) << "about one look every 200 us for 300 ms";
  EXPECT_GT(asleep * 2, total) << samples.front().first;

  EXPECT_GE(m.user + m.system + m.idle, 0.0);
  EXPECT_GE(m.steal, 0.0);
}

TEST(ThreadTimes, ThreadsThatStartLaterCountFromZeroAndNamesOfDigitsStay) {
  const thread_clock clock;
  std::atomic<bool> stop{false};
  std::thread a([&] {
    while (!stop.load()) {
    }
  });
  pthread_setname_np(a.native_handle(), "12345");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::vector<thread_time> t = clock.elapsed();
  stop.store(true);
  a.join();
  const thread_time* g = group(t, "12345");
  if (t.empty()) GTEST_SKIP() << "no schedstat here";
  ASSERT_NE(g, nullptr) << "a name of digits is its own group";
  EXPECT_GT(g->cpu_ns, 0u);
  EXPECT_LT(g->cpu_ns, 2'000'000'000u) << "counted from its start, not from the machine's";
}
