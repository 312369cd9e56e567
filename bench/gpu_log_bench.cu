// The write-ahead log from GPU warps: HCL (durable/log.hpp: each warp its
// own partition, entries striped so that a warp's append fills whole lines
// of one page) against a naive log (one global atomic tail, an entry at a
// time, each thread writing its 32-byte record contiguously; the same
// record format and checksum), both through the GPU page cache on the same
// kind of namespace. A run: every warp appends `entries` entries per lane,
// then makes them durable (HCL: one persist of the warp's rows; naive: each
// lane persists each of its records, the ranges it holds). Metric: durable
// log entries per second (kernel time, warm cache, best of --reps);
// ratios.hcl_vs_naive_log = HCL entries/s / naive entries/s on the file
// target (a buffered file, its pages in the page cache; flush = fdatasync),
// also given for host memory. Deterministic inputs (a hash of the thread
// and entry number).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench_common.cuh"
#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/log.hpp"
#include "deepwell/views/array.hpp"

using namespace deepwell;
using namespace deepwell::durable;
using deepwell::bench::mix;
using json = nlohmann::json;
namespace lf = deepwell::durable::log_format;

namespace {

constexpr unsigned block_threads = 256;
constexpr uint32_t max_entries = 32;

struct counts {
  unsigned long long entries, failed;
  unsigned int last;
};

__device__ void tally(counts* c, request_status s, unsigned long long entries) {
  if (threadIdx.x % 32 != 0) return;
  if (s.ok()) {
    atomicAdd(&c->entries, entries);
  } else {
    atomicAdd(&c->failed, 1ull);
    c->last = s.pack();
  }
}

// HCL: a transaction per warp in its own partition: `entries` appends (a
// row each, lane l's entry in column l), then one persist of the rows.
__global__ void hcl_kernel(log_ref log, uint32_t entries, uint64_t data_n, uint64_t salt, counts* c) {
  const gpu_full_warp w;
  const uint32_t p = warp_partition();
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  log_tx tx = log.begin(w, p, salt + p);
  for (uint32_t k = 0; k < entries; ++k) {
    const uint64_t h = mix(salt ^ (tid * max_entries + k));
    log.append(w, tx, true, {0, h % data_n, h});
  }
  const request_status s = log.persist(w, tx);
  tally(c, s, uint64_t(entries) * 32);
}

// The naive log: records of 8 words, one after another; a thread takes the
// next position with an atomic on the global tail, writes its record (the
// lanes of a warp each their own 32 bytes), and finally persists each
// record it wrote.
__global__ void naive_kernel(array_ref<uint32_t> lg, unsigned long long* tail, uint32_t entries, uint64_t data_n,
                             uint64_t nonce, uint64_t salt, counts* c) {
  const gpu_full_warp w;
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t capacity = lg.size() / lf::entry_words;
  uint64_t pos[max_entries];
  request_status s{};
  for (uint32_t k = 0; k < entries; ++k) {
    const uint64_t h = mix(salt ^ (tid * max_entries + k));
    pos[k] = atomicAdd(tail, 1ull) % capacity;
    const lf::record r = lf::record::entry(lf::redo_entry, 0, salt + tid / 32, h % data_n, h,
                                           lf::record_seed(nonce, 1, 0, uint32_t(pos[k]), uint32_t(pos[k] >> 32)));
    page_handle<uint32_t> ph = lg.page(w, pos[k] * lf::entry_words);
    if (ph.ok())
      for (uint32_t j = 0; j < lf::entry_words; ++j) ph.write(pos[k] * lf::entry_words + j, r.w[j]);
    else if (s.ok())
      s = ph.status();
    ph.release();
  }
  for (uint32_t k = 0; k < entries; ++k) {
    const request_status p = lg.persist(w, pos[k] * lf::entry_words, lf::entry_words);
    if (s.ok()) s = p;
  }
  const unsigned bad = w.ballot(0xFFFFFFFFu, !s.ok());
  if (bad) s = request_status::unpack(w.shfl(0xFFFFFFFFu, s.pack(), lowest_lane(bad)));
  tally(c, s, uint64_t(entries) * 32);
}

struct run_stats {
  double best = 0, median = 0;  // seconds
  uint64_t entries = 0;
  uint64_t flushes = 0, writebacks = 0, bytes_written = 0;
  bool failed = false;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit = "unknown", file_dir = "/var/tmp";
  std::vector<std::string> locations{"pagecache", "hostmem"};
  uint32_t entries = 8, warps_per_sm = 16, reps = 5;
  unsigned pollers = 4;
  CLI::App app{"deepwell GPU write-ahead log benchmark: HCL vs a naive log (global atomic tail)"};
  app.add_option("--locations", locations, "pagecache (a buffered file) | hostmem");
  app.add_option("--entries", entries, "entries per lane per run (1-32)");
  app.add_option("--warps-per-sm", warps_per_sm, "warps of the launch per SM");
  app.add_option("--reps", reps, "timed runs of each log (the best counts)");
  app.add_option("--pollers", pollers, "controller poller threads");
  app.add_option("--dir", file_dir, "directory of the log files");
  app.add_option("--json", json_path, "append the JSON object to this file");
  app.add_option("--commit", commit, "commit hash to record");
  CLI11_PARSE(app, argc, argv);
  if (entries < 1 || entries > max_entries) {
    std::fprintf(stderr, "--entries must be 1 to %u\n", max_entries);
    return 2;
  }
  try {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const uint32_t warps = uint32_t(prop.multiProcessorCount) * warps_per_sm;
    const uint32_t blocks = warps / (block_threads / 32);
    const uint64_t total_entries = uint64_t(blocks) * block_threads * entries;
    counts* c = nullptr;
    check_cuda(cudaMallocManaged(&c, sizeof(counts)), "cudaMallocManaged");
    unsigned long long* tail = nullptr;
    check_cuda(cudaMalloc(&tail, sizeof(*tail)), "cudaMalloc");
    json out;
    out["benchmark"] = "gpu_log";
    out["commit"] = commit;
    out["device"] = prop.name;
    out["env"] = bench::deepwell_env();
    out["config"] = {{"warps", blocks * (block_threads / 32)}, {"entries_per_lane", entries},
                     {"entry_bytes", lf::entry_words * 4}, {"page_size", 4096}, {"reps", reps}, {"pollers", pollers}};
    json results = json::object();
    json ratios = json::object();
    int status = 0;
    for (const std::string& loc : locations) {
      controller_config ccfg;
      ccfg.pollers = pollers;
      controller ctl(ccfg);
      const uint32_t rows = entries + 2;
      const uint64_t hcl_bytes = write_ahead_log::bytes_needed(blocks * (block_threads / 32), rows);
      const uint64_t naive_bytes = lf::round_up(total_entries * lf::entry_words * 4, 1 << 20);
      std::vector<std::string> files;
      auto make_target = [&](const std::string& name, uint64_t bytes) -> std::shared_ptr<target> {
        if (loc == "hostmem") return make_host_memory_target(bytes, true);
        const std::string path = file_dir + "/deepwell-log-bench-" + name + ".dat";
        ::unlink(path.c_str());
        file_options fo;
        fo.writable = true;
        fo.create = true;
        fo.create_size = bytes;
        files.push_back(path);
        return open_file_target(path, fo);
      };
      const uint32_t hcl_ns = ctl.add_namespace({make_target("hcl", hcl_bytes), 512, false});
      const uint32_t naive_ns = ctl.add_namespace({make_target("naive", naive_bytes), 512, false});
      const uint32_t data_ns = ctl.add_namespace({make_host_memory_target(1 << 20, true), 512, false});
      cache_config cc;
      cc.page_size = 4096;
      // Room for every warp an SM can hold to pin 32 pages (check_launch),
      // and for both logs twice over: the logs stay cached (warm).
      cc.capacity_bytes = std::max<uint64_t>(uint64_t(prop.multiProcessorCount) * 64 * 32 * 4096,
                                             (hcl_bytes + naive_bytes) * 2);
      cc.direct_tier = false;
      cc.direct_files = cache_config::file_tier::never;
      auto cache = make_gpu_page_cache(ctl, cc);
      cache->check_capacity(warps);
      array<uint64_t> data(cache, data_ns);
      array<uint32_t> naive(cache, naive_ns);
      log_config lc;
      lc.form = log_form::redo;
      lc.partitions = blocks * (block_threads / 32);
      lc.rows = rows;
      lc.tag = "gpu_log_bench";
      write_ahead_log log = write_ahead_log::create(cache, hcl_ns, {data}, lc);
      log.check_launch(lc.partitions);
      check_launch(*cache, hcl_kernel, blocks, block_threads);
      check_launch(*cache, naive_kernel, blocks, block_threads);
      const uint64_t nonce = 0x5EED;
      bench::timer tm;
      auto run = [&](bool hcl, uint64_t salt) -> double {
        std::memset(c, 0, sizeof(*c));
        if (hcl) log.checkpoint();  // frees the rows (not timed)
        check_cuda(cudaMemset(tail, 0, sizeof(*tail)), "cudaMemset");
        check_cuda(cudaDeviceSynchronize(), "sync");
        const log_ref lr = log.ref();
        tm.start();
        if (hcl)
          hcl_kernel<<<blocks, block_threads>>>(lr, entries, data.size(), salt, c);
        else
          naive_kernel<<<blocks, block_threads>>>(naive.ref(), tail, entries, data.size(), nonce, salt, c);
        check_cuda(cudaGetLastError(), "launch");
        const double secs = tm.stop();
        if (c->failed || c->entries != total_entries) {
          std::fprintf(stderr, "%s %s: %llu entries durable of %llu, %llu warps failed (%s)\n", loc.c_str(),
                       hcl ? "hcl" : "naive", c->entries, (unsigned long long)total_entries, c->failed,
                       describe(request_status::unpack(c->last)).c_str());
          status = 1;
        }
        return secs;
      };
      run_stats st[2];
      for (int v = 0; v < 2; ++v) run(v == 0, 1);  // warm-up: the log pages into the cache
      std::vector<double> secs[2];
      for (uint32_t r = 0; r < reps; ++r)
        for (int v = 0; v < 2; ++v) {
          cache->reset_stats();
          const uint64_t f0 = ctl.total_counters().flushes;
          secs[v].push_back(run(v == 0, 1000 + r));
          const cache_stats cs = cache->stats();
          st[v].flushes += ctl.total_counters().flushes - f0;
          st[v].writebacks += cs.writebacks;
          st[v].bytes_written += cs.bytes_written;
        }
      for (int v = 0; v < 2; ++v) {
        st[v].best = *std::min_element(secs[v].begin(), secs[v].end());
        st[v].median = median_of(secs[v]);
        st[v].entries = total_entries;
      }
      const double hcl_rate = double(total_entries) / st[0].best, naive_rate = double(total_entries) / st[1].best;
      const double ratio = hcl_rate / naive_rate;
      std::printf("log %s: HCL %.2f M entries/s (best %.3f ms, median %.3f ms, %.1f flushes, %.1f write-backs a run); "
                  "naive %.2f M entries/s (best %.3f ms, median %.3f ms, %.1f flushes, %.1f write-backs a run); "
                  "HCL / naive = %.2f\n",
                  loc.c_str(), hcl_rate / 1e6, st[0].best * 1e3, st[0].median * 1e3, double(st[0].flushes) / reps,
                  double(st[0].writebacks) / reps, naive_rate / 1e6, st[1].best * 1e3, st[1].median * 1e3,
                  double(st[1].flushes) / reps, double(st[1].writebacks) / reps, ratio);
      for (int v = 0; v < 2; ++v)
        results[loc][v == 0 ? "hcl" : "naive"] = {{"entries_per_second", double(total_entries) / st[v].best},
                                                   {"best_seconds", st[v].best},
                                                   {"median_seconds", st[v].median},
                                                   {"flushes_per_run", double(st[v].flushes) / reps},
                                                   {"writebacks_per_run", double(st[v].writebacks) / reps},
                                                   {"bytes_written_per_run", double(st[v].bytes_written) / reps}};
      ratios[loc == "pagecache" ? "hcl_vs_naive_log" : "hcl_vs_naive_log_" + loc] = ratio;
      for (const std::string& f : files) ::unlink(f.c_str());
    }
    if (!ratios.contains("hcl_vs_naive_log") && !ratios.empty()) ratios["hcl_vs_naive_log"] = ratios.begin().value();
    out["metrics"] = results;
    out["ratios"] = ratios;
    out["goals"] = {{"hcl_vs_naive_log", ">= 3 (GPM measured 3.6)"}};
    if (ratios.contains("hcl_vs_naive_log")) out["hcl_vs_naive_log"] = ratios["hcl_vs_naive_log"];
    std::printf("%s\n", out.dump().c_str());
    if (!json_path.empty()) std::ofstream(json_path, std::ios::app) << out.dump() << "\n";
    cudaFree(tail);
    cudaFree(c);
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_log_bench: %s\n", e.what());
    return 2;
  }
}
