// Mixed reads and writes through the GPU page cache, the cache at 5% of the
// data: a share of the kernel's warps (0, 10, 33, 100%) write, the others
// read; random 8-byte elements (every lane its own element) or whole pages
// (write_range / read_range, a page per warp step); over a buffered file
// (its pages in the page cache), an O_DIRECT file and host memory. Writers
// store what the word already holds (word i holds i), so every read is
// checked and the data is checked after the run.
//
// Each run's time is the kernel plus the flush() that makes its writes
// durable, compared with the read-only run of the same location and mode
// (the same accesses, so about the same misses): ratios.vs_read_only =
// read-only time / this time. On the buffered file, write-backs a second
// are also compared with the best of 1, 4 and 16 plain threads doing random
// 4 KiB pwrite()s to the same file, then fdatasync (as flush() makes the
// write-backs durable), measured in the same run before the
// kernels (--pwrite-seconds; ratios.writeback_vs_pwrite).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench_common.cuh"
#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/views/array.hpp"
#include "pwrite_loop.hpp"

using namespace deepwell;
using deepwell::bench::mix;
using json = nlohmann::json;

namespace {

struct mixed_counts {
  unsigned long long reads, writes, wrong, failed;
};

constexpr unsigned block_threads = 256;

__global__ void mixed_kernel(array_ref<uint64_t> a, uint32_t writer_pct, uint32_t ops, bool pages, uint64_t salt,
                             mixed_counts* out) {
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t warp = tid / 32;
  const unsigned lane = threadIdx.x & 31;
  const bool writer = warp % 100 < writer_pct;
  unsigned long long reads = 0, writes = 0, wrong = 0, failed = 0;
  if (!pages) {
    for (uint32_t k = 0; k < ops; ++k) {
      const uint64_t i = mix(salt + tid * ops + k) % a.size();
      if (writer) {
        const request_status s = a.write(gpu_warp{}, i, i);
        s.ok() ? ++writes : ++failed;
      } else {
        request_status s;
        const uint64_t v = a.read(gpu_warp{}, i, &s);
        if (!s.ok())
          ++failed;
        else
          ++reads, wrong += v != i;
      }
    }
  } else {
    __shared__ uint64_t buf[block_threads / 32][512];  // a 4 KiB page per warp
    uint64_t* mine = buf[threadIdx.x / 32];
    const uint64_t per_page = a.cache.page_size() / 8, npages = a.size() / per_page;
    for (uint32_t k = 0; k < ops; ++k) {
      const uint64_t p = mix(salt + warp * ops + k) % npages, first = p * per_page;
      if (writer) {
        for (uint64_t w = lane; w < per_page; w += 32) mine[w] = first + w;
        __syncwarp();
        const request_status s = a.write_range(gpu_warp{}, mine, first, per_page);
        if (lane == 0) s.ok() ? ++writes : ++failed;
      } else {
        const request_status s = a.read_range(gpu_warp{}, mine, first, per_page);
        __syncwarp();
        if (!s.ok()) {
          if (lane == 0) ++failed;
        } else {
          for (uint64_t w = lane; w < per_page; w += 32) wrong += mine[w] != first + w;
          if (lane == 0) ++reads;
        }
      }
      __syncwarp();
    }
  }
  atomicAdd(&out->reads, reads);
  atomicAdd(&out->writes, writes);
  atomicAdd(&out->wrong, wrong);
  atomicAdd(&out->failed, failed);
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit = "unknown", file_path = "/var/tmp/deepwell-mixed-bench.dat";
  std::vector<std::string> locations{"pagecache", "hostmem", "odirect"};
  std::vector<uint32_t> writer_pcts{0, 10, 33, 100};
  std::vector<std::string> modes{"elem", "page"};
  uint64_t data = 2ull << 30, odirect_data = 256ull << 20;
  uint32_t elem_ops = 64, page_ops = 256, odirect_ops = 4;
  unsigned pollers = 4;
  double pwrite_seconds = 2.0;
  CLI::App app{"deepwell mixed read/write benchmark (GPU page cache, cache at 5% of the data)"};
  app.add_option("--locations", locations, "pagecache | hostmem | odirect");
  app.add_option("--writers", writer_pcts, "percent of warps that write (0 is the baseline; always run)");
  app.add_option("--modes", modes, "elem (random 8-byte elements) | page (whole pages)");
  app.add_option("--data", data, "dataset bytes (page cache and host memory)");
  app.add_option("--odirect-data", odirect_data, "dataset bytes of the O_DIRECT file (a slow disk needs less)");
  app.add_option("--elem-ops", elem_ops, "element accesses per thread");
  // 256: enough that readers often meet a page a writer is overwriting whole
  // (at 32 a defect there went unseen: a racing reader could read zeros).
  app.add_option("--page-ops", page_ops, "pages per warp");
  app.add_option("--odirect-ops", odirect_ops, "accesses per thread (pages per warp) on O_DIRECT");
  app.add_option("--pollers", pollers, "controller poller threads");
  app.add_option("--pwrite-seconds", pwrite_seconds, "each plain pwrite loop's time on the buffered file (0: none)");
  app.add_option("--file", file_path, "data file (created if missing)");
  app.add_option("--json", json_path, "append one JSON line per run");
  app.add_option("--commit", commit, "commit hash to record");
  CLI11_PARSE(app, argc, argv);
  if (std::find(writer_pcts.begin(), writer_pcts.end(), 0u) == writer_pcts.end()) writer_pcts.insert(writer_pcts.begin(), 0);
  try {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    mixed_counts* counts = nullptr;
    check_cuda(cudaMallocManaged(&counts, sizeof(mixed_counts)), "cudaMallocManaged");
    int status = 0;
    for (const std::string& loc : locations) {
      const bool odirect = loc == "odirect";
      const uint64_t bytes = odirect ? odirect_data : data;
      controller_config ccfg;
      ccfg.pollers = pollers;
      controller ctl(ccfg);
      std::shared_ptr<target> t;
      if (loc == "hostmem") {
        t = make_host_memory_target(bytes, true);
        bench::fill_pattern(t->host_pointer(), bytes);
      } else {
        bench::ensure_pattern_file(file_path, bytes);
        if (!odirect) bench::read_through(file_path, bytes);
        file_options fo;
        fo.writable = true;
        fo.direct = odirect;
        fo.length = bytes;
        t = open_file_target(file_path, fo);
      }
      json pwrite_baseline;
      if (loc == "pagecache" && pwrite_seconds > 0) {
        pwrite_baseline = bench::best_pwrite_loop(file_path, bytes, 4096, {1, 4, 16}, pwrite_seconds);
        std::printf("plain pwrite loop and fdatasync, best of 1/4/16 threads: %.0f writes/s (%d threads); 1 beside 4 readers: %.0f\n",
                    pwrite_baseline["best"].value("durable_writes_per_s", 0.0), pwrite_baseline["best"].value("threads", 0),
                    pwrite_baseline["beside_readers"].value("durable_writes_per_s", 0.0));
      }
      const uint32_t ns = ctl.add_namespace({t, std::max<uint32_t>(512, t->io_alignment()), false});
      // One cache per location (each cache adds queue pairs the pollers
      // serve), emptied before each run.
      cache_config cc;
      cc.page_size = 4096;
      cc.capacity_bytes = bytes / 20;
      cc.direct_tier = false;  // every miss through the controller: the write path's home
      cc.direct_files = cache_config::file_tier::never;
      auto cache = make_gpu_page_cache(ctl, cc);
      array<uint64_t> a(cache, ns);
      for (const std::string& mode : modes) {
        const bool pages = mode == "page";
        double read_only_secs = 0;
        for (const uint32_t pct : writer_pcts) {
          if (!cache->clear().ok()) throw error("clear failed");
          cache->reset_stats();
          const uint32_t warps = std::min<uint32_t>(cache->slots() / pages_per_warp, uint32_t(prop.multiProcessorCount) * 32);
          const uint32_t blocks = std::max<uint32_t>(1, warps / (block_threads / 32));
          cache->check_capacity(uint64_t(blocks) * (block_threads / 32));
          const uint32_t ops = odirect ? odirect_ops : pages ? page_ops : elem_ops;
          std::memset(counts, 0, sizeof(*counts));
          const uint64_t rd0 = ctl.total_counters().reads, wr0 = ctl.total_counters().writes;
          const double cpu0 = ctl.poller_cpu_seconds();
          const auto t0 = std::chrono::steady_clock::now();
          mixed_kernel<<<blocks, block_threads>>>(a.ref(), pct, ops, pages, uint64_t(pct) << 40, counts);
          check_cuda(cudaGetLastError(), "launch");
          check_cuda(cudaDeviceSynchronize(), "mixed kernel");
          const double kernel_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const request_status fs = cache->flush();
          const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const double cpu = ctl.poller_cpu_seconds() - cpu0;
          if (!fs.ok()) throw error("flush failed: " + describe(fs));
          const cache_stats st = cache->stats();
          const mixed_counts c = *counts;
          // The data after the run: word i still holds i (sampled).
          uint64_t bad_after = 0;
          if (loc == "hostmem") {
            const auto* h = static_cast<const uint64_t*>(t->host_pointer());
            for (uint64_t i = 0; i < bytes / 8; i += 4099) bad_after += h[i] != i;
          }
          if (pct == 0) read_only_secs = secs;
          const double ratio = secs > 0 ? read_only_secs / secs : 0;
          std::printf("mixed %s %s writers=%u%%: %.3f s (kernel %.3f, flush %.3f), %llu misses, %llu write-backs "
                      "(%llu by the cleaner), %.2f M accesses/s, read-only/this = %.2f, wrong %llu, failed %llu\n",
                      loc.c_str(), mode.c_str(), pct, secs, kernel_secs, secs - kernel_secs,
                      (unsigned long long)st.misses, (unsigned long long)st.writebacks, (unsigned long long)st.cleans,
                      double(c.reads + c.writes) / secs / 1e6, ratio, c.wrong + bad_after, c.failed);
          json j;
          j["benchmark"] = "mixed";
          j["clients"] = "gpu";
          j["commit"] = commit;
          j["device"] = prop.name;
          j["env"] = bench::deepwell_env();
          j["config"] = {{"location", loc},        {"mode", mode},      {"writer_pct", pct},     {"data_bytes", bytes},
                         {"cache_bytes", bytes / 20}, {"page_size", 4096}, {"warps", blocks * 8}, {"ops", ops},
                         {"pollers", pollers},     {"backend", ctl.backend_name()}, {"path", "controller"}};
          j["metrics"] = {{"seconds", secs},
                          {"kernel_seconds", kernel_secs},
                          {"flush_seconds", secs - kernel_secs},
                          {"reads", c.reads},
                          {"writes", c.writes},
                          {"misses", st.misses},
                          {"writebacks", st.writebacks},
                          {"cleans", st.cleans},
                          {"reaped", st.reaped},
                          {"controller_reads", ctl.total_counters().reads - rd0},
                          {"controller_writes", ctl.total_counters().writes - wr0},
                          {"poller_cpu_seconds", cpu},
                          {"wrong", c.wrong + bad_after},
                          {"failed", c.failed}};
          const double writebacks_per_s = double(st.writebacks) / secs;
          j["metrics"]["writebacks_per_s"] = writebacks_per_s;
          j["baselines"] = {{"read_only_seconds", read_only_secs}};
          j["ratios"] = {{"vs_read_only", ratio}};
          if (pct > 0) bench::note_writeback_vs_pwrite(j, pwrite_baseline, writebacks_per_s);
          if (!json_path.empty()) std::ofstream(json_path, std::ios::app) << j.dump() << "\n";
          if (c.wrong || c.failed || bad_after) status = 1;
        }
      }
    }
    cudaFree(counts);
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_mixed_bench: %s\n", e.what());
    return 2;
  }
}
