// The plain program that buffered write-back is measured against: threads
// each doing random whole-page pwrite()s to one file through the page cache,
// one write at a time, nothing in between. Each write stores the page's own
// pattern (word i holds i, as the benchmarks' data files do), so the file's
// contents are the same afterwards and later checks still hold.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace deepwell::bench {

// Random `page`-byte writes by `threads` threads for about `seconds`, while
// `readers` more threads read random pages of the same file (as a cache's
// misses do beside its write-backs; reads are not counted), then an
// fdatasync. {"threads", "readers", "writes", "seconds", "writes_per_s",
// "durable_seconds", "durable_writes_per_s", "ok"}.
inline nlohmann::json pwrite_loop(const std::string& path, uint64_t size, uint32_t page, unsigned threads,
                                  double seconds, unsigned readers = 0) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> total{0};
  std::atomic<bool> failed{false};
  const uint64_t pages = size / page;
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < readers; ++t)
    ts.emplace_back([&, t] {
      const int fd = ::open(path.c_str(), O_RDONLY);
      if (fd < 0) return;
      std::vector<uint8_t> buf(page);
      uint64_t x = 0xD1B54A32D192ED03ull * (t + 1);
      while (!stop.load(std::memory_order_relaxed)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (::pread(fd, buf.data(), page, off_t(x % pages * page)) < 0) break;
      }
      ::close(fd);
    });
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      const int fd = ::open(path.c_str(), O_WRONLY);
      if (fd < 0) {
        failed = true;
        return;
      }
      std::vector<uint64_t> buf(page / 8);
      uint64_t x = 0x9E3779B97F4A7C15ull * (t + 1), n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 64; ++k) {  // a clock read every 64 writes
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          const uint64_t p = x % pages, first = p * (page / 8);
          for (size_t w = 0; w < buf.size(); ++w) buf[w] = first + w;
          if (::pwrite(fd, buf.data(), page, off_t(p * page)) != ssize_t(page)) {
            failed = true;
            stop = true;
            break;
          }
          ++n;
        }
        if (t == 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= seconds)
          stop = true;
      }
      total += n;
      ::close(fd);
    });
  for (auto& t : ts) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Then made durable, as a cache's flush() makes its write-backs: the
  // rate that counts includes it, and the next run starts with no dirty
  // pages of this one.
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0 || ::fdatasync(fd) != 0) failed = true;
  if (fd >= 0) ::close(fd);
  const double durable_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {{"threads", threads},
          {"readers", readers},
          {"writes", total.load()},
          {"seconds", secs},
          {"writes_per_s", secs > 0 ? double(total.load()) / secs : 0.0},
          {"durable_seconds", durable_secs},
          {"durable_writes_per_s", durable_secs > 0 ? double(total.load()) / durable_secs : 0.0},
          {"ok", !failed.load()}};
}

// The best of the loop at each thread count by its durable rate (each run
// in turn), and one
// writer beside four readers (not a candidate for the best: what reads of
// the same file cost the writes):
// {"best": {...the best run...}, "runs": [...], "beside_readers": {...}}.
inline nlohmann::json best_pwrite_loop(const std::string& path, uint64_t size, uint32_t page,
                                       std::initializer_list<unsigned> thread_counts, double seconds) {
  nlohmann::json runs = nlohmann::json::array(), best;
  for (unsigned n : thread_counts) {
    nlohmann::json r = pwrite_loop(path, size, page, n, seconds);
    if (r["ok"] && (best.is_null() ||
                    r["durable_writes_per_s"].get<double>() > best["durable_writes_per_s"].get<double>()))
      best = r;
    runs.push_back(std::move(r));
  }
  return {{"best", best}, {"runs", runs}, {"beside_readers", pwrite_loop(path, size, page, 1, seconds, 4)}};
}

// A mixed run's write-backs a second against the baseline (best_pwrite_loop,
// or null: none measured): into the run's JSON (baselines.pwrite_loop,
// ratios.writeback_vs_pwrite) and one line on stdout.
inline void note_writeback_vs_pwrite(nlohmann::json& run, const nlohmann::json& baseline, double writebacks_per_s) {
  if (baseline.is_null()) return;
  run["baselines"]["pwrite_loop"] = baseline;
  const double best = baseline["best"].value("durable_writes_per_s", 0.0);
  if (best > 0) run["ratios"]["writeback_vs_pwrite"] = writebacks_per_s / best;
  std::printf("  %.0f write-backs/s = %.3f of the plain pwrite loop\n", writebacks_per_s,
              best > 0 ? writebacks_per_s / best : 0.0);
}

}  // namespace deepwell::bench
