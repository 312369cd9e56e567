// The controller's data copy alone, on the CPU: threads copy random 4 KiB
// blocks of a large source (a host-memory namespace) into a staging ring of
// a given size, the way the pollers fill staging for the GPU, with the
// store kinds the controller can use (non-temporal, cached, cached then
// demoted to the last-level cache). No GPU, no queues: it tells whether the
// pollers' per-request cost is set by the copy, how it grows with threads
// (memory bandwidth, SMT siblings) and whether a staging ring that fits in
// the last-level cache helps. Writes one JSON line per configuration.
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "deepwell/common/detail/staging_copy.hpp"

using json = nlohmann::json;
namespace {

// Starts loading a source block into the core's caches (--prefetch): does
// issuing a block's misses up front beat the hardware prefetcher?
void prefetch_block(const char* p, size_t len) {
  for (size_t off = 0; off < len; off += 64) __builtin_prefetch(p + off, 0, 3);
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

void* map_bytes(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  std::memset(p, 1, bytes);  // back every page before timing
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t source_bytes = 4ull << 30, block = 4096, copies = 2'000'000;
  std::vector<unsigned> threads{1, 4, 8, 12, 16};
  std::vector<uint64_t> staging_sizes{4ull << 20, 32ull << 20, 256ull << 20};
  std::vector<std::string> modes{"streaming", "cached", "demote"};
  std::string json_path, commit = "unknown", prefetch = "none";
  CLI::App app{"the controller's staging copy alone, on CPU threads"};
  app.add_option("--source", source_bytes, "source bytes (random blocks of it are copied)");
  app.add_option("--block", block, "bytes per copy");
  app.add_option("--copies", copies, "copies per configuration (all threads together)");
  app.add_option("--threads", threads, "thread counts (one run each)");
  app.add_option("--staging", staging_sizes, "staging ring bytes, shared by all threads (one run each)");
  app.add_option("--modes", modes, "store kinds: streaming, cached, demote")
      ->check(CLI::IsMember({"streaming", "cached", "demote"}));
  app.add_option("--prefetch", prefetch, "none | block (each source block before its copy) | ahead (the next block's)")
      ->check(CLI::IsMember({"none", "block", "ahead"}));
  app.add_option("--json", json_path, "append one JSON line per run");
  app.add_option("--commit", commit, "commit hash to record");
  CLI11_PARSE(app, argc, argv);
  if (block == 0 || block % 64 || source_bytes < block) {
    std::fprintf(stderr, "host_copy_bench: --block must be a non-zero multiple of 64 and at most --source\n");
    return 2;
  }

  uint64_t max_staging = 0;
  for (uint64_t s : staging_sizes) max_staging = std::max(max_staging, s);
  auto* src = static_cast<char*>(map_bytes(source_bytes));
  auto* staging = static_cast<char*>(map_bytes(max_staging));
  const uint64_t source_blocks = source_bytes / block;

  std::printf("prefetch: %s\n", prefetch.c_str());
  std::printf("%-10s %8s %8s %10s %12s %12s\n", "stores", "threads", "staging", "GB/s", "ns/copy/thr", "cpu s");
  // Decided once, not per copy: the loop below is what is timed.
  const bool prefetch_this = prefetch == "block", prefetch_next = prefetch == "ahead";
  for (const std::string& mode : modes) {
    const auto kind = deepwell::detail::staging_stores_from(mode.c_str());
    for (uint64_t stage : staging_sizes) {
      const uint64_t slots = std::max<uint64_t>(stage / block, 1);
      for (unsigned nt : threads) {
        std::atomic<unsigned> ready{0};
        std::atomic<bool> go{false};
        std::vector<double> cpu(nt, 0.0);
        std::vector<std::thread> pool;
        const uint64_t per = copies / nt;
        for (unsigned t = 0; t < nt; ++t) {
          pool.emplace_back([&, t] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) {
            }
            const double c0 = thread_cpu_seconds();
            uint64_t x = 0x9E3779B97F4A7C15ull * (t + 1);
            auto next = [&] {
              x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift: a random source block
              return src + (x % source_blocks) * block;
            };
            const char* s_next = next();
            for (uint64_t i = 0; i < per; ++i) {
              char* dst = staging + ((i * nt + t) % slots) * block;
              const char* s = s_next;
              s_next = next();
              if (prefetch_this) prefetch_block(s, block);
              if (prefetch_next) prefetch_block(s_next, block);
              deepwell::detail::copy_to_staging(dst, s, block, kind);
            }
            cpu[t] = thread_cpu_seconds() - c0;
          });
        }
        while (ready.load() < nt) {
        }
        const auto t0 = std::chrono::steady_clock::now();
        go.store(true, std::memory_order_release);
        for (auto& th : pool) th.join();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double cpu_total = 0;
        for (double c : cpu) cpu_total += c;
        const double bytes = double(per) * nt * block;
        const double ns_per_copy = cpu_total * 1e9 / (double(per) * nt);
        std::printf("%-10s %8u %7lluM %10.2f %12.1f %12.2f\n", mode.c_str(), nt, (unsigned long long)(stage >> 20),
                    bytes / secs / 1e9, ns_per_copy, cpu_total);
        if (!json_path.empty()) {
          json j{{"bench", "host_copy"}, {"commit", commit}, {"stores", mode}, {"prefetch", prefetch}, {"threads", nt},
                 {"staging_bytes", stage}, {"block", block}, {"source_bytes", source_bytes},
                 {"copies", per * nt}, {"seconds", secs}, {"gbps", bytes / secs / 1e9},
                 {"cpu_ns_per_copy", ns_per_copy}, {"cpu_seconds", cpu_total}};
          std::ofstream(json_path, std::ios::app) << j.dump() << "\n";
        }
      }
    }
  }
  return 0;
}
