// The mixed read/write suite with CPU clients (gpu_mixed_bench is the GPU
// one): client threads read or write random 8-byte elements of a dataset
// through a CPU page cache of 5% of it, a share of the threads writing (0,
// 10, 33, 100%); buffered file, O_DIRECT file or host memory, every miss
// through the controller. Writers store what the word holds (word i holds
// i), so every read is checked. Each run's time (the accesses plus the
// flush() that makes the writes durable) is compared with the read-only
// run's: ratios.vs_read_only = read-only time / this time. On the buffered
// file, write-backs a second are also compared with the best of 1, 4 and 16
// plain threads doing random 4 KiB pwrite()s to the same file
// (--pwrite-seconds; ratios.writeback_vs_pwrite).
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/views/array.hpp"
#include "pwrite_loop.hpp"

using namespace deepwell;
using json = nlohmann::json;

namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Word i holds i, as in the GPU benchmarks.
void write_pattern_file(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw error(errno_message("open " + path, errno));
  std::vector<uint64_t> chunk(1 << 17);
  for (uint64_t w0 = 0; w0 < bytes / 8; w0 += chunk.size()) {
    const uint64_t n = std::min<uint64_t>(chunk.size(), bytes / 8 - w0);
    for (uint64_t k = 0; k < n; ++k) chunk[k] = w0 + k;
    if (pwrite(fd, chunk.data(), n * 8, off_t(w0 * 8)) != ssize_t(n * 8)) {
      ::close(fd);
      throw error(errno_message("write " + path, errno));
    }
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit = "unknown", file_path = "/var/tmp/deepwell-mixed-cpu.dat";
  std::vector<std::string> locations{"pagecache", "hostmem", "odirect"};
  std::vector<uint32_t> writer_pcts{0, 10, 33, 100};
  uint64_t data = 256ull << 20;
  unsigned threads = 8, pollers = 1;
  uint32_t ops = 20000;
  double pwrite_seconds = 1.0;
  CLI::App app{"deepwell mixed read/write benchmark (CPU clients, CPU page cache at 5% of the data)"};
  app.add_option("--locations", locations, "pagecache | hostmem | odirect");
  app.add_option("--writers", writer_pcts, "percent of threads that write (0 is the baseline; always run)");
  app.add_option("--data", data, "dataset bytes");
  app.add_option("--threads", threads, "client threads");
  app.add_option("--ops", ops, "accesses per thread");
  app.add_option("--pollers", pollers, "controller poller threads");
  app.add_option("--pwrite-seconds", pwrite_seconds, "each plain pwrite loop's time on the buffered file (0: none)");
  app.add_option("--file", file_path, "data file (rewritten with the pattern)");
  app.add_option("--json", json_path, "append one JSON line per run");
  app.add_option("--commit", commit, "commit hash to record");
  CLI11_PARSE(app, argc, argv);
  if (std::find(writer_pcts.begin(), writer_pcts.end(), 0u) == writer_pcts.end()) writer_pcts.insert(writer_pcts.begin(), 0);
  try {
    int status = 0;
    for (const std::string& loc : locations) {
      controller_config ccfg;
      ccfg.pollers = pollers;
      controller ctl(ccfg);
      std::shared_ptr<target> t;
      if (loc == "hostmem") {
        t = make_host_memory_target(data, true);
        auto* p = static_cast<uint64_t*>(t->host_pointer());
        for (uint64_t i = 0; i < data / 8; ++i) p[i] = i;
      } else {
        write_pattern_file(file_path, data);
        file_options fo;
        fo.writable = true;
        fo.direct = loc == "odirect";
        t = open_file_target(file_path, fo);
      }
      nlohmann::json pwrite_baseline;
      if (loc == "pagecache" && pwrite_seconds > 0) {
        pwrite_baseline = bench::best_pwrite_loop(file_path, data, 4096, {1, 4, 16}, pwrite_seconds);
        std::printf("plain pwrite loop and fdatasync, best of 1/4/16 threads: %.0f writes/s (%d threads); 1 beside 4 readers: %.0f\n",
                    pwrite_baseline["best"].value("durable_writes_per_s", 0.0), pwrite_baseline["best"].value("threads", 0),
                    pwrite_baseline["beside_readers"].value("durable_writes_per_s", 0.0));
      }
      const uint32_t ns = ctl.add_namespace({t, std::max<uint32_t>(512, t->io_alignment()), false});
      cache_config cc;
      cc.page_size = 4096;
      cc.capacity_bytes = data / 20;
      cc.direct_tier = false;
      cc.direct_files = cache_config::file_tier::never;
      auto cache = make_host_page_cache(ctl, cc);
      array<uint64_t> a(cache, ns);
      const array_ref<uint64_t> ref = a.ref();
      double read_only_secs = 0;
      for (const uint32_t pct : writer_pcts) {
        if (!cache->clear().ok()) throw error("clear failed");
        cache->reset_stats();
        std::atomic<uint64_t> reads{0}, writes{0}, wrong{0}, failed{0};
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> pool;
        for (unsigned th = 0; th < threads; ++th)
          pool.emplace_back([&, th] {
            const bool writer = th * 100 / threads < pct;
            uint64_t r = 0, w = 0, bad = 0, f = 0;
            for (uint32_t k = 0; k < ops; ++k) {
              const uint64_t i = mix((uint64_t(pct) << 40) + uint64_t(th) * ops + k) % ref.size();
              request_status s;
              if (writer) {
                s = ref.write(i, i);
                s.ok() ? ++w : ++f;
              } else {
                const uint64_t v = ref.try_read(i, &s);
                if (!s.ok())
                  ++f;
                else
                  ++r, bad += v != i;
              }
            }
            reads += r, writes += w, wrong += bad, failed += f;
          });
        for (auto& th : pool) th.join();
        const double access_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const request_status fs = cache->flush();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!fs.ok()) throw error("flush failed: " + describe(fs));
        const cache_stats st = cache->stats();
        if (pct == 0) read_only_secs = secs;
        const double ratio = read_only_secs / secs;
        const double writebacks_per_s = double(st.writebacks) / secs;
        std::printf("cpu mixed %s writers=%u%%: %.3f s (accesses %.3f, flush %.3f), %llu misses, %llu write-backs "
                    "(%llu by the cleaner), read-only/this = %.2f, wrong %llu, failed %llu\n",
                    loc.c_str(), pct, secs, access_secs, secs - access_secs, (unsigned long long)st.misses,
                    (unsigned long long)st.writebacks, (unsigned long long)st.cleans, ratio,
                    (unsigned long long)wrong.load(), (unsigned long long)failed.load());
        json j;
        j["benchmark"] = "mixed";
        j["clients"] = "cpu";
        j["commit"] = commit;
        j["config"] = {{"location", loc},      {"mode", "elem"},     {"writer_pct", pct},
                       {"data_bytes", data},   {"cache_bytes", data / 20}, {"page_size", 4096},
                       {"threads", threads},   {"ops", ops},         {"pollers", pollers},
                       {"backend", ctl.backend_name()}, {"path", "controller"}};
        j["metrics"] = {{"seconds", secs},           {"access_seconds", access_secs}, {"reads", reads.load()},
                        {"writes", writes.load()},   {"misses", st.misses},           {"writebacks", st.writebacks},
                        {"cleans", st.cleans},       {"reaped", st.reaped},           {"wrong", wrong.load()},
                        {"failed", failed.load()}};
        j["metrics"]["writebacks_per_s"] = writebacks_per_s;
        j["baselines"] = {{"read_only_seconds", read_only_secs}};
        j["ratios"] = {{"vs_read_only", ratio}};
        if (pct > 0) bench::note_writeback_vs_pwrite(j, pwrite_baseline, writebacks_per_s);
        if (!json_path.empty()) std::ofstream(json_path, std::ios::app) << j.dump() << "\n";
        if (wrong || failed) status = 1;
      }
      if (loc != "hostmem") ::unlink(file_path.c_str());
    }
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixed_bench: %s\n", e.what());
    return 2;
  }
}
