// parallel_for: every index once whatever the thread count asked for, and no
// crash where the system refuses threads.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "deepwell/common/detail/parallel.hpp"

using deepwell::detail::parallel_for;
using deepwell::detail::thread_count;

namespace {

// Each index of [0, n) visited exactly once, and the chunks' thread indices
// below the thread count.
bool covers(uint64_t n, unsigned threads) {
  std::vector<std::atomic<int>> seen(n);
  std::atomic<bool> ok{true};
  parallel_for(n, threads, [&](unsigned t, uint64_t b, uint64_t e) {
    if (t >= thread_count(threads)) ok = false;
    for (uint64_t i = b; i < e; ++i) seen[i].fetch_add(1);
  });
  for (auto& s : seen)
    if (s.load() != 1) return false;
  return ok;
}

uint64_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  return pages * 4096;
}

}  // namespace

TEST(Parallel, AHugeThreadCountIsCappedAtFourACore) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(thread_count(0), cores);
  EXPECT_EQ(thread_count(1), 1u);
  EXPECT_EQ(thread_count(~0u), 4 * cores);
  EXPECT_TRUE(covers(100000, ~0u));
  EXPECT_TRUE(covers(3, 1000));
  EXPECT_TRUE(covers(0, 8));
}

#ifndef DEEPWELL_TSAN_BUILD  // ThreadSanitizer maps memory for each thread too
// In a child: an address-space limit leaves room for a few threads' stacks
// (8 MiB each) of those asked for.
[[noreturn]] void cover_with_few_threads() {
  const rlim_t limit = mapped_bytes() + (48ull << 20);
  rlimit r;
  r.rlim_cur = r.rlim_max = limit;
  if (setrlimit(RLIMIT_AS, &r) != 0) std::_Exit(3);
  bool ok = false;
  try {
    ok = covers(1 << 16, 64);
  } catch (...) {
    std::_Exit(2);
  }
  std::_Exit(ok ? 0 : 1);
}

TEST(Parallel, WhereTheSystemRefusesThreadsTheCallerRunsTheRest) {
  EXPECT_EXIT(cover_with_few_threads(), ::testing::ExitedWithCode(0), "");
}
#endif
