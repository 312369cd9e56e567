// parallel_for over [0, n) in contiguous chunks, one per thread: the graph
// tools' and the C ABI's CPU-client parallelism. Chunks are contiguous so a thread's results can be
// combined in index order (deterministic output whatever the thread count).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace deepwell::detail {

// `requested` threads (0: every core), at most four a core: the work is
// CPU-bound, and a caller's huge count (a typo, a hostile option) would
// otherwise spend its time creating threads or run out of them.
inline unsigned thread_count(unsigned requested) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return requested ? std::min(requested, 4 * cores) : cores;
}

// fn(thread_index, begin, end). The first exception thrown by any chunk is
// rethrown on the caller after all threads finish. Where the system refuses
// another thread, the caller's thread runs the remaining chunks itself.
template <class Fn>
void parallel_for(uint64_t n, unsigned threads, Fn&& fn) {
  threads = unsigned(std::max<uint64_t>(1, std::min<uint64_t>(thread_count(threads), n)));
  if (threads == 1) {
    fn(0u, uint64_t(0), n);
    return;
  }
  std::exception_ptr first;
  std::mutex m;
  std::vector<std::thread> pool;
  const uint64_t chunk = (n + threads - 1) / threads;
  auto run = [&](unsigned t) {
    const uint64_t b = std::min(n, t * chunk), e = std::min(n, b + chunk);
    try {
      fn(t, b, e);
    } catch (...) {
      std::lock_guard<std::mutex> l(m);
      if (!first) first = std::current_exception();
    }
  };
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    try {
      pool.emplace_back(run, t);
    } catch (const std::system_error&) {
      for (unsigned u = t; u < threads; ++u) run(u);
      break;
    }
  }
  for (auto& th : pool) th.join();
  if (first) std::rethrow_exception(first);
}

// fn(i) for every i in [0, n), items handed out one at a time: for work
// whose items differ in cost (a group's size, a search's length). Each item's
// result must depend on i alone for the output to be deterministic.
template <class Fn>
void parallel_items(uint64_t n, unsigned threads, Fn&& fn) {
  std::atomic<uint64_t> next{0};
  const unsigned t = unsigned(std::min<uint64_t>(thread_count(threads), std::max<uint64_t>(n, 1)));
  parallel_for(t, t, [&](unsigned, uint64_t, uint64_t) {
    for (uint64_t i; (i = next.fetch_add(1)) < n;) fn(i);
  });
}

}  // namespace deepwell::detail
